"""White-box test: imports ketch implementation modules (private) directly.

The stateful Agent: prompts, listeners, queues, abort, continue, inject, phases, sync facade."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from ketch import Agent
from ketch.llm import AssistantMessage
from ketch.llm import ImageContent
from ketch.llm import TextContent
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.loop import Tool
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from support import describe


def noop(name: str = "noop", **kw: Any) -> Tool:
    async def run(args: dict[str, Any], ctx: Any) -> str:
        return "ok"

    return Tool(name, "", None, run, **kw)


async def test_prompt_returns_result_and_updates_transcript() -> None:
    agent = Agent(ScriptedModel([reply(tool_call("noop")), "all done"]), system_prompt="be brief", tools=[noop()])
    result = await agent.prompt("do it")
    assert result.text == "all done"
    assert [m.role for m in agent.messages] == ["user", "assistant", "tool_result", "assistant"]
    assert result.messages == agent.messages
    assert agent.state.is_running is False
    assert agent.state.usage.total_tokens == result.usage.total_tokens > 0
    assert agent.phase.kind == "done"
    assert agent.phase.is_terminal


async def test_prompt_with_images() -> None:
    model = ScriptedModel(["a cat"])
    agent = Agent(model)
    img = ImageContent(data="aGVsbG8=", mime_type="image/png")
    await agent.prompt("what is this?", images=[img])
    sent = model.requests[0].messages[0]
    assert isinstance(sent, UserMessage)
    assert sent.content == [TextContent(text="what is this?"), img]


async def test_listeners_in_order_with_state_updated() -> None:
    agent = Agent(ScriptedModel(["hello"]))
    seen: list[str] = []

    def first(ev: Any) -> None:
        seen.append(f"1:{describe(ev)}")
        if ev.type == "message_end" and ev.message.role == "assistant":
            assert agent.messages[-1] is ev.message
            assert agent.state.streaming_message is None

    async def second(ev: Any) -> None:
        await asyncio.sleep(0)
        seen.append(f"2:{describe(ev)}")

    agent.subscribe(first)
    unsubscribe = agent.subscribe(second)
    await agent.prompt("hi")
    assert seen[:4] == ["1:agent_start", "2:agent_start", "1:turn_start", "2:turn_start"]
    assert seen[-2:] == ["1:agent_end", "2:agent_end"]
    unsubscribe()
    seen.clear()
    agent.model = ScriptedModel(["again"])
    await agent.prompt("hi")
    assert all(s.startswith("1:") for s in seen)


async def test_listener_exception_does_not_break_run() -> None:
    agent = Agent(ScriptedModel(["fine"]))

    def bad(ev: Any) -> None:
        raise RuntimeError("listener bug")

    agent.subscribe(bad)
    result = await agent.prompt("hi")
    assert result.text == "fine"


async def test_prompt_while_running_raises() -> None:
    gate = asyncio.Event()

    async def wait(args: dict[str, Any], ctx: Any) -> str:
        await gate.wait()
        return "ok"

    agent = Agent(ScriptedModel([reply(tool_call("w")), "done"]), tools=[Tool("w", "", None, wait)])
    started = asyncio.Event()
    agent.subscribe(lambda ev: started.set() if ev.type == "tool_execution_start" else None)
    task = asyncio.ensure_future(agent.prompt("go"))
    await started.wait()
    assert agent.is_running
    assert agent.phase.kind == "tool_executing"
    assert agent.state.pending_tool_calls == frozenset({agent.messages[1].content[0].id})  # type: ignore[attr-defined]
    with pytest.raises(RuntimeError, match=r"^Agent is already running\. Use steer\(\) or follow_up\(\)"):
        await agent.prompt("again")
    with pytest.raises(RuntimeError, match="^Agent is already running. Wait for completion before continuing.$"):
        await agent.continue_loop()
    gate.set()
    await task
    await agent.wait_for_idle()
    assert not agent.is_running


async def test_steer_before_prompt_reaches_first_call() -> None:
    model = ScriptedModel(["ok"])
    agent = Agent(model)
    agent.steer("extra context")
    await agent.prompt("hi")
    assert [m.content[0].text for m in model.requests[0].messages] == ["hi", "extra context"]  # type: ignore[attr-defined]


async def test_steering_one_at_a_time_vs_all() -> None:
    for mode, expected_calls in (("one_at_a_time", 2), ("all", 1)):
        model = ScriptedModel(["a", "b", "c"])
        agent = Agent(model, steering_mode=mode)  # type: ignore[arg-type]

        def on_event(ev: Any, agent: Agent = agent) -> None:
            if ev.type == "turn_start" and ev.turn == 1:
                agent.steer("s1")
                agent.steer("s2")

        agent.subscribe(on_event)
        await agent.prompt("hi")
        assert len(model.requests) == expected_calls, mode


async def test_follow_up_modes() -> None:
    model = ScriptedModel(["a", "b", "c"])
    agent = Agent(model, follow_up_mode="all")
    agent.follow_up("f1")
    agent.follow_up("f2")
    await agent.prompt("hi")
    assert len(model.requests) == 2
    assert [m.content[0].text for m in model.requests[1].messages[-2:]] == ["f1", "f2"]  # type: ignore[attr-defined]
    assert not agent.has_queued_messages()


async def test_abort_restores_drained_uncommitted_queue_messages() -> None:
    model = ScriptedModel([reply("thinking...", hang=True), "second run"])
    agent = Agent(model)
    streamed = asyncio.Event()

    def on_event(ev: Any) -> None:
        if ev.type == "message_update" and ev.event.type == "text_end":
            streamed.set()

    agent.subscribe(on_event)
    task = asyncio.ensure_future(agent.prompt("hi"))
    await streamed.wait()
    agent.follow_up("later")
    agent.abort()
    result = await task
    assert result.end_reason == "aborted"
    assert agent.phase.kind == "aborted"
    assert agent.follow_ups.peek()[0].content[0].text == "later"  # type: ignore[attr-defined]


async def test_drained_follow_up_is_restored_when_run_ends_before_commit() -> None:
    model = ScriptedModel(["one"])
    agent = Agent(model, max_turns=1)
    agent.follow_up("queued")
    result = await agent.prompt("hi")
    # the follow-up was drained at the would-be end, but max_turns ended the run first
    assert result.end_reason == "max_turns"
    assert [m.content[0].text for m in agent.follow_ups.peek()] == ["queued"]  # type: ignore[attr-defined]
    model.add("two")
    result = await agent.continue_loop()
    assert result.text == "two"
    assert not agent.has_queued_messages()
    assert [m.role for m in agent.messages] == ["user", "assistant", "user", "assistant"]


async def test_clear_queues_during_abort_drops_them() -> None:
    model = ScriptedModel(["one"])
    agent = Agent(model, max_turns=1)
    agent.follow_up("queued")

    def on_event(ev: Any) -> None:
        if ev.type == "agent_end":
            agent.clear_queues()

    agent.subscribe(on_event)
    await agent.prompt("hi")
    assert not agent.has_queued_messages()


async def test_continue_from_assistant_tail() -> None:
    model = ScriptedModel(["first", "steered answer"])
    agent = Agent(model)
    await agent.prompt("hi")
    with pytest.raises(ValueError, match="^Cannot continue from message role: assistant$"):
        await agent.continue_loop()
    agent.steer("one more thing")
    result = await agent.continue_loop()
    assert result.text == "steered answer"


async def test_continue_errors() -> None:
    agent = Agent(ScriptedModel())
    with pytest.raises(ValueError, match="^Cannot continue: no messages in context$"):
        await agent.continue_loop()


async def test_continue_after_tool_result() -> None:
    model = ScriptedModel(["resumed"])
    from ketch.llm import ToolCall

    agent = Agent(
        model,
        messages=[
            UserMessage(content="hi"),
            AssistantMessage(content=[ToolCall(id="1", name="x")], stop_reason="tool_use"),
            ToolResultMessage(tool_call_id="1", tool_name="x", content=[TextContent(text="r")]),
        ],
    )
    result = await agent.continue_loop()
    assert result.text == "resumed"


async def test_inject() -> None:
    model = ScriptedModel(["first", "resumed"])
    agent = Agent(model)
    assert await agent.inject("queued") == "queued"
    assert len(agent.follow_ups) == 1
    agent.follow_ups.clear()
    await agent.prompt("hi")
    assert await agent.inject("resume please") == "resumed"
    await agent.wait_for_idle()
    assert agent.messages[-1].text == "resumed"  # type: ignore[attr-defined]


async def test_model_errors_do_not_raise_but_raise_for_error_does() -> None:
    from ketch.loop import RunError
    from ketch.testing import error_reply

    agent = Agent(ScriptedModel([error_reply("quota exceeded", kind="rate_limit")]))
    result = await agent.prompt("hi")
    assert result.end_reason == "error"
    assert agent.state.error == "quota exceeded"
    assert agent.phase.kind == "error"
    with pytest.raises(RunError, match="^Run ended with error: quota exceeded$"):
        result.raise_for_error()


async def test_changes_during_run_apply_next_run() -> None:
    gate = asyncio.Event()

    async def wait(args: dict[str, Any], ctx: Any) -> str:
        await gate.wait()
        return "ok"

    first = ScriptedModel([reply(tool_call("w")), "from first"])
    agent = Agent(first, tools=[Tool("w", "", None, wait)], system_prompt="v1")
    started = asyncio.Event()
    agent.subscribe(lambda ev: started.set() if ev.type == "tool_execution_start" else None)
    task = asyncio.ensure_future(agent.prompt("go"))
    await started.wait()
    second = ScriptedModel(["from second"])
    agent.model = second
    agent.system_prompt = "v2"
    gate.set()
    assert (await task).text == "from first"
    assert [r.system_prompt for r in first.requests] == ["v1", "v1"]
    await agent.prompt("again")
    assert second.requests[0].system_prompt == "v2"


async def test_reset() -> None:
    agent = Agent(ScriptedModel(["x"]))
    await agent.prompt("hi")
    agent.follow_up("f")
    agent.reset()
    assert agent.messages == []
    assert not agent.has_queued_messages()
    assert agent.state.usage.total_tokens == 0


def test_prompt_sync_outside_loop() -> None:
    agent = Agent(ScriptedModel(["sync works"]))
    assert agent.prompt_sync("hi").text == "sync works"


async def test_prompt_sync_inside_loop_raises() -> None:
    agent = Agent(ScriptedModel(["x"]))
    with pytest.raises(RuntimeError, match="cannot be used inside a running event loop"):
        agent.prompt_sync("hi")


def test_unknown_option_is_clear_error() -> None:
    from ketch.loop._options import OPTION_NAMES

    with pytest.raises(TypeError) as err:
        Agent(ScriptedModel(), max_turn=3)  # type: ignore[call-arg]
    allowed = ", ".join(["model", "system_prompt", "tools", "skills", "messages", "steering_mode", "follow_up_mode", "session", *OPTION_NAMES])
    assert str(err.value) == (
        f"Agent() got an unexpected keyword argument 'max_turn' (did you mean 'max_turns'?); allowed: {allowed}"
    )


def test_an_own_parameter_misspelt_is_suggested_too() -> None:
    with pytest.raises(TypeError, match=r"^Agent\(\) got an unexpected keyword argument 'system_promt' \(did you mean 'system_prompt'\?\); allowed: model, "):
        Agent(ScriptedModel(), system_promt="x")  # type: ignore[call-arg]


def test_a_name_like_no_option_has_no_suggestion() -> None:
    with pytest.raises(TypeError, match=r"^Agent\(\) got an unexpected keyword argument 'zzz'; allowed: model, "):
        Agent(ScriptedModel(), zzz=1)  # type: ignore[call-arg]


def test_options_take_loop_config_defaults_and_given_values() -> None:
    import dataclasses

    from ketch import LoopConfig

    agent = Agent(ScriptedModel(), max_turns=3, max_tool_concurrency=2, options=None)
    defaults = LoopConfig(model=ScriptedModel())
    for f in dataclasses.fields(LoopConfig):
        if f.name in ("model", "max_turns", "max_tool_concurrency"):
            continue
        assert getattr(agent.config, f.name) == getattr(defaults, f.name), f.name
    assert (agent.config.max_turns, agent.config.max_tool_concurrency) == (3, 2)


async def test_abort_when_idle_is_noop() -> None:
    agent = Agent(ScriptedModel(["x"]))
    agent.abort()
    assert (await agent.prompt("hi")).text == "x"


async def test_abort_mid_tool_no_leaks(no_leaked_tasks: None) -> None:
    started = asyncio.Event()

    async def hang(args: dict[str, Any], ctx: Any) -> str:
        started.set()
        await asyncio.Event().wait()
        return "never"

    agent = Agent(ScriptedModel([reply(tool_call("h", id="c"))]), tools=[Tool("h", "", None, hang)])
    task = asyncio.ensure_future(agent.prompt("go"))
    await started.wait()
    agent.abort()
    result = await task
    assert result.end_reason == "aborted"
    assert agent.messages[-1].text == "Tool execution was aborted."  # type: ignore[attr-defined]
    assert agent.state.pending_tool_calls == frozenset()


async def test_tools_see_the_agents_deps_through_their_context() -> None:
    seen: list[Any] = []

    async def inspect_deps(args: dict[str, Any], ctx: Any) -> str:
        seen.append((ctx.deps, ctx.call_id, ctx.tool_name, len(ctx.messages)))
        return "ok"

    deps = {"db": "handle"}
    tools = [Tool("i", "", None, inspect_deps)]
    agent = Agent(ScriptedModel([reply(tool_call("i", id="c1")), "done"]), tools=tools, deps=deps)
    await agent.prompt("go")
    assert seen == [(deps, "c1", "i", 2)]

    seen.clear()
    plain = Agent(ScriptedModel([reply(tool_call("i", id="c2")), "done"]), tools=tools)
    await plain.prompt("go")
    assert seen == [(None, "c2", "i", 2)]  # no deps given: None, not the agent


def _drift(config: type, options: type) -> list[str]:
    """What differs between a LoopConfig-like dataclass and an AgentOptions-like TypedDict."""
    import dataclasses

    from ketch.loop import AGENT_MANAGED

    fields = {f.name: f.type for f in dataclasses.fields(config)}
    keys = {k: v.__forward_arg__ for k, v in options.__annotations__.items()}
    problems = [f"{k}: no option" for k in fields if k not in keys and k not in AGENT_MANAGED]
    problems += [f"{k}: not a field" for k in keys if k not in fields]
    problems += [f"{k}: managed and an option" for k in keys if k in AGENT_MANAGED]
    problems += [f"{k}: {keys[k]} != {fields[k]}" for k in keys if k in fields and keys[k] != fields[k]]
    return problems


def test_agent_options_and_loop_config_cannot_drift() -> None:
    """One definition of an agent's options: every LoopConfig field is an AgentOptions
    key with the same annotation, or one the agent drives itself (AGENT_MANAGED)."""
    from ketch import AgentOptions
    from ketch import LoopConfig

    assert _drift(LoopConfig, AgentOptions) == []
    assert not AgentOptions.__required_keys__


def test_a_new_loop_config_field_without_an_agent_option_fails_the_drift_check() -> None:
    import dataclasses
    from typing import TypedDict

    from ketch import AgentOptions
    from ketch import LoopConfig

    @dataclasses.dataclass(kw_only=True)
    class Grown(LoopConfig):  # type: ignore[type-arg]
        new_knob: int = 1

    class Retyped(AgentOptions, total=False):  # type: ignore[type-arg]
        max_turns: int  # type: ignore[misc]

    assert _drift(Grown, AgentOptions) == ["new_knob: no option"]
    assert _drift(LoopConfig, Retyped) == ["max_turns: int != int | None"]
    assert _drift(LoopConfig, TypedDict("Extra", {"max_turns": "int | None", "colour": "str"})) == [  # type: ignore[operator]
        f"{k}: no option" for k in [f.name for f in dataclasses.fields(LoopConfig)]
        if k not in ("max_turns", "model", "get_steering_messages", "get_follow_up_messages", "phase")
    ] + ["colour: not a field"]


def test_the_agent_takes_its_own_parameters_and_the_options() -> None:
    import inspect

    from ketch._agent import AGENT_PARAMETERS

    params = inspect.signature(Agent.__init__).parameters
    assert [p for p in params if p != "self"] == [*AGENT_PARAMETERS, "options"]
    assert params["options"].kind is inspect.Parameter.VAR_KEYWORD


async def test_structured_result_parse() -> None:
    import msgspec

    from ketch.llm._structured import StructuredOutputError

    class Weather(msgspec.Struct):
        city: str
        temp: float

    agent = Agent(ScriptedModel(['```json\n{"city": "Oslo", "temp": 3.5}\n```', '{"city": "Oslo"}']))
    assert (await agent.prompt("weather?")).parse(Weather) == Weather(city="Oslo", temp=3.5)
    with pytest.raises(StructuredOutputError, match="temp"):
        (await agent.prompt("again")).parse(Weather)


# -- abort: drained messages, closed tool calls ------------------------------------------------


def said(messages: Any) -> list[tuple[str, str]]:
    """Role and text of each message (an aborted assistant message shows as 'aborted')."""
    out = []
    for m in messages:
        if isinstance(m, AssistantMessage) and m.stop_reason == "aborted":
            out.append(("assistant", "aborted:" + m.text))
        elif isinstance(m.content, str):
            out.append((m.role, m.content))
        else:
            out.append((m.role, "".join(getattr(b, "text", "") for b in m.content)))
    return out


def abort_once(agent: Agent, when: Any, then: Any = None) -> Any:
    """Subscribe a listener that aborts the run the first time ``when(event)`` holds."""
    fired: list[bool] = []

    def listener(ev: Any) -> None:
        if not fired and when(ev):
            fired.append(True)
            agent.abort()
            if then is not None:
                then()

    return agent.subscribe(listener)


def ends(text: str) -> Any:
    return lambda ev: ev.type == "message_end" and said([ev.message]) == [("user", text)]


async def test_abort_between_steering_messages_in_all_mode_requeues_the_rest() -> None:
    model = ScriptedModel(["answer"])
    agent = Agent(model, steering_mode="all")
    agent.steer("s1")
    agent.steer("s2")
    stop = abort_once(agent, ends("s1"))
    result = await agent.prompt("hi")
    # s1 is committed, s2 is not, and no model call starts once aborted.
    assert said(result.messages) == said(agent.messages) == [("user", "hi"), ("user", "s1"), ("assistant", "aborted:")]
    assert (result.end_reason, len(model.requests)) == ("aborted", 0)
    assert said(agent.steering.peek()) == [("user", "s2")]
    stop()
    agent.steer("s3")
    result = await agent.prompt("next")
    assert said(result.messages) == [("user", "next"), ("user", "s2"), ("user", "s3"), ("assistant", "answer")]
    assert not agent.has_queued_messages()


async def test_abort_between_steering_messages_of_a_later_turn() -> None:
    model = ScriptedModel([reply(tool_call("noop", id="c1")), "answer"])
    agent = Agent(model, tools=[noop()], steering_mode="all")

    def steer_during_tool(ev: Any) -> None:
        if ev.type == "tool_execution_start":
            agent.steer("s1")
            agent.steer("s2")

    agent.subscribe(steer_during_tool)
    abort_once(agent, ends("s1"), then=lambda: agent.steer("s3"))
    events: list[str] = []
    agent.subscribe(lambda ev: events.append(describe(ev)) if ev.type != "message_update" else None)
    result = await agent.prompt("hi")
    assert said(result.messages) == [
        ("user", "hi"), ("assistant", ""), ("tool_result", "ok"), ("user", "s1"), ("assistant", "aborted:"),
    ]  # fmt: skip
    assert events[-8:] == [
        "turn_end", "turn_start", "message_start:user", "message_end:user",
        "message_start:assistant", "message_end:assistant", "turn_end", "agent_end",
    ]  # fmt: skip
    assert len(model.requests) == 1
    assert said(agent.steering.peek()) == [("user", "s2"), ("user", "s3")]
    result = await agent.prompt("next")
    assert said(result.messages) == [("user", "next"), ("user", "s2"), ("user", "s3"), ("assistant", "answer")]
    assert [t for _, t in said(agent.messages)].count("s2") == 1


async def test_abort_before_the_first_queued_message_is_committed_requeues_all_in_order() -> None:
    model = ScriptedModel([reply(tool_call("noop", id="c1")), "answer"])
    agent = Agent(model, tools=[noop()], steering_mode="all")

    def steer_during_tool(ev: Any) -> None:
        if ev.type == "tool_execution_start":
            agent.steer("s1")
            agent.steer("s2")

    agent.subscribe(steer_during_tool)
    abort_once(agent, lambda ev: ev.type == "turn_start" and ev.turn == 2, then=lambda: agent.steer("s3"))
    result = await agent.prompt("hi")
    assert said(result.messages)[-1] == ("assistant", "aborted:")
    assert ("user", "s1") not in said(agent.messages)
    assert said(agent.steering.peek()) == [("user", "s1"), ("user", "s2"), ("user", "s3")]
    result = await agent.prompt("next")
    assert said(result.messages) == [
        ("user", "next"), ("user", "s1"), ("user", "s2"), ("user", "s3"), ("assistant", "answer"),
    ]  # fmt: skip


async def test_abort_before_the_first_model_call_keeps_steering_queued() -> None:
    for mode in ("one_at_a_time", "all"):
        model = ScriptedModel(["a1", "a2", "a3"])
        agent = Agent(model, steering_mode=mode)  # type: ignore[arg-type]
        agent.steer("s1")
        agent.steer("s2")
        stop = abort_once(agent, ends("hi"))
        result = await agent.prompt("hi")
        assert said(result.messages) == [("user", "hi"), ("assistant", "aborted:")], mode
        assert len(model.requests) == 0, mode
        assert said(agent.steering.peek()) == [("user", "s1"), ("user", "s2")], mode
        stop()
        await agent.prompt("next")
        users = [t for role, t in said(agent.messages) if role == "user"]
        assert users == ["hi", "next", "s1", "s2"], mode
        assert not agent.has_queued_messages(), mode


async def test_abort_after_a_steering_message_in_one_at_a_time_mode() -> None:
    model = ScriptedModel(["a1", "a2"])
    agent = Agent(model)
    agent.steer("s1")
    agent.steer("s2")
    stop = abort_once(agent, ends("s1"))
    result = await agent.prompt("hi")
    assert said(result.messages) == [("user", "hi"), ("user", "s1"), ("assistant", "aborted:")]
    assert len(model.requests) == 0
    assert said(agent.steering.peek()) == [("user", "s2")]
    stop()
    agent.steer("s3")
    result = await agent.prompt("next")
    assert said(result.messages) == [
        ("user", "next"), ("user", "s2"), ("assistant", "a1"), ("user", "s3"), ("assistant", "a2"),
    ]  # fmt: skip


async def test_abort_between_follow_ups_requeues_the_rest_before_newer_ones() -> None:
    model = ScriptedModel(["a1", "a2", "a3"])
    agent = Agent(model, follow_up_mode="all")
    agent.follow_up("f1")
    agent.follow_up("f2")
    stop = abort_once(agent, ends("f1"), then=lambda: agent.follow_up("f3"))
    result = await agent.prompt("hi")
    assert said(result.messages) == [("user", "hi"), ("assistant", "a1"), ("user", "f1"), ("assistant", "aborted:")]
    assert len(model.requests) == 1
    assert said(agent.follow_ups.peek()) == [("user", "f2"), ("user", "f3")]
    stop()
    result = await agent.prompt("next")
    assert said(result.messages) == [
        ("user", "next"), ("assistant", "a2"), ("user", "f2"), ("user", "f3"), ("assistant", "a3"),
    ]  # fmt: skip
    assert not agent.has_queued_messages()


async def test_abort_before_a_drained_follow_up_is_committed_requeues_it() -> None:
    model = ScriptedModel(["a1", "a2", "a3"])
    agent = Agent(model)
    agent.follow_up("f1")
    agent.follow_up("f2")
    stop = abort_once(agent, lambda ev: ev.type == "turn_start" and ev.turn == 2)
    result = await agent.prompt("hi")
    assert said(result.messages) == [("user", "hi"), ("assistant", "a1"), ("assistant", "aborted:")]
    assert said(agent.follow_ups.peek()) == [("user", "f1"), ("user", "f2")]
    stop()
    await agent.prompt("next")
    users = [t for role, t in said(agent.messages) if role == "user"]
    assert users == ["hi", "next", "f1", "f2"]


async def test_the_same_message_queued_twice_is_requeued_once_when_one_was_committed() -> None:
    model = ScriptedModel(["answer"])
    agent = Agent(model, steering_mode="all")
    twice = UserMessage(content="again")
    agent.steer(twice)
    agent.steer(twice)
    stop = abort_once(agent, ends("again"))
    await agent.prompt("hi")
    assert agent.steering.peek() == [twice]
    stop()
    await agent.prompt("next")
    assert [t for _, t in said(agent.messages)].count("again") == 2


async def test_agent_transcript_closes_the_calls_of_an_aborted_response() -> None:
    model = ScriptedModel(
        [reply("Reading.", tool_call("noop", id="c1"), tool_call("noop", {"x": "long value"}, id="c2"), chunk_size=3)]
    )
    agent = Agent(model, tools=[noop()])
    abort_once(agent, lambda ev: ev.type == "message_update" and ev.event.type == "toolcall_delta")
    ended: list[Any] = []
    agent.subscribe(lambda ev: ended.append(ev.messages) if ev.type == "agent_end" else None)
    result = await agent.prompt("go")
    assert said(agent.messages) == [
        ("user", "go"), ("assistant", "aborted:Reading."), ("tool_result", "Tool execution was aborted."),
    ]  # fmt: skip
    assistant, closing = agent.messages[1], agent.messages[2]
    assert isinstance(assistant, AssistantMessage) and isinstance(closing, ToolResultMessage)
    assert [(c.id, c.name, c.args) for c in assistant.tool_calls] == [("c1", "noop", {})]
    assert (closing.tool_call_id, closing.tool_name, closing.is_error) == ("c1", "noop", True)
    assert ended == [agent.messages] and result.messages == agent.messages
    assert agent.state.pending_tool_calls == frozenset()


async def test_a_cancelled_run_requeues_what_it_drained_and_did_not_commit() -> None:
    model = ScriptedModel(["a1", "a2"])
    agent = Agent(model, follow_up_mode="all")
    agent.follow_up("f1")
    agent.follow_up("f2")
    waiting = asyncio.Event()

    async def hold(ev: Any) -> None:
        if ends("f1")(ev):
            waiting.set()
            await asyncio.Event().wait()

    agent.subscribe(hold)
    task = asyncio.ensure_future(agent.prompt("hi"))
    await waiting.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert agent.phase.kind == "aborted"
    assert said(agent.messages) == [("user", "hi"), ("assistant", "a1"), ("user", "f1")]
    assert said(agent.follow_ups.peek()) == [("user", "f2")]


async def test_steering_drained_during_tools_then_aborted_is_requeued() -> None:
    async def quick(args: dict[str, Any], ctx: Any) -> str:
        agent.steer("s1")
        agent.steer("s2")
        return "quick"

    model = ScriptedModel([reply(tool_call("quick", id="q"), tool_call("later", id="z")), "answer"])
    agent = Agent(
        model,
        tools=[Tool("quick", "", None, quick, sequential=True), noop("later")],
        steering_mode="all",
        steering_during_tools="interrupt",
    )
    abort_once(agent, lambda ev: ev.type == "tool_execution_end" and ev.tool_call_id == "z")
    result = await agent.prompt("hi")
    assert said(result.messages) == [
        ("user", "hi"), ("assistant", ""),
        ("tool_result", "quick"), ("tool_result", "Skipped due to queued user message."),
    ]  # fmt: skip
    assert result.end_reason == "aborted"
    assert said(agent.steering.peek()) == [("user", "s1"), ("user", "s2")]
    result = await agent.prompt("next")
    assert said(result.messages) == [("user", "next"), ("user", "s1"), ("user", "s2"), ("assistant", "answer")]



async def test_clearing_a_queue_during_a_run_drops_what_the_run_took_too() -> None:
    model = ScriptedModel(["answer"])
    agent = Agent(model, steering_mode="all")
    agent.steer("s1")
    agent.steer("s2")
    # the run took s1 and s2; at s1's commit the steering queue is cleared and the run
    # aborted: s2, taken but not committed, does not come back
    abort_once(agent, ends("s1"), then=agent.steering.clear)
    result = await agent.prompt("hi")
    assert said(result.messages) == [("user", "hi"), ("user", "s1"), ("assistant", "aborted:")]
    assert agent.steering.peek() == []
    assert not agent.has_queued_messages()


async def test_clear_queues_during_a_run_drops_what_the_run_took_from_both_queues() -> None:
    model = ScriptedModel(["answer"])
    agent = Agent(model, steering_mode="all")
    agent.steer("s1")
    agent.steer("s2")
    agent.follow_up("f1")
    abort_once(agent, ends("s1"), then=agent.clear_queues)
    await agent.prompt("hi")
    assert (agent.steering.peek(), agent.follow_ups.peek()) == ([], [])


def test_mypy_checks_the_agent_options_by_name_and_type(tmp_path: Any) -> None:
    import subprocess
    import sys

    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        "from ketch import Agent\n"
        "from ketch.testing import ScriptedModel\n"
        "ok: Agent[None] = Agent(ScriptedModel(), max_turns=3, thinking='low', system_prompt='hi')\n"
        "typo: Agent[None] = Agent(ScriptedModel(), max_turn=3)\n"
        "wrong: Agent[None] = Agent(ScriptedModel(), max_turns='3')\n"
    )
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--hide-error-context",
         "--cache-dir", str(tmp_path / "cache"), str(snippet)],
        capture_output=True, text=True, cwd=tmp_path,
    )
    errors = [line.split(": ", 1)[1] for line in out.stdout.splitlines() if ": error: " in line]
    assert errors == [
        'error: Unexpected keyword argument "max_turn" for "Agent"; did you mean "max_turns"?  [call-arg]',
        'error: Argument "max_turns" to "Agent" has incompatible type "str"; expected "int | None"  [arg-type]',
    ]


async def test_stream_iterates_a_runs_events_in_order_and_gives_its_result() -> None:
    from ketch import AgentStream

    model = ScriptedModel([reply(tool_call("noop", id="c1")), "done"])
    agent = Agent(model, tools=[Tool("noop", "", None, lambda args, ctx: "ok")])
    seen: list[str] = []
    agent.subscribe(lambda e: seen.append(e.type))
    stream = agent.stream("go")
    assert isinstance(stream, AgentStream)
    with pytest.raises(RuntimeError, match="^Agent is already running"):
        agent.stream("again")
    types = [e.type async for e in stream if e.type != "message_update"]
    assert types == [
        "agent_start", "turn_start", "message_start", "message_end", "message_start", "message_end",
        "tool_execution_start", "tool_execution_end", "message_start", "message_end", "turn_end",
        "turn_start", "message_start", "message_end", "turn_end", "agent_end",
    ]  # fmt: skip
    result = await stream.result()
    assert (result.text, result.end_reason) == ("done", "stop")
    assert [t for t in seen if t != "message_update"] == types  # the subscribers saw the same, in order


async def test_closing_a_stream_aborts_its_run() -> None:
    model = ScriptedModel([reply("never finishes", hang=True)])
    agent = Agent(model)
    async with agent.stream("go") as stream:
        async for event in stream:
            if event.type == "message_update":
                break
    result = await stream.result()
    assert (result.end_reason, agent.is_running) == ("aborted", False)
