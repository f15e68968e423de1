"""DurableAgent wraps an ordinary Agent: one table (DURABLE) for every part of it, the
parts it cannot carry refused by name, and the carried and worker-side parts honoured
in a durable run (real Temporal dev server, in-process worker, scripted models)."""

from __future__ import annotations

import dataclasses
import inspect
import json
from typing import Any

import pytest
from temporalio.client import Client

from ketch import Agent
from ketch import AgentOptions
from ketch import LoopConfig
from ketch.llm import AssistantMessage
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import ToolResultMessage
from ketch.llm import UserMessage
from ketch.loop import GuardrailResult
from ketch.loop import InputCheck
from ketch.loop import PhaseRef
from ketch.loop import StopDecision
from ketch.loop import StopInfo
from ketch.loop import Tool
from ketch.loop import UsageLimits
from ketch.loop import input_guardrail
from ketch.loop import stop_after_tool
from ketch.temporal import DURABLE
from ketch.temporal import ActivitySettings
from ketch.temporal import AgentSpec
from ketch.temporal import DurableAgent
from ketch.temporal import build_worker
from ketch.temporal import start_run
from ketch.testing import FunctionModel
from ketch.testing import Reply
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import coding_tools

FAST = ActivitySettings(heartbeat_timeout=5.0, initial_interval=0.05, max_interval=0.1, max_attempts=3)


def _parts(config: type, agent_init: Any) -> set[str]:
    params = {p for p in inspect.signature(agent_init).parameters if p not in ("self", "options")}
    return {f.name for f in dataclasses.fields(config)} | params | {"listeners", "queued messages"}


def _untabled(parts: set[str], table: dict[str, Any]) -> list[str]:
    return sorted(parts - set(table)) + [f"{k}: not a part" for k in sorted(set(table) - parts)]


def test_every_part_of_an_agent_has_one_row_in_the_durable_table() -> None:
    assert _untabled(_parts(LoopConfig, Agent.__init__), DURABLE) == []
    assert {c.how for c in DURABLE.values()} == {"carried", "worker", "refused"}
    assert all(c.note for c in DURABLE.values())
    assert all(c.where for c in DURABLE.values() if c.how == "worker")
    # every carried agent option is a field of the run's input, with LoopConfig's default
    names, defaults = AgentSpec.__struct_fields__, AgentSpec.__struct_defaults__
    spec_defaults = dict(zip(names[len(names) - len(defaults):], defaults, strict=True))
    loop_defaults = {f.name: f.default for f in dataclasses.fields(LoopConfig)}
    carried = [k for k, c in DURABLE.items() if c.how == "carried" and k in AgentOptions.__annotations__]
    assert len(carried) == 16 and all(k in spec_defaults for k in carried)
    assert {k: spec_defaults[k] for k in carried if k != "options"} == {
        k: loop_defaults[k] for k in carried if k != "options"
    }


def test_a_new_loop_config_field_without_a_row_fails_the_table_check() -> None:
    @dataclasses.dataclass(kw_only=True)
    class Grown(LoopConfig):  # type: ignore[type-arg]
        new_knob: int = 1

    assert _untabled(_parts(Grown, Agent.__init__), DURABLE) == ["new_knob"]


def test_what_cannot_cross_is_refused_by_name_in_one_line() -> None:
    from ketch.sessions import JsonlStore  # noqa: F401  (a session needs a store; a stand-in will do)

    class Session:
        def attach(self, agent: Agent[Any]) -> None:
            agent.subscribe(lambda event: None)

    agent = Agent(ScriptedModel(), messages=[UserMessage(content="earlier")], session=Session())
    agent.steer("later")
    with pytest.raises(ValueError) as err:
        DurableAgent(agent, name="coder")
    assert str(err.value) == (
        "DurableAgent 'coder' cannot carry: "
        "messages (a durable run starts from start_run(transcript=...)); "
        "session (a durable run's transcript lives in its workflow: keep it with export_session(result, store)); "
        "listeners (a durable run's events go to an EventHub (start_run(events=...)); for traces use "
        "build_worker(wrap_model=..., middlewares=...)); "
        "queued messages (send them to the run with RunHandle.steer() or follow_up())"
    )
    assert "\n" not in str(err.value)

    with_phase = Agent(ScriptedModel())
    with_phase.config.phase = PhaseRef()
    with pytest.raises(ValueError, match=r"^DurableAgent 'p' cannot carry: phase \(a PhaseRef lives in one process: query RunHandle.state\(\)\)$"):
        DurableAgent(with_phase, name="p")

    from ketch.context import Compactor

    summarising = Agent(ScriptedModel(), context_manager=Compactor(summary_model=ScriptedModel()))
    with pytest.raises(ValueError, match=r"^DurableAgent 's' cannot carry: context_manager with a summary_model \(that model"):
        DurableAgent(summarising, name="s")
    with pytest.raises(TypeError, match=r"^DurableAgent wraps a ketch.Agent, got str: DurableAgent\(Agent\(model, tools=...\), name='coder'\)$"):
        DurableAgent("coder", name="x")  # type: ignore[arg-type]


