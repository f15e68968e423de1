"""A run as an ATIF trajectory (Harbor's Agent Trajectory Interchange Format, v1.7).

One step per message: the system prompt (when given) and each user message are steps of
source ``system``/``user``; each assistant message is an ``agent`` step (one model call:
``llm_call_count`` 1) with its text as ``message``, its thinking as
``reasoning_content``, its tool calls (``tool_call_id``, ``function_name``,
``arguments``), the results of those calls as its ``observation`` (``source_call_id``,
``content``) and its token usage and cost as ``metrics``. Tool results are not steps of
their own. ``final_metrics`` sums the agent steps.

The field names and rules are those of Harbor's pydantic models
(``harbor.models.trajectories``: ``Trajectory``, ``Agent``, ``Step``, ``ToolCall``,
``Observation``, ``ObservationResult``, ``Metrics``, ``FinalMetrics``).
"""

from __future__ import annotations

import datetime
from collections.abc import Sequence
from typing import Any

from ..llm import AssistantMessage
from ..llm import Message
from ..llm import TextContent
from ..llm import ThinkingContent
from ..llm import ToolCall
from ..llm import ToolResultMessage
from ..llm import UserMessage
from ..llm import message_from_dict

__all__ = ["ATIF_VERSION", "to_atif"]

ATIF_VERSION = "ATIF-v1.7"
"""The ATIF schema version :func:`to_atif` writes."""


def _time(message: Message) -> str | None:
    stamp = getattr(message, "timestamp", None)
    if not isinstance(stamp, (int, float)) or stamp <= 0:
        return None
    return datetime.datetime.fromtimestamp(stamp, tz=datetime.UTC).isoformat().replace("+00:00", "Z")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.text for b in content if isinstance(b, TextContent))


def to_atif(
    messages: Sequence[Message | dict[str, Any]],
    *,
    session_id: str,
    agent_name: str = "ketch",
    agent_version: str | None = None,
    model_name: str | None = None,
    system_prompt: str | None = None,
) -> dict[str, Any]:
    """The trajectory of ``messages`` (messages or :func:`ketch.message_to_dict` dicts)
    as an ATIF object (a dict ready for JSON); see the module doc."""
    if agent_version is None:
        from importlib.metadata import version

        agent_version = version("ketch")
    steps: list[dict[str, Any]] = []
    by_call: dict[str, dict[str, Any]] = {}

    def add(step: dict[str, Any]) -> dict[str, Any]:
        step = {"step_id": len(steps) + 1, **step}
        steps.append(step)
        return step

    if system_prompt:
        add({"source": "system", "message": system_prompt})
    totals = {"prompt": 0, "completion": 0, "cached": 0, "cost": 0.0}
    for item in messages:
        m = message_from_dict(item) if isinstance(item, dict) else item
        when = _time(m)
        stamp = {"timestamp": when} if when else {}
        if isinstance(m, UserMessage):
            add({**stamp, "source": "user", "message": _text(m.content)})
        elif isinstance(m, AssistantMessage):
            u = m.usage
            step: dict[str, Any] = {**stamp, "source": "agent", "message": m.text}
            if m.model:
                step["model_name"] = m.model
            step["llm_call_count"] = 1
            thinking = "".join(b.thinking for b in m.content if isinstance(b, ThinkingContent))
            if thinking:
                step["reasoning_content"] = thinking
            calls = [c for c in m.content if isinstance(c, ToolCall)]
            if calls:
                step["tool_calls"] = [
                    {"tool_call_id": c.id, "function_name": c.name, "arguments": c.args} for c in calls
                ]
            prompt = u.input + u.cache_read + u.cache_write
            step["metrics"] = {
                "prompt_tokens": prompt,
                "completion_tokens": u.output,
                "cached_tokens": u.cache_read,
                "cost_usd": u.cost.total,
            }
            totals["prompt"] += prompt
            totals["completion"] += u.output
            totals["cached"] += u.cache_read
            totals["cost"] += u.cost.total
            if m.error_message:
                step["extra"] = {"error": m.error_message}
            added = add(step)
            for c in calls:
                by_call[c.id] = added
        elif isinstance(m, ToolResultMessage):
            owner = by_call.get(m.tool_call_id)
            if owner is None:  # a result of a call not in the messages: leave it out
                continue
            result: dict[str, Any] = {"source_call_id": m.tool_call_id, "content": m.text}
            owner.setdefault("observation", {"results": []})["results"].append(result)
    agent: dict[str, Any] = {"name": agent_name, "version": agent_version}
    if model_name:
        agent["model_name"] = model_name
    return {
        "schema_version": ATIF_VERSION,
        "session_id": session_id,
        "agent": agent,
        "steps": steps,
        "final_metrics": {
            "total_prompt_tokens": totals["prompt"],
            "total_completion_tokens": totals["completion"],
            "total_cached_tokens": totals["cached"],
            "total_cost_usd": totals["cost"],
            "total_steps": len(steps),
        },
    }
