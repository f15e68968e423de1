"""What travels between client, workflow and activities: plain msgspec Structs.

Nothing here imports temporalio; the workflow sandbox and the client both use it.
Payloads are passed to Temporal as builtins (``msgspec.to_builtins``) and converted
back with ``msgspec.convert``, so histories are plain JSON.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from ..llm import Message
from ..llm import Model
from ..llm import ThinkingLevel
from ..llm import get_model
from ..loop import RunSummary
from ..loop import Tool
from ..loop import ToolExecution

WORKFLOW_NAME = "ketch.agent"
"""The workflow type every durable agent runs as (the agent is in the input)."""

PUBLISH_ACTIVITY = "ketch.publish"
"""The activity that publishes the events a run produced after its last activity."""


def model_activity(agent: str) -> str:
    """The stable activity name of ``agent``'s model calls."""
    return f"{agent}.model"


def tool_activity(agent: str, tool: str) -> str:
    """The stable activity name of ``agent``'s tool ``tool``."""
    return f"{agent}.tool.{tool}"


class ActivitySettings(msgspec.Struct, kw_only=True, frozen=True):
    """Timeouts and retries of a durable agent's activities (seconds).

    ``heartbeat_timeout``: a worker that dies mid-call is noticed after this long and
    the call is retried on another worker. Retries back off from ``initial_interval``
    by ``backoff`` up to ``max_interval``; ``max_attempts`` counts every attempt (0: no
    limit). A rate-limited model call waits the server's ``Retry-After`` instead.
    """

    model_timeout: float = 600.0
    tool_timeout: float = 600.0
    heartbeat_timeout: float = 30.0
    initial_interval: float = 1.0
    backoff: float = 2.0
    max_interval: float = 60.0
    max_attempts: int = 5