def test_every_built_in_tool_is_accepted_and_per_call_decisions_are_named() -> None:
    agent = Agent(ScriptedModel(), tools=coding_tools("."))
    durable = DurableAgent(agent, name="coder")
    defs = {d.name: d for d in durable.spec.tools}
    assert sorted(defs) == ["bash", "edit", "find", "grep", "ls", "read", "write"]
    assert defs["bash"].per_call == ["sequential"]
    assert (defs["write"].sequential, defs["write"].per_call) == (True, [])
    assert (defs["read"].read_only, defs["read"].sequential) == (True, False)


def test_the_options_cross_as_the_table_says() -> None:
    guard = input_guardrail(lambda check: None)
    agent = Agent(
        ScriptedModel(),
        system_prompt="be brief",
        max_turns=7,
        max_budget_usd=1.25,
        usage_limits=UsageLimits(tool_calls=4),
        max_tool_concurrency=3,
        guardrails=[guard],
        stop_when=[stop_after_tool("done")],
        get_api_key=lambda provider: "sk-never-in-history",
        options=StreamOptions(temperature=0.5, api_key="sk-also-not", headers={"X-Secret": "s"}),
        steering_mode="all",
        output_type=int,
    )
    spec = DurableAgent(agent, name="coder").spec
    assert (spec.system_prompt, spec.max_turns, spec.max_budget_usd, spec.usage_limits, spec.max_tool_concurrency) == (
        "be brief", 7, 1.25, UsageLimits(tool_calls=4), 3
    )
    assert (spec.steering_mode, spec.follow_up_mode) == ("all", "one_at_a_time")
    assert spec.options is not None and spec.options["temperature"] == 0.5
    assert "api_key" not in spec.options and "headers" not in spec.options
    assert spec.worker_side == ["stop_when", "get_api_key", "guardrails", "output_type"]
    assert "sk-" not in json.dumps(msgspec_builtins(spec))


def msgspec_builtins(value: Any) -> Any:
    import msgspec

    return msgspec.to_builtins(value)


def _texts(request: Request) -> list[str]:
    out = []
    for m in request.messages:
        if isinstance(m, UserMessage):
            c = m.content
            out.append(c if isinstance(c, str) else "".join(b.text for b in c if isinstance(b, TextContent)))
    return out


async def _durable_run(client: Client, queue: str, agent: Agent[Any], prompt: str) -> Any:
    durable = DurableAgent(agent, name="wrapped", settings=FAST)
    async with build_worker(client, task_queue=queue, agents=[durable], sticky_timeout=1.0):
        run = await start_run(client, durable, prompt, task_queue=queue)
        result = await run.result()
    history = await run.workflow.fetch_history()
    return result, history.to_json()


def _noop() -> Tool:
    return Tool("noop", "does nothing", {"type": "object", "properties": {}}, lambda args, ctx: "ok")


