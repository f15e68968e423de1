"""The durable agents the Temporal tests run, in worker subprocesses and in-process.

Loaded by ``ketch worker --app temporal_app:app`` (with this directory on ``PYTHONPATH``). The
model is a FunctionModel whose replies follow from the transcript alone, so any worker
process answers a retried call as the first one would. ``KETCH_TEMPORAL_DIR`` is where
the tools keep their side effects and the kill switches:

- ``effects.jsonl``: one line per effect of the ``effect`` tool, keyed by the call's
  idempotency key (a repeated key is skipped); ``calls.jsonl``: one line per execution.
- ``hang-tool`` / ``hang-model``: when present, the first ``effect`` call (after its
  effect) / the second model call (after some text) hangs once, for the test to kill
  the worker there; the file is removed when it hangs.
- ``gate``: the ``gate`` tool waits until this file exists.
- ``die-after-write``: when present, the first ``write`` of the ``writer`` agent kills its
  worker process after the file changed, before the call's result is recorded (the
  file is removed as it dies): a fault hook, for the exactly-once tests.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from ketch import Agent
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.loop import GuardrailResult
from ketch.loop import InputCheck
from ketch.loop import ToolContext
from ketch.loop import UsageLimits
from ketch.loop import input_guardrail
from ketch.loop import stop_after_tool
from ketch.temporal import ActivitySettings
from ketch.temporal import DurableAgent
from ketch.testing import FunctionModel
from ketch.testing import Reply
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import coding_tools
from ketch.tools import tool

SETTINGS = ActivitySettings(heartbeat_timeout=2.0, initial_interval=0.1, max_interval=0.5, max_attempts=20)


def _dir() -> Path:
    return Path(os.environ["KETCH_TEMPORAL_DIR"])


def _append(name: str, record: dict[str, Any]) -> None:
    with open(_dir() / name, "a") as f:
        f.write(json.dumps(record) + "\n")


def _take(name: str) -> bool:
    """Remove the switch file ``name``; True if it was there."""
    try:
        (_dir() / name).unlink()
        return True
    except FileNotFoundError:
        return False


@tool
async def effect(n: int, ctx: ToolContext[Any]) -> str:
    """Record a side effect once per idempotency key."""
    key = ctx.idempotency_key
    _append("calls.jsonl", {"key": key, "n": n})
    path = _dir() / "effects.jsonl"
    done = {json.loads(line)["key"] for line in path.read_text().splitlines()} if path.exists() else set()
    if key not in done:
        _append("effects.jsonl", {"key": key, "n": n})
    if _take("hang-tool"):
        await ctx.report("effect recorded")
        await asyncio.Event().wait()
    return f"effect {n}"


@tool
async def gate(ctx: ToolContext[Any]) -> str:
    """Wait until the test opens the gate."""
    await ctx.report("waiting")
    while not (_dir() / "gate").exists():  # noqa: ASYNC110  (a file another process creates)
        await asyncio.sleep(0.02)
    return "gate open"


@tool(requires_approval=True)
def danger(what: str) -> str:
    """Something that needs the user's approval."""
    return f"did {what}"


@tool
def double(x: int) -> int:
    """A pure tool: runs inside the workflow."""
    return 2 * x


def _texts(request: Request) -> list[str]:
    out = []
    for m in request.messages:
        if isinstance(m, UserMessage):
            content = m.content
            out.append(content if isinstance(content, str) else "".join(
                b.text for b in content if isinstance(b, TextContent)
            ))
    return out


def _replies(request: Request, options: StreamOptions) -> Reply:
    users = _texts(request)
    prompt = users[0]
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    n = len(results)
    if prompt.startswith("rounds "):
        rounds = int(prompt.split()[1])
        if n == 1 and _take("hang-model"):
            return reply("half of a reply that never ends", hang=True, chunk_size=4)
        if n < rounds:
            return reply(f"round {n}", tool_call("effect", {"n": n}, id=f"call_{n}"))
        return reply(f"done after {n} rounds")
    if prompt == "gate":
        if n == 0:
            return reply("waiting at the gate", tool_call("gate", {}, id="call_gate"))
        return reply("seen: " + ", ".join(users))
    if prompt == "approve":
        if n == 0:
            return reply("asking", tool_call("danger", {"what": "it"}, id="call_danger"))
        return reply("after approval: " + results[-1].content[0].text)  # type: ignore[union-attr]
    if prompt == "pure":
        if n == 0:
            return reply("doubling", tool_call("double", {"x": 21}, id="call_double"))
        return reply("got " + results[-1].content[0].text)  # type: ignore[union-attr]
    return reply(f"echo: {prompt}")


def model() -> FunctionModel:
    """The scripted model (a fresh one per process)."""
    return FunctionModel(_replies, provider="scripted", api="scripted", id="transcript-driven")


_DURABLE = frozenset({"pure", "settings", "max_history_events", "inline_limit", "approval_timeout"})


def agent(**overrides: Any) -> DurableAgent:
    """The test agent: ``overrides`` are DurableAgent keywords or the Agent's."""
    durable: dict[str, Any] = {"pure": ["double"], "settings": SETTINGS}
    options: dict[str, Any] = {"system_prompt": "You are a test agent.", "tools": [effect, gate, danger, double]}
    for key, value in overrides.items():
        (durable if key in _DURABLE else options)[key] = value
    return DurableAgent(Agent(model(), **options), name="tester", **durable)


def _writes(request: Request, options: StreamOptions) -> Reply:
    results = [m for m in request.messages if isinstance(m, ToolResultMessage)]
    if _texts(request)[0] == "shell":  # a read-only command, then a write: bash decides per call
        if not results:
            return reply("looking", tool_call("bash", {"command": "echo hi"}, id="call_b"))
        if len(results) == 1:
            return reply("noting", tool_call("write", {"path": "seen.txt", "content": "hi\n"}, id="call_w"))
        return reply("done")
    if not results:
        return reply("writing", tool_call("write", {"path": "out.txt", "content": "written once\n"}, id="call_w"))
    return reply("told: " + results[-1].content[0].text)  # type: ignore[union-attr]


def writer() -> DurableAgent:
    """An agent with the built-in coding tools in ``<KETCH_TEMPORAL_DIR>/work``."""
    model = FunctionModel(_writes, provider="scripted", api="scripted", id="writer")
    agent = Agent(
        model,
        tools=coding_tools(_dir() / "work"),
        guardrails=[_no_shouting],
        stop_when=[stop_after_tool("ls")],
        usage_limits=UsageLimits(tool_calls=10),
    )
    return DurableAgent(agent, name="writer", settings=SETTINGS)


@input_guardrail
def _no_shouting(check: InputCheck) -> GuardrailResult | None:
    """A worker-side hook that runs inside the workflow."""
    return GuardrailResult.trip("no shouting") if "!!!" in repr([m.content for m in check.prompts]) else None


def _install_fault_hook() -> None:
    from ketch.tools import _idempotency

    recorded = _idempotency.remember

    def remember(ctx: Any, result: Any) -> Any:
        if _take("die-after-write"):
            os._exit(137)  # the worker dies between the write and its record
        return recorded(ctx, result)

    _idempotency.remember = remember  # type: ignore[assignment]


def app() -> dict[str, Any]:
    """What ``ketch worker --app temporal_app:app`` runs."""
    _install_fault_hook()
    return {"agents": [agent(), writer()], "sticky_timeout": 1.0}