class ToolDef(msgspec.Struct, kw_only=True, frozen=True):
    """A tool as the workflow knows it: what the model is shown and how it is scheduled."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = msgspec.field(default_factory=dict)
    sequential: bool = False
    read_only: bool = False
    requires_approval: bool = False
    pure: bool = False
    timeout: float | None = None


class AgentSpec(msgspec.Struct, kw_only=True, frozen=True):
    """The serialisable definition of a durable agent (part of every run's input)."""

    name: str
    model: str
    model_provider: str
    model_api: str
    model_id: str
    context_window: int
    system_prompt: str = ""
    tools: list[ToolDef] = msgspec.field(default_factory=list)
    thinking: ThinkingLevel = "off"
    max_tokens: int | None = None
    temperature: float | None = None
    max_turns: int | None = None
    max_budget_usd: float | None = None
    max_tool_concurrency: int = 16
    tool_execution: ToolExecution = "parallel"
    max_history_events: int = 10_000
    inline_limit: int = 256 * 1024
    approval_timeout: float | None = None
    activities: ActivitySettings = msgspec.field(default_factory=ActivitySettings)


def jsonable(value: Any) -> Any:
    """``value`` as JSON-ready builtins for Temporal's payloads (what msgspec cannot
    encode is written as its ``repr``): the worker's events and results, the workflow's
    outbox."""
    return msgspec.to_builtins(value, enc_hook=repr)


def _flag(tool: Tool, name: str) -> bool:
    value = getattr(tool, name)
    if callable(value):
        raise ValueError(
            f"tool {tool.name!r}: {name} is a function; a durable agent needs True or False "
            "(the workflow decides without running tool code)"
        )
    return bool(value)


class DurableAgent:
    """An ordinary agent definition that runs durably on Temporal.

    ``model`` is a ``"provider:model"`` string (resolved on the worker, with the
    provider's own retries off: Temporal retries) or a :class:`~ketch.llm.Model`
    (registered on the worker under ``provider:id``). ``tools`` are ordinary
    :class:`~ketch.loop.Tool` objects: each call runs as the activity
    ``<name>.tool.<tool>``; tools named in ``pure`` run inside the workflow instead
    (deterministic code only). ``deps`` is handed to tools on the worker as
    ``ToolContext.deps``. ``settings`` sets activity timeouts and retries.
    ``max_history_events``: the workflow continues as new (carrying the transcript)
    once its history is this long or Temporal suggests it. Payloads larger than
    ``inline_limit`` bytes are kept out of the history (see :func:`build_worker`).
    ``approval_timeout``: seconds of workflow time a run paused for approval waits for
    a decision before the calls are denied (None: as long as it takes).

    The same definition is used by the client (:meth:`start`) and the worker
    (:func:`build_worker`).
    """

    def __init__(
        self,
        name: str,
        model: str | Model,
        *,
        system_prompt: str = "",
        tools: Sequence[Tool] = (),
        pure: Sequence[str] = (),
        thinking: ThinkingLevel = "off",
        max_tokens: int | None = None,
        temperature: float | None = None,
        max_turns: int | None = None,
        max_budget_usd: float | None = None,
        max_tool_concurrency: int = 16,
        tool_execution: ToolExecution = "parallel",
        max_history_events: int = 10_000,
        inline_limit: int = 256 * 1024,
        approval_timeout: float | None = None,
        settings: ActivitySettings | None = None,
        deps: Any = None,
    ) -> None:
        if not name or "." in name or "/" in name:
            raise ValueError(f"agent name must be non-empty without '.' or '/', got {name!r}")
        names = [t.name for t in tools]
        for p in pure:
            if p not in names:
                raise ValueError(f"pure tool {p!r} is not one of the agent's tools {sorted(names)}")
        self.name = name
        self.model: Model = get_model(model) if isinstance(model, str) else model
        self.model_name = model if isinstance(model, str) else f"{model.provider}:{model.id}"
        self.tools: list[Tool] = list(tools)
        self.deps = deps
        from . import _pure

        for t in self.tools:
            if t.name in pure:
                _pure.register(name, t)
        self.spec = AgentSpec(
            name=name,
            model=self.model_name,
            model_provider=self.model.provider,
            model_api=self.model.api,
            model_id=self.model.id,
            context_window=self.model.context_window,
            system_prompt=system_prompt,
            tools=[
                ToolDef(
                    name=t.name,
                    description=t.description,
                    parameters=t.parameters,
                    sequential=_flag(t, "sequential"),
                    read_only=_flag(t, "read_only"),
                    requires_approval=_flag(t, "requires_approval"),
                    pure=t.name in pure,
                    timeout=t.timeout,
                )
                for t in tools
            ],
            thinking=thinking,
            max_tokens=max_tokens,
            temperature=temperature,
            max_turns=max_turns,
            max_budget_usd=max_budget_usd,
            max_tool_concurrency=max_tool_concurrency,
            tool_execution=tool_execution,
            max_history_events=max_history_events,
            inline_limit=inline_limit,
            approval_timeout=approval_timeout,
            activities=settings or ActivitySettings(),
        )

    def __repr__(self) -> str:
        return f"DurableAgent(name={self.name!r}, model={self.model_name!r}, tools={[t.name for t in self.tools]})"


class RunInput(msgspec.Struct, kw_only=True):
    """The workflow's input (also what it continues as new with)."""

    agent: AgentSpec
    prompts: list[dict[str, Any]] = msgspec.field(default_factory=list)
    transcript: list[dict[str, Any]] = msgspec.field(default_factory=list)
    transcript_ref: str | None = None
    events_url: str | None = None
    # carried across continue-as-new
    run_start: int = 0
    summary: dict[str, Any] | None = None
    steering: list[dict[str, Any]] = msgspec.field(default_factory=list)
    follow_ups: list[dict[str, Any]] = msgspec.field(default_factory=list)
    outbox: list[dict[str, Any]] = msgspec.field(default_factory=list)
    seq: int = 0
    generation: int = 0


class DurableResult(msgspec.Struct, kw_only=True):
    """A finished durable run: the messages it added, its summary, the whole transcript."""

    messages: list[Message]
    summary: RunSummary
    transcript: list[Message]
    generations: int = 1
    """How many workflow runs (1 + continue-as-new count) the run took."""


def messages_builtins(messages: Sequence[Message]) -> list[dict[str, Any]]:
    """Messages as plain JSON values."""
    return [msgspec.to_builtins(m) for m in messages]