async def test_worker_side_stop_controls_and_guardrails_run_in_the_durable_run(client: Client, queue: str) -> None:
    @input_guardrail
    def no_secrets(check: InputCheck) -> GuardrailResult | None:
        return GuardrailResult.trip("no secrets") if "secret" in repr([m.content for m in check.prompts]) else None

    def escalate(info: StopInfo) -> StopDecision | None:
        return StopDecision.escalate("stopped by the agent's on_stop") if info.message.text == "finished" else None

    def answer(request: Request, options: StreamOptions) -> Reply:
        n = sum(isinstance(m, ToolResultMessage) for m in request.messages)
        return reply("working", tool_call("noop", {}, id=f"c{n}")) if n < 5 else reply("finished")

    guarded = Agent(FunctionModel(answer, provider="scripted", api="scripted", id="f"), guardrails=[no_secrets])
    result, _ = await _durable_run(client, queue, guarded, "tell me the secret")
    assert (result.summary.end_reason, result.summary.turns) == ("guardrail", 0)

    stopped = Agent(FunctionModel(answer, provider="scripted", api="scripted", id="f"), tools=[_noop()],
                    stop_when=[lambda info: info.turn >= 2])
    result, _ = await _durable_run(client, queue, stopped, "go")
    assert (result.summary.end_reason, result.summary.turns, result.summary.tool_calls) == ("stop", 2, 2)

    limited = Agent(FunctionModel(answer, provider="scripted", api="scripted", id="f"), tools=[_noop()],
                    usage_limits=UsageLimits(tool_calls=3))
    result, _ = await _durable_run(client, queue, limited, "go")
    assert result.summary.end_reason == "usage_limit"

    escalating = Agent(FunctionModel(answer, provider="scripted", api="scripted", id="f"), tools=[_noop()],
                       on_stop=escalate)
    result, _ = await _durable_run(client, queue, escalating, "go")
    assert (result.summary.end_reason, result.summary.error) == ("stop_guard", "stopped by the agent's on_stop")


@dataclasses.dataclass
class Person:
    name: str
    age: int


async def test_typed_output_comes_back_validated_and_the_key_stays_on_the_worker(client: Client, queue: str) -> None:
    seen: list[str | None] = []

    def answer(request: Request, options: StreamOptions) -> Reply:
        seen.append(options.api_key)
        return reply(tool_call("final_result", {"name": "Ada", "age": 36}, id="out"))

    agent = Agent(
        FunctionModel(answer, provider="scripted", api="scripted", id="f"),
        output_type=Person,
        get_api_key=lambda provider: "sk-worker-only",
    )
    result, history = await _durable_run(client, queue, agent, "who?")
    assert result.summary.end_reason == "stop"
    assert result.output == Person(name="Ada", age=36)
    assert seen == ["sk-worker-only"]
    assert "sk-worker-only" not in history


async def test_a_per_call_tool_decision_runs_in_the_workflow(client: Client, queue: str, tmp_path: Any) -> None:
    # the bash tool decides per call whether it runs alone: a read-only command does not
    def answer(request: Request, options: StreamOptions) -> Reply:
        if not any(isinstance(m, ToolResultMessage) for m in request.messages):
            return reply(tool_call("bash", {"command": "echo one"}, id="b1"), tool_call("find", {"pattern": "*.txt"}, id="f1"))
        results = [m.content[0].text for m in request.messages if isinstance(m, ToolResultMessage)]  # type: ignore[union-attr]
        return reply("saw " + " | ".join(r.strip() for r in results))

    (tmp_path / "a.txt").write_text("x")
    agent = Agent(FunctionModel(answer, provider="scripted", api="scripted", id="f"), tools=coding_tools(tmp_path))
    result, _ = await _durable_run(client, queue, agent, "look")
    assert result.summary.end_reason == "stop"
    assert result.messages[-1].text == "saw one | a.txt"  # type: ignore[union-attr]
    assert isinstance(result.messages[-1], AssistantMessage)


async def test_the_budget_and_usage_limits_count_over_the_whole_run_across_continue_as_new(
    client: Client, queue: str
) -> None:
    from ketch.llm import Cost
    from ketch.llm import Usage

    def answer(request: Request, options: StreamOptions) -> Reply:
        n = sum(isinstance(m, ToolResultMessage) for m in request.messages)
        dime = Usage(input=1, output=1, total_tokens=2, cost=Cost(input=0.1, total=0.1))
        return reply("again", tool_call("noop", {}, id=f"c{n}"), usage=dime)  # never stops by itself

    def run_agent(**options: Any) -> DurableAgent:
        model = FunctionModel(answer, provider="scripted", api="scripted", id="f")
        return DurableAgent(Agent(model, tools=[_noop()], max_turns=12, **options), name="spender",
                            settings=FAST, max_history_events=20)

    for options, expected in (
        ({"max_budget_usd": 0.45}, ("max_budget", 5)),
        ({"usage_limits": UsageLimits(tool_calls=4)}, ("usage_limit", 5)),  # the fifth call is refused
        ({}, ("max_turns", 12)),
    ):
        durable = run_agent(**options)
        async with build_worker(client, task_queue=queue, agents=[durable], sticky_timeout=1.0):
            run = await start_run(client, durable, "spend", task_queue=queue)
            result = await run.result()
        assert (result.summary.end_reason, result.summary.turns) == expected, options
        assert result.generations > 1
