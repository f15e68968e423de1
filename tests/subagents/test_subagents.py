"""The subagent tool: single, parallel, chain and background modes, failures, depth,
usage roll-up, event tagging, abort and transcripts (scripted models)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from ketch import Agent
from ketch.llm import Cost
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import Usage
from ketch.llm import UserMessage
from ketch.loop import AgentEvent
from ketch.loop import Tool
from ketch.loop import ToolExecutionUpdate
from ketch.permissions import PermissionEngine
from ketch.sessions import JsonlStore
from ketch.sessions import Session
from ketch.subagents import SubagentEvent
from ketch.subagents import Subagents
from ketch.subagents import SubagentSpec
from ketch.tasks import TaskRegistry
from ketch.testing import FunctionModel
from ketch.testing import Reply
from ketch.testing import ScriptedModel
from ketch.testing import error_reply
from ketch.testing import reply
from ketch.testing import tool_call


def _usage(tokens: int, cost: float) -> Usage:
    return Usage(input=tokens, total_tokens=tokens, cost=Cost(input=cost, total=cost))


def _tool_texts(agent: Agent[Any]) -> list[str]:
    return [m.text for m in agent.messages if m.role == "tool_result"]  # type: ignore[attr-defined]


def _user_text(request: Request) -> str:
    first = request.messages[0]
    assert isinstance(first, UserMessage)
    return "".join(b.text for b in first.content if isinstance(b, TextContent))  # type: ignore[union-attr]


def _text(message: Any) -> str:
    return "".join(b.text for b in message.content if isinstance(b, TextContent))


def _tagged(events: list[AgentEvent]) -> list[tuple[str, str]]:
    return [
        (e.partial.path, e.partial.event.type)
        for e in events
        if type(e) is ToolExecutionUpdate and isinstance(e.partial, SubagentEvent)
    ]


async def test_single_mode_returns_the_final_text_in_an_isolated_context() -> None:
    child = ScriptedModel([reply("The answer is 42.", usage=_usage(5, 0.25))])
    parent_model = ScriptedModel(
        [
            reply(tool_call("subagent", {"agent": "helper", "task": "Find the answer."}), usage=_usage(1, 0.01)),
            reply("Done: 42", usage=_usage(1, 0.01)),
        ]
    )
    parent = Agent(parent_model, system_prompt="parent prompt")
    subs = Subagents([SubagentSpec("helper", "Finds answers", system_prompt="You help.", model=child)]).attach(parent)
    result = await parent.prompt("What is the answer?")
    assert result.text == "Done: 42"
    assert _tool_texts(parent) == ["The answer is 42."]
    (request,) = child.requests
    assert request.system_prompt == "You help."
    assert [m.role for m in request.messages] == ["user"]
    assert _user_text(request) == "Find the answer."
    # cost roll-up, itemised per subagent
    assert round(result.cost, 6) == 0.27
    assert {k: round(u.cost.total, 6) for k, u in result.summary.tool_usage.items()} == {"main/helper#1": 0.25}
    run = subs.runs["main/helper#1"]
    assert (run.status, run.text, run.turns) == ("completed", "The answer is 42.", 1)
    assert [m.role for m in subs.transcript("main/helper#1")] == ["user", "assistant"]


async def test_parallel_results_come_in_the_order_given_events_in_completion_order() -> None:
    b_done = asyncio.Event()

    async def slow(request: Request, options: StreamOptions) -> str:
        await b_done.wait()
        return "A finished"

    def fast(request: Request, options: StreamOptions) -> str:
        return "B finished"

    a = FunctionModel(slow)
    b = FunctionModel(fast)
    parent_model = ScriptedModel(
        [
            reply(tool_call("subagent", {"tasks": [{"agent": "a", "task": "one"}, {"agent": "b", "task": "two"}]})),
            "both done",
        ]
    )
    parent = Agent(parent_model)
    Subagents([SubagentSpec("a", "slow", model=a), SubagentSpec("b", "fast", model=b)]).attach(parent)
    events: list[AgentEvent] = []

    def listen(event: AgentEvent) -> None:
        events.append(event)
        tagged = _tagged([event])
        if tagged == [("main/b#1", "agent_end")]:
            b_done.set()

    parent.subscribe(listen)
    await parent.prompt("go")
    assert _tool_texts(parent) == [
        "2/2 subagents succeeded.\n\n--- main/a#1: completed\nA finished\n\n--- main/b#1: completed\nB finished"
    ]
    ends = [path for path, kind in _tagged(events) if kind == "agent_end"]
    assert ends == ["main/b#1", "main/a#1"]


async def test_parallel_respects_the_concurrency_cap() -> None:
    running = 0
    peak = 0
    release = asyncio.Event()
    started = 0

    async def work(request: Request, options: StreamOptions) -> str:
        nonlocal running, peak, started
        running += 1
        started += 1
        peak = max(peak, running)
        if started == 2:
            release.set()
        await release.wait()
        running -= 1
        return "ok"

    model = FunctionModel(work)
    members = [{"agent": "w", "task": str(i)} for i in range(5)]
    parent = Agent(ScriptedModel([reply(tool_call("subagent", {"tasks": members})), "done"]))
    Subagents([SubagentSpec("w", "worker", model=model)], max_concurrency=2).attach(parent)
    await parent.prompt("go")
    assert peak == 2
    assert _tool_texts(parent)[0].startswith("5/5 subagents succeeded.")


async def test_a_failing_member_is_reported_with_its_reason() -> None:
    good = ScriptedModel(["fine"])
    bad = ScriptedModel([error_reply("model exploded")])
    parent = Agent(
        ScriptedModel(
            [
                reply(tool_call("subagent", {"tasks": [{"agent": "good", "task": "x"}, {"agent": "bad", "task": "y"}]})),
                reply(tool_call("subagent", {"agent": "bad", "task": "again"})),
                "ok",
            ]
        )
    )
    bad.add(error_reply("model exploded"))
    Subagents([SubagentSpec("good", "g", model=good), SubagentSpec("bad", "b", model=bad)]).attach(parent)
    result = await parent.prompt("go")
    assert result.end_reason == "stop"
    parallel, single = _tool_texts(parent)
    assert parallel == (
        "1/2 subagents succeeded.\n\n--- main/good#1: completed\nfine\n\n--- main/bad#1: failed\nerror: model exploded"
    )
    assert single == "Subagent main/bad#2 failed: error: model exploded"
    results = [m for m in parent.messages if m.role == "tool_result"]
    assert [m.is_error for m in results] == [False, True]  # type: ignore[attr-defined]


async def test_chain_substitutes_the_previous_answer_and_stops_at_a_failure() -> None:
    first = ScriptedModel(["facts: x=1"])
    second = FunctionModel(lambda request, options: f"report on [{_user_text(request)}]")
    parent = Agent(
        ScriptedModel(
            [
                reply(
                    tool_call(
                        "subagent",
                        {"chain": [{"agent": "one", "task": "find"}, {"agent": "two", "task": "use {previous} now"}]},
                    )
                ),
                reply(tool_call("subagent", {"chain": [{"agent": "one", "task": "find"}, {"agent": "two", "task": "z"}]})),
                "ok",
            ]
        )
    )
    first.add(error_reply("no facts"))
    Subagents([SubagentSpec("one", "1", model=first), SubagentSpec("two", "2", model=second)]).attach(parent)
    await parent.prompt("go")
    ok, stopped = _tool_texts(parent)
    assert ok == "report on [use facts: x=1 now]"
    assert stopped == "Chain stopped at step 1 (main/one#2): error: no facts"
    assert len(second.requests) == 1


async def test_bad_arguments_are_tool_errors() -> None:
    parent = Agent(
        ScriptedModel(
            [
                reply(tool_call("subagent", {"agent": "nobody", "task": "x"})),
                reply(tool_call("subagent", {"agent": "a", "task": "x", "tasks": [{"agent": "a", "task": "y"}]})),
                reply(tool_call("subagent", {"agent": "a", "task": "x", "background": True})),
                "ok",
            ]
        )
    )
    Subagents([SubagentSpec("a", "a", model=ScriptedModel())]).attach(parent)
    await parent.prompt("go")
    unknown, two_modes, background = _tool_texts(parent)
    assert unknown.startswith('Validation failed for tool "subagent":\n  - agent: must be one of ["a"]')
    assert two_modes == (
        "Give exactly one mode: `agent` + `task`, `tasks: [...]` or `chain: [...]` (got agent, tasks)."
    )
    assert background.startswith('Validation failed for tool "subagent"')  # no registry: no background


async def test_nested_subagents_are_tagged_with_their_path_and_the_depth_is_limited() -> None:
    # main -> outer#1 -> inner#1 -> (inner tries outer: refused at max_depth 2)
    outer = ScriptedModel([reply(tool_call("subagent", {"agent": "inner", "task": "deeper"})), "outer done"])
    inner = ScriptedModel([reply(tool_call("subagent", {"agent": "outer", "task": "deeper still"})), "inner done"])
    parent = Agent(ScriptedModel([reply(tool_call("subagent", {"agent": "outer", "task": "go"})), "all done"]))
    specs = [
        SubagentSpec("outer", "o", model=outer, tools=["subagent"]),
        SubagentSpec("inner", "i", model=inner, tools=["subagent"]),
    ]
    subs = Subagents(specs, max_depth=2).attach(parent)
    events: list[AgentEvent] = []
    parent.subscribe(events.append)
    await parent.prompt("go")
    assert _tool_texts(parent) == ["outer done"]
    tagged = _tagged(events)
    assert ("main/outer#1", "agent_start") in tagged
    assert ("main/outer#1/inner#1", "agent_end") in tagged
    assert tagged[-1] == ("main/outer#1", "agent_end")
    inner_results = [m.text for m in inner.requests[1].messages if m.role == "tool_result"]  # type: ignore[attr-defined]
    assert inner_results == [
        "Subagent depth limit reached: main/outer#1/inner#1 is at depth 2 and max_depth is 2; do this work yourself."
    ]
    assert list(subs.runs) == ["main/outer#1"]


async def test_subagent_events_travel_as_json_with_their_tag() -> None:
    child = ScriptedModel(["hi"])
    parent = Agent(ScriptedModel([reply(tool_call("subagent", {"agent": "c", "task": "x"})), "ok"]))
    Subagents([SubagentSpec("c", "c", model=child)]).attach(parent)
    wire: list[dict[str, Any]] = []
    parent.subscribe(
        lambda e: wire.append(msgspec.to_builtins(e)) if type(e) is ToolExecutionUpdate else None
    )
    await parent.prompt("go")
    first = wire[0]["partial"]
    assert (first["type"], first["path"], first["event"]["type"]) == ("subagent_event", "main/c#1", "agent_start")
    decoded = msgspec.json.decode(msgspec.json.encode(wire[0]["partial"]), type=SubagentEvent)
    assert decoded.path == "main/c#1"


async def test_aborting_the_parent_cancels_running_subagents_and_leaks_no_tasks() -> None:
    started = asyncio.Event()

    async def hang(request: Request, options: StreamOptions) -> Reply:
        started.set()
        return reply("never", hang=True)

    children = FunctionModel(hang)
    parent = Agent(
        ScriptedModel(
            [reply(tool_call("subagent", {"tasks": [{"agent": "c", "task": "1"}, {"agent": "c", "task": "2"}]}))]
        )
    )
    subs = Subagents([SubagentSpec("c", "c", model=children)]).attach(parent)
    before = len(asyncio.all_tasks())
    run = asyncio.create_task(parent.prompt("go"))
    await started.wait()
    parent.abort()
    result = await run
    assert result.end_reason == "aborted"
    assert [r.status for r in subs.runs.values()] == ["aborted", "aborted"]
    assert len(asyncio.all_tasks()) == before


async def test_a_background_subagent_reports_while_the_parent_runs() -> None:
    tasks = TaskRegistry()
    go = asyncio.Event()

    async def child_reply(request: Request, options: StreamOptions) -> str:
        await go.wait()  # finishes only once the parent is waiting for it
        return "background result"

    child = FunctionModel(child_reply)
    script = [
        reply(tool_call("subagent", {"agent": "bg", "task": "work", "background": True})),
        reply(tool_call("task_wait", {"task_id": "agent-1"})),
        "saw it",
    ]

    def parent_reply(request: Request, options: StreamOptions) -> Reply | str:
        if len(script) == 2:
            go.set()
        return script.pop(0)

    parent_model = FunctionModel(parent_reply)
    parent = Agent(parent_model)
    subs = Subagents([SubagentSpec("bg", "bg", model=child)], tasks=tasks).attach(parent)
    result = await parent.prompt("go")
    assert result.text == "saw it"
    texts = _tool_texts(parent)
    assert texts[0] == (
        "Started background subagent agent-1 (main/bg#1). You will be told when it finishes; "
        "task_output, task_wait and task_stop work on it."
    )
    assert subs.notifier is not None and subs.notifier.deliveries == [("agent-1", "steered")]
    last_request = parent_model.requests[-1].messages
    note = last_request[-1]
    assert isinstance(note, UserMessage)
    assert _text(note) == (
        "<task-notification>\n<task-id>agent-1</task-id>\n<kind>subagent</kind>\n<status>completed</status>\n"
        "<description>bg: work</description>\n<result>\nbackground result\n</result>\n</task-notification>"
    )
    assert subs.runs["main/bg#1"].status == "completed"
    assert tasks.output("agent-1").text == "background result\n"


@pytest.mark.parametrize("start_runs", [False, True])
async def test_a_background_subagent_reports_to_an_idle_parent(start_runs: bool) -> None:
    tasks = TaskRegistry()
    go = asyncio.Event()

    async def child_reply(request: Request, options: StreamOptions) -> str:
        await go.wait()
        return "late result"

    parent_model = ScriptedModel(
        [reply(tool_call("subagent", {"agent": "bg", "task": "work", "background": True})), "started it"]
    )
    parent = Agent(parent_model)
    subs = Subagents(
        [SubagentSpec("bg", "bg", model=FunctionModel(child_reply))], tasks=tasks, start_runs=start_runs
    ).attach(parent)
    result = await parent.prompt("go")
    assert result.text == "started it"
    parent_model.add("thanks for the result")
    go.set()
    await tasks.wait("agent-1")
    assert subs.notifier is not None
    if start_runs:
        await subs.notifier.wait()
        assert subs.notifier.deliveries == [("agent-1", "started")]
        assert parent.messages[-1].text == "thanks for the result"  # type: ignore[attr-defined]
        assert "late result" in _text(parent.messages[-2])
    else:
        assert subs.notifier.deliveries == [("agent-1", "queued")]
        (queued,) = parent.follow_ups.peek()
        assert "<result>\nlate result\n</result>" in _text(queued)


@pytest.mark.parametrize("survives", [False, True])
async def test_a_background_subagent_is_stopped_when_the_parent_is_aborted_unless_configured(survives: bool) -> None:
    tasks = TaskRegistry()
    gate = asyncio.Event()
    hang_started = asyncio.Event()

    async def child_reply(request: Request, options: StreamOptions) -> str:
        await gate.wait()
        return "done"

    async def parent_reply(request: Request, options: StreamOptions) -> Reply:
        if len(request.messages) == 1:
            return reply(tool_call("subagent", {"agent": "bg", "task": "w", "background": True}))
        hang_started.set()
        return reply("...", hang=True)

    parent = Agent(FunctionModel(parent_reply))
    Subagents(
        [SubagentSpec("bg", "bg", model=FunctionModel(child_reply))],
        tasks=tasks,
        background_survives_abort=survives,
    ).attach(parent)
    run = asyncio.create_task(parent.prompt("go"))
    await hang_started.wait()
    parent.abort()
    assert (await run).end_reason == "aborted"
    if survives:
        assert tasks.get("agent-1").status == "running"
        gate.set()
        assert (await tasks.wait("agent-1")).status == "completed"
    else:
        assert (await tasks.wait("agent-1")).status == "stopped"


async def test_the_transcript_is_kept_in_the_parents_session_store(tmp_path: Any) -> None:
    store = JsonlStore(tmp_path / "sessions")
    session = await Session.create(store, cwd=tmp_path)
    child = ScriptedModel(["child answer"])
    parent = Agent(ScriptedModel([reply(tool_call("subagent", {"agent": "c", "task": "look"})), "ok"]), session=session)
    subs = Subagents([SubagentSpec("c", "c", model=child)]).attach(parent)
    await parent.prompt("go")
    run = subs.runs["main/c#1"]
    assert run.session_id is not None and run.session_id != session.id
    reopened = await Session.open(store, run.session_id)
    assert [m.role for m in reopened.messages] == ["user", "assistant"]
    assert reopened.messages[-1].text == "child answer"  # type: ignore[attr-defined]
    await reopened.close()
    results = [m for m in parent.messages if m.role == "tool_result"]
    assert results[0].details["session_id"] == run.session_id  # type: ignore[attr-defined]
    await session.close()


async def test_tools_are_a_subset_of_the_parents_by_name() -> None:
    from ketch.loop import Tool

    seen: list[list[str]] = []

    def child_reply(request: Request, options: StreamOptions) -> str:
        seen.append(sorted(t.name for t in request.tools))
        return "ok"

    tools = [Tool("read", execute=lambda a, c: "r"), Tool("write", execute=lambda a, c: "w")]
    parent = Agent(
        ScriptedModel(
            [
                reply(tool_call("subagent", {"agent": "all", "task": "x"})),
                reply(tool_call("subagent", {"agent": "reader", "task": "x"})),
                reply(tool_call("subagent", {"agent": "wrong", "task": "x"})),
                "ok",
            ]
        ),
        tools=tools,
    )
    model = FunctionModel(child_reply)
    Subagents(
        [
            SubagentSpec("all", "a", model=model),
            SubagentSpec("reader", "r", model=model, tools=["read"]),
            SubagentSpec("wrong", "w", model=model, tools=["nope"]),
        ],
        tasks=TaskRegistry(),
    ).attach(parent)
    await parent.prompt("go")
    assert seen == [["read", "write"], ["read"]]
    assert _tool_texts(parent)[2] == (
        "Subagent main/wrong#1 failed: agent 'wrong' names tool 'nope', which the parent lacks "
        "(it has: read, subagent, task_list, task_output, task_stop, task_wait, write)"
    )


async def test_a_subagent_with_an_output_type_returns_validated_json() -> None:
    class Finding(msgspec.Struct):
        file: str
        line: int

    child = ScriptedModel(['{"file": "a.py", "line": 3}', '{"file": "a.py"}'])
    parent = Agent(
        ScriptedModel(
            [
                reply(tool_call("subagent", {"agent": "finder", "task": "find it"})),
                reply(tool_call("subagent", {"agent": "finder", "task": "again"})),
                "ok",
            ]
        )
    )
    subs = Subagents([SubagentSpec("finder", "f", model=child, output_type=Finding)]).attach(parent)
    await parent.prompt("go")
    good, bad = _tool_texts(parent)
    assert good == '{"file":"a.py","line":3}'
    assert subs.runs["main/finder#1"].output == Finding(file="a.py", line=3)
    assert bad.startswith("Subagent main/finder#2 failed: its answer is not a valid Finding: ")
    assert "line" in bad
    fmt = child.requests[0].options.response_format
    assert fmt is not None and fmt["schema"]["required"] == ["file", "line"]


async def test_a_subagent_uses_the_parents_permission_engine_with_its_own_mode() -> None:
    touched: list[str] = []
    write = Tool("write", execute=lambda args, ctx: touched.append(args["path"]) or "written")
    engine = PermissionEngine("default")  # no approver: whatever needs asking is denied
    calls = [reply(tool_call("write", {"path": "x"})), "tried"]
    parent = Agent(
        ScriptedModel(
            [
                reply(tool_call("subagent", {"agent": "careful", "task": "write x"})),
                reply(tool_call("subagent", {"agent": "trusted", "task": "write x"})),
                "ok",
            ]
        ),
        tools=[write],
        before_tool_call=engine.before_tool_call,
    )
    Subagents(
        [
            SubagentSpec("careful", "c", model=ScriptedModel(calls), tools=["write"]),
            SubagentSpec("trusted", "t", model=ScriptedModel(calls), tools=["write"], permission_mode="bypass"),
        ]
    ).attach(parent)
    await parent.prompt("go")
    assert touched == ["x"]  # only the bypass subagent's call ran
    assert engine.mode == "default"
    outcomes = [d.outcome for d in engine.decisions if d.tool_name == "write"]
    assert outcomes == ["deny", "allow"]


_NO_ENGINE = (
    "agent 'strict' sets permission_mode 'plan', which needs the parent's before_tool_call to be a "
    "PermissionEngine's (before_tool_call=engine.before_tool_call)"
)


@pytest.mark.parametrize("gate", [None, lambda info: None], ids=["no gate", "another gate"])
def test_a_permission_mode_without_a_parent_engine_is_refused_at_attach(gate: Any) -> None:
    parent = Agent(ScriptedModel([]), before_tool_call=gate)
    subagents = Subagents([SubagentSpec("strict", "s", permission_mode="plan")])
    with pytest.raises(ValueError) as info:
        subagents.attach(parent)
    assert str(info.value) == _NO_ENGINE
    assert [t.name for t in parent.tools] == []  # nothing was attached


async def test_a_permission_mode_that_cannot_be_enforced_fails_the_call_instead_of_running_unrestricted() -> None:
    touched: list[str] = []
    write = Tool("write", execute=lambda args, ctx: touched.append(args["path"]) or "written")
    engine = PermissionEngine("bypass")
    parent = Agent(
        ScriptedModel([reply(tool_call("subagent", {"agent": "strict", "task": "write x"})), "ok"]),
        tools=[write],
        before_tool_call=engine.before_tool_call,
    )
    child = ScriptedModel([reply(tool_call("write", {"path": "x"})), "done"])
    Subagents([SubagentSpec("strict", "s", model=child, tools=["write"], permission_mode="plan")]).attach(parent)
    parent.config.before_tool_call = lambda info: None  # the gate replaced after attach
    await parent.prompt("go")
    assert touched == []
    assert _tool_texts(parent) == [f"Subagent main/strict#1 failed: {_NO_ENGINE}"]


async def test_a_failed_background_subagent_is_a_failed_task_with_the_reason() -> None:
    tasks = TaskRegistry()
    go = asyncio.Event()

    async def child_reply(request: Request, options: StreamOptions) -> Reply:
        await go.wait()  # fails once the parent is idle
        return error_reply("boom")

    parent = Agent(
        ScriptedModel([reply(tool_call("subagent", {"agent": "bg", "task": "w", "background": True})), "started"])
    )
    subs = Subagents([SubagentSpec("bg", "bg", model=FunctionModel(child_reply))], tasks=tasks).attach(parent)
    await parent.prompt("go")
    go.set()
    info = await tasks.wait("agent-1")
    assert (info.status, info.error) == ("failed", "error: boom")
    assert subs.runs["main/bg#1"].status == "failed"
    (queued,) = parent.follow_ups.peek()
    assert "<status>failed</status>\n<description>bg: w</description>\n<error>error: boom</error>" in _text(queued)


def test_the_tool_names_are_the_tools_attach_adds() -> None:
    from ketch.subagents import SUBAGENT_TOOLS
    from ketch.tasks import TASK_TOOLS

    tasks = TaskRegistry()
    assert [t.name for t in tasks.tools()] == list(TASK_TOOLS)
    parent = Agent(ScriptedModel([]))
    Subagents([SubagentSpec("a", "a")], tasks=tasks).attach(parent)
    assert [t.name for t in parent.tools] == list(SUBAGENT_TOOLS)


class _SandboxedBash(Tool):
    """A sandboxed bash whose sandbox is writable (its write_allowed follows the parent)."""

    def __init__(self, ran: list[str]) -> None:
        super().__init__("bash", execute=lambda args, ctx: ran.append(args["command"]) or "ran", sequential=True)
        self.sandboxed = True

    def policy(self) -> Any:
        from pathlib import Path

        from ketch.sandbox import SandboxPolicy

        return SandboxPolicy(workspace=Path("/ws"), write=True)


async def _delegate(engine: PermissionEngine, tool: Tool, call: Any, mode: str) -> ScriptedModel:
    """A parent with ``tool`` behind ``engine`` delegates once to a subagent whose spec asks
    for ``mode`` and which makes ``call``; returns the subagent's model."""
    parent = Agent(
        ScriptedModel([reply(tool_call("subagent", {"agent": "sub", "task": "t"})), "ok"]),
        tools=[tool],
        before_tool_call=engine.before_tool_call,
    )
    child = ScriptedModel([reply(call), "done"])
    Subagents([SubagentSpec("sub", "s", model=child, tools=[tool.name], permission_mode=mode)]).attach(parent)
    await parent.prompt("go")
    return child


async def test_a_parent_in_plan_mode_keeps_its_subagents_in_plan_mode() -> None:
    from ketch.permissions import PLAN_DENIED

    touched: list[str] = []
    write = Tool("write", execute=lambda args, ctx: touched.append(args["path"]) or "written")
    child = await _delegate(PermissionEngine("plan"), write, tool_call("write", {"path": "x"}), "bypass")
    assert touched == []
    assert _text(child.requests[1].messages[-1]) == PLAN_DENIED.format(tool="write")


async def test_a_plan_mode_subagent_does_not_run_a_writable_sandbox() -> None:
    from ketch.permissions import PLAN_DENIED

    ran: list[str] = []
    child = await _delegate(PermissionEngine("default"), _SandboxedBash(ran), tool_call("bash", {"command": "touch x"}), "plan")
    assert ran == []
    assert _text(child.requests[1].messages[-1]) == PLAN_DENIED.format(tool="bash")
