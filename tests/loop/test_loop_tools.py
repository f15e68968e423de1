"""Tool scheduling, hooks, terminate, length handling, the circuit breaker, malformed arguments."""

from __future__ import annotations

import asyncio
from typing import Any

from ketch.llm import ToolResultMessage
from ketch.loop import AfterToolCallResult
from ketch.loop import BeforeToolCallResult
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import ToolCallInfo
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from support import collect


class Recorder:
    """Tools that log start/end in a shared list and wait on gates the test controls."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.gates: dict[str, asyncio.Event] = {}

    def tool(self, name: str, *, wait: bool = False, result: Any = None, **kw: Any) -> Tool:
        async def run(args: dict[str, Any], ctx: Any) -> Any:
            key = args.get("k", name)
            self.log.append(f"start {key}")
            if wait:
                gate = self.gates.setdefault(key, asyncio.Event())
                await gate.wait()
            self.log.append(f"end {key}")
            return result if result is not None else f"{key} ok"

        return Tool(name, "", {"type": "object", "properties": {"k": {"type": "string"}}}, run, **kw)


def results_of(messages: list[Any]) -> list[tuple[str, str, bool]]:
    return [(m.tool_call_id, m.text, m.is_error) for m in messages if isinstance(m, ToolResultMessage)]


async def test_sequential_config_runs_one_at_a_time() -> None:
    rec = Recorder()
    model = ScriptedModel([reply(tool_call("a", {"k": "1"}), tool_call("a", {"k": "2"})), "done"])
    cfg = LoopConfig(model=model, tool_execution="sequential")
    await run_loop("go", Conversation(tools=[rec.tool("a")]), cfg).result()
    assert rec.log == ["start 1", "end 1", "start 2", "end 2"]


async def test_parallel_runs_concurrently() -> None:
    rec = Recorder()
    release = asyncio.Event()

    async def releaser(args: dict[str, Any], ctx: Any) -> str:
        rec.log.append("release")
        rec.gates.setdefault("1", asyncio.Event()).set()
        release.set()
        return "r"

    tools = [rec.tool("a", wait=True), Tool("rel", "", None, releaser)]
    model = ScriptedModel([reply(tool_call("a", {"k": "1"}), tool_call("rel")), "done"])
    await run_loop("go", Conversation(tools=tools), LoopConfig(model=model)).result()
    assert rec.log == ["start 1", "release", "end 1"]


async def test_barrier_tool_blocks_everything_behind_it() -> None:
    rec = Recorder()
    order: list[str] = []

    async def barrier(args: dict[str, Any], ctx: Any) -> str:
        order.append("barrier start")
        await asyncio.sleep(0)
        order.append("barrier end")
        return "b"

    async def safe(args: dict[str, Any], ctx: Any) -> str:
        order.append(f"safe {args['k']}")
        return "s"

    schema = {"type": "object", "properties": {"k": {"type": "string"}}}
    tools = [Tool("barrier", "", None, barrier, sequential=True), Tool("safe", "", schema, safe)]
    model = ScriptedModel(
        [reply(tool_call("safe", {"k": "1"}), tool_call("barrier"), tool_call("safe", {"k": "2"})), "done"]
    )
    await run_loop("go", Conversation(tools=tools), LoopConfig(model=model)).result()
    assert order == ["safe 1", "barrier start", "barrier end", "safe 2"]
    del rec


async def test_sequential_decided_per_call() -> None:
    order: list[str] = []

    async def maybe(args: dict[str, Any], ctx: Any) -> str:
        order.append(f"start {args['k']}")
        await asyncio.sleep(0)
        order.append(f"end {args['k']}")
        return "ok"

    schema = {"type": "object", "properties": {"k": {"type": "string"}}}
    t = Tool("m", "", schema, maybe, sequential=lambda a: a.get("k") == "w")
    model = ScriptedModel([reply(tool_call("m", {"k": "r1"}), tool_call("m", {"k": "r2"}), tool_call("m", {"k": "w"})), "ok"])
    await run_loop("go", Conversation(tools=[t]), LoopConfig(model=model)).result()
    assert order == ["start r1", "start r2", "end r1", "end r2", "start w", "end w"]


async def test_concurrency_limit() -> None:
    running = 0
    peak = 0

    async def work(args: dict[str, Any], ctx: Any) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        running -= 1
        return "ok"

    t = Tool("w", "", None, work)
    model = ScriptedModel([reply(*[tool_call("w") for _ in range(6)]), "ok"])
    await run_loop("go", Conversation(tools=[t]), LoopConfig(model=model, max_tool_concurrency=2)).result()
    assert peak == 2


async def test_terminate_all_stops_after_batch() -> None:
    rec = Recorder()
    t = rec.tool("fin", result=ToolResult(content="final", terminate=True))
    model = ScriptedModel([reply(tool_call("fin"), tool_call("fin"))])
    result = await run_loop("go", Conversation(tools=[t]), LoopConfig(model=model)).result()
    assert result.end_reason == "stop"
    assert result.summary.turns == 1
    model.assert_complete()


async def test_terminate_needs_every_result() -> None:
    rec = Recorder()
    tools = [rec.tool("fin", result=ToolResult(content="final", terminate=True)), rec.tool("other")]
    model = ScriptedModel([reply(tool_call("fin"), tool_call("other")), "after"])
    result = await run_loop("go", Conversation(tools=tools), LoopConfig(model=model)).result()
    assert result.summary.turns == 2
    assert result.text == "after"


async def test_terminate_still_runs_follow_ups() -> None:
    rec = Recorder()
    t = rec.tool("fin", result=ToolResult(content="final", terminate=True))
    queued = [["follow"]]

    def follow_ups() -> list[Any]:
        from ketch.llm import UserMessage

        return [UserMessage(content=t) for t in queued.pop()] if queued else []

    model = ScriptedModel([reply(tool_call("fin")), "answered follow-up"])
    cfg = LoopConfig(model=model, get_follow_up_messages=follow_ups)
    result = await run_loop("go", Conversation(tools=[t]), cfg).result()
    assert result.text == "answered follow-up"
    assert [m.role for m in result.messages] == ["user", "assistant", "tool_result", "user", "assistant"]


async def test_length_stop_with_tool_calls_runs_none() -> None:
    rec = Recorder()
    model = ScriptedModel([reply(tool_call("a", id="c1"), stop_reason="length"), "retry"])
    result = await run_loop("go", Conversation(tools=[rec.tool("a")]), LoopConfig(model=model)).result()
    assert rec.log == []
    assert results_of(result.messages) == [
        (
            "c1",
            'Tool call "a" was not executed: the response hit the output token limit, so its arguments '
            "may be truncated. Re-issue the tool call with complete arguments.",
            True,
        )
    ]
    assert result.text == "retry"


async def test_length_recovery_injects_continue_at_most_three_times() -> None:
    model = ScriptedModel([reply("part", stop_reason="length") for _ in range(4)])
    result = await run_loop("go", Conversation(), LoopConfig(model=model)).result()
    assert result.summary.turns == 4
    injected = [m.content[0].text for m in result.messages[1:] if m.role == "user"]  # type: ignore[attr-defined]
    assert injected == [LoopConfig.__dataclass_fields__["length_recovery_prompt"].default] * 3
    assert result.end_reason == "stop"


async def test_circuit_breaker() -> None:
    async def bad(args: dict[str, Any], ctx: Any) -> str:
        raise RuntimeError("nope")

    t = Tool("bad", "", None, bad)
    model = ScriptedModel([reply(tool_call("bad")) for _ in range(3)] + ["giving up"])
    result = await run_loop("go", Conversation(tools=[t]), LoopConfig(model=model, max_tool_errors=2)).result()
    assert [r[1] for r in results_of(result.messages)] == [
        "RuntimeError: nope",
        "RuntimeError: nope",
        'Tool "bad" disabled after 2 consecutive errors',
    ]


async def test_before_tool_call_blocks_and_rewrites() -> None:
    seen: list[Any] = []

    async def echo(args: dict[str, Any], ctx: Any) -> str:
        seen.append(args)
        return "ran"

    def before(call: Any) -> BeforeToolCallResult | None:
        if call.args.get("k") == "deny":
            return BeforeToolCallResult(block=True)
        if call.args.get("k") == "why":
            return BeforeToolCallResult(block=True, reason="not allowed here")
        return BeforeToolCallResult(args={"k": "rewritten"})

    schema = {"type": "object", "properties": {"k": {"type": "string"}}}
    t = Tool("e", "", schema, echo)
    model = ScriptedModel(
        [reply(tool_call("e", {"k": "deny"}, id="a"), tool_call("e", {"k": "why"}, id="b"), tool_call("e", {"k": "x"}, id="c")), "ok"]
    )
    result = await run_loop("go", Conversation(tools=[t]), LoopConfig(model=model, before_tool_call=before)).result()
    assert results_of(result.messages) == [
        ("a", "Tool execution was blocked", True),
        ("b", "not allowed here", True),
        ("c", "ran", False),
    ]
    assert seen == [{"k": "rewritten"}]


async def test_before_tool_call_constructors() -> None:
    assert BeforeToolCallResult.blocked() == BeforeToolCallResult(block=True)
    assert BeforeToolCallResult.blocked("no", stop=True) == BeforeToolCallResult(block=True, reason="no", stop=True)
    assert BeforeToolCallResult.with_args({"k": 1}) == BeforeToolCallResult(args={"k": 1})

    async def echo(args: dict[str, Any], ctx: Any) -> str:
        return f"ran {args['k']}"

    def before(call: ToolCallInfo) -> BeforeToolCallResult:
        if call.tool_call.id == "a":
            return BeforeToolCallResult.blocked()
        return BeforeToolCallResult.with_args({"k": "rewritten"})

    schema = {"type": "object", "properties": {"k": {"type": "string"}}}
    model = ScriptedModel([reply(tool_call("e", {"k": "x"}, id="a"), tool_call("e", {"k": "y"}, id="b")), "ok"])
    cfg = LoopConfig(model=model, before_tool_call=before)
    result = await run_loop("go", Conversation(tools=[Tool("e", "", schema, echo)]), cfg).result()
    assert results_of(result.messages) == [("a", "Tool execution was blocked", True), ("b", "ran rewritten", False)]


async def test_blocked_with_stop_ends_the_run_after_the_batch() -> None:
    """A block with ``stop`` ends the run after this batch even though the batch's other
    call ran and returned normally (a tool result's ``terminate`` needs every result)."""
    rec = Recorder()

    def before(call: ToolCallInfo) -> BeforeToolCallResult | None:
        return BeforeToolCallResult.blocked("stopped by policy", stop=True) if call.tool_call.id == "b" else None

    model = ScriptedModel([reply(tool_call("a", id="a"), tool_call("a", id="b")), "never requested"])
    cfg = LoopConfig(model=model, before_tool_call=before)
    events = await collect(run_loop("go", Conversation(tools=[rec.tool("a")]), cfg))
    end = events[-1]
    assert end.type == "agent_end"
    assert (end.summary.end_reason, end.summary.turns) == ("denied", 1)
    assert end.summary.error == "stopped by policy"
    assert results_of(end.messages) == [("a", "a ok", False), ("b", "stopped by policy", True)]
    assert [e.type for e in events[-3:]] == ["message_end", "turn_end", "agent_end"]
    assert len(model.requests) == 1


async def test_after_tool_call_none_details_clears_and_unset_keeps() -> None:
    async def t_run(args: dict[str, Any], ctx: Any) -> ToolResult:
        return ToolResult(content="orig", details={"d": 1})

    def after(call: ToolCallInfo, result: ToolResult) -> AfterToolCallResult:
        if call.tool_call.id == "clear":
            return AfterToolCallResult(details=None)
        if call.tool_call.id == "swap":
            return AfterToolCallResult(details={"d": 2})
        return AfterToolCallResult(content="kept details")

    model = ScriptedModel([reply(tool_call("t", id="clear"), tool_call("t", id="swap"), tool_call("t", id="keep")), "ok"])
    cfg = LoopConfig(model=model, after_tool_call=after)
    result = await run_loop("go", Conversation(tools=[Tool("t", "", None, t_run)]), cfg).result()
    got = [(m.tool_call_id, m.text, m.details) for m in result.messages if isinstance(m, ToolResultMessage)]
    assert got == [("clear", "orig", None), ("swap", "orig", {"d": 2}), ("keep", "kept details", {"d": 1})]


async def test_after_tool_call_overrides_per_field() -> None:
    async def t_run(args: dict[str, Any], ctx: Any) -> ToolResult:
        return ToolResult(content="orig", details={"d": 1})

    def after(call: ToolCallInfo, result: ToolResult) -> AfterToolCallResult:
        assert (call.tool_call.id, call.args, result.text) == ("c", {}, "orig")
        return AfterToolCallResult(content="changed", is_error=True)

    model = ScriptedModel([reply(tool_call("t", id="c")), "ok"])
    cfg = LoopConfig(model=model, after_tool_call=after)
    result = await run_loop("go", Conversation(tools=[Tool("t", "", None, t_run)]), cfg).result()
    tr = result.messages[2]
    assert isinstance(tr, ToolResultMessage)
    assert (tr.text, tr.is_error, tr.details) == ("changed", True, {"d": 1})


async def test_hook_exceptions_become_error_results() -> None:
    def before(call: Any) -> None:
        raise ValueError("before broke")

    def after(call: Any, result: Any) -> None:
        raise ValueError("after broke")

    rec = Recorder()
    model = ScriptedModel([reply(tool_call("a", id="c")), reply(tool_call("a", id="d")), "ok"])
    calls = {"n": 0}

    def before_once(call: Any) -> None:
        calls["n"] += 1
        if calls["n"] == 1:
            before(call)

    cfg = LoopConfig(model=model, before_tool_call=before_once, after_tool_call=after)
    result = await run_loop("go", Conversation(tools=[rec.tool("a")]), cfg).result()
    assert results_of(result.messages) == [("c", "ValueError: before broke", True), ("d", "ValueError: after broke", True)]
    assert result.text == "ok"


async def test_middlewares_wrap_outermost_first() -> None:
    order: list[str] = []

    def mw(name: str) -> Any:
        async def wrap(call: Any, nxt: Any) -> Any:
            order.append(f"{name} in")
            result = await nxt({**call.args, name: True})
            order.append(f"{name} out")
            return result

        return wrap

    async def t_run(args: dict[str, Any], ctx: Any) -> str:
        order.append(f"tool {sorted(args)}")
        return "ok"

    model = ScriptedModel([reply(tool_call("t", {})), "ok"])
    cfg = LoopConfig(model=model, middlewares=[mw("outer"), mw("inner")])
    await run_loop("go", Conversation(tools=[Tool("t", "", None, t_run)]), cfg).result()
    assert order == ["outer in", "inner in", "tool ['inner', 'outer']", "inner out", "outer out"]


async def test_tool_timeout() -> None:
    async def hang(args: dict[str, Any], ctx: Any) -> str:
        await asyncio.Event().wait()
        return "never"

    model = ScriptedModel([reply(tool_call("h", id="c")), "ok"])
    tool = Tool("h", "", None, hang, timeout=0.01)
    result = await run_loop("go", Conversation(tools=[tool]), LoopConfig(model=model)).result()
    assert results_of(result.messages) == [("c", 'Tool "h" timed out after 0.01s', True)]


async def test_malformed_arguments() -> None:
    rec = Recorder()
    model = ScriptedModel([reply(tool_call("a", id="c", raw='{"k": "x')), "ok"])
    result = await run_loop("go", Conversation(tools=[rec.tool("a")]), LoopConfig(model=model)).result()
    (tr,) = [m for m in result.messages if isinstance(m, ToolResultMessage)]
    assert tr.is_error
    assert tr.text.startswith('Tool "a" received malformed JSON arguments: ')
    assert tr.text.endswith('Raw arguments:\n{"k": "x')
    assert rec.log == []


async def test_tool_events_have_durations_and_ids() -> None:
    rec = Recorder()
    model = ScriptedModel([reply(tool_call("a", id="c9")), "ok"])
    events = await collect(run_loop("go", Conversation(tools=[rec.tool("a")]), LoopConfig(model=model)))
    (end,) = [e for e in events if e.type == "tool_execution_end"]
    assert (end.tool_call_id, end.tool_name, end.is_error) == ("c9", "a", False)
    assert end.duration >= 0


async def test_schema_validation_errors_reach_the_model() -> None:
    rec = Recorder()
    schema = {
        "type": "object",
        "properties": {"days": {"type": "integer"}, "city": {"type": "string"}},
        "required": ["city"],
        "additionalProperties": False,
    }

    async def weather(args: dict[str, Any], ctx: Any) -> str:
        rec.log.append(repr(args))
        return "sunny"

    t = Tool("weather", "", schema, weather)
    model = ScriptedModel(
        [reply(tool_call("weather", {"days": "abc", "citty": "Paris"}, id="a"),
               tool_call("weather", {"days": "3", "city": "Oslo"}, id="b")), "ok"]
    )
    result = await run_loop("go", Conversation(tools=[t]), LoopConfig(model=model)).result()
    (bad, good) = results_of(result.messages)
    assert bad == (
        "a",
        'Validation failed for tool "weather":\n'
        "  - city: missing required property\n"
        '  - days: expected integer, got string "abc"\n'
        "  - citty: unknown property\n\n"
        "Received arguments:\n"
        '{\n  "days": "abc",\n  "citty": "Paris"\n}',
        True,
    )
    assert good == ("b", "sunny", False)
    assert rec.log == ["{'days': 3, 'city': 'Oslo'}"]


async def test_tools_get_the_configs_deps_typed() -> None:
    class Deps:
        def __init__(self, user: str) -> None:
            self.user = user

    seen: list[Any] = []

    async def whoami(args: dict[str, Any], ctx: ToolContext[Deps]) -> str:
        seen.append(ctx.deps)
        return ctx.deps.user

    deps = Deps("ada")
    cfg = LoopConfig[Deps](model=ScriptedModel([reply(tool_call("w", id="c")), "ok"]), deps=deps)
    result = await run_loop("go", Conversation(tools=[Tool("w", "", None, whoami)]), cfg).result()
    assert results_of(result.messages) == [("c", "ada", False)]
    assert seen == [deps]

    seen.clear()
    plain = LoopConfig(model=ScriptedModel([reply(tool_call("w", id="d")), "ok"]))
    await run_loop("go", Conversation(tools=[Tool("w", "", None, lambda a, ctx: seen.append(ctx.deps))]), plain).result()
    assert seen == [None]
