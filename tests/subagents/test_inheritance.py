"""What a subagent takes from its parent: one table (ketch.loop.INHERITANCE) for every
agent option, and runs showing the inherited limits and guardrails bind the subagent
while the parent's stop controls do not (scripted models)."""

from __future__ import annotations

from typing import Any

from ketch import Agent
from ketch import AgentOptions
from ketch.llm import Cost
from ketch.llm import Usage
from ketch.llm import UserMessage
from ketch.loop import INHERITANCE
from ketch.loop import GuardrailResult
from ketch.loop import InputCheck
from ketch.loop import StopDecision
from ketch.loop import StopInfo
from ketch.loop import Tool
from ketch.loop import UsageLimits
from ketch.loop import derived_options
from ketch.loop import input_guardrail
from ketch.subagents import Subagents
from ketch.subagents import SubagentSpec
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


def _missing(options: type, table: dict[str, Any]) -> list[str]:
    keys = list(options.__annotations__)
    return [f"{k}: no rule" for k in keys if k not in table] + [f"{k}: not an option" for k in table if k not in keys]


def test_every_agent_option_has_one_inheritance_rule() -> None:
    assert _missing(AgentOptions, INHERITANCE) == []
    assert {r.rule for r in INHERITANCE.values()} == {"inherit", "reset", "override"}
    assert all(r.why for r in INHERITANCE.values())


def test_a_new_option_without_a_rule_fails_the_table_check() -> None:
    class Grown(AgentOptions, total=False):  # type: ignore[type-arg]
        new_knob: int

    assert _missing(Grown, INHERITANCE) == ["new_knob: no rule"]


def test_derived_options_follow_the_table() -> None:
    from ketch.llm import StreamOptions

    parent = Agent(
        ScriptedModel(),
        max_turns=9,
        max_budget_usd=2.0,
        usage_limits=UsageLimits(tool_calls=5),
        stop_when=[lambda info: True],
        options=StreamOptions(temperature=0.3, tool_choice="required", session_id="s", cache_key="k"),
        output_type=int,
    )
    options = derived_options(parent.config, {"thinking": "high"})
    inherited = {k for k, r in INHERITANCE.items() if r.rule == "inherit"}
    assert set(options) == inherited | {"thinking"}
    assert options["max_budget_usd"] == 2.0
    assert options["usage_limits"] == UsageLimits(tool_calls=5)
    assert options["thinking"] == "high"
    assert options["options"] == StreamOptions(temperature=0.3)  # the per-conversation fields cleared
    assert "max_turns" not in options and "stop_when" not in options and "output_type" not in options


def _noop() -> Tool:
    return Tool("noop", "does nothing", execute=lambda args, ctx: "ok")


def _parent(child_model: ScriptedModel, **options: Any) -> tuple[Agent[Any], Subagents]:
    parent_model = ScriptedModel(
        [reply(tool_call("subagent", {"agent": "helper", "task": "do the thing"})), "parent done"]
    )
    parent: Agent[Any] = Agent(parent_model, tools=[_noop()], **options)
    subs = Subagents([SubagentSpec("helper", "helps", model=child_model, tools=["noop"])]).attach(parent)
    return parent, subs


def _tool_text(agent: Agent[Any]) -> str:
    (text,) = [m.text for m in agent.messages if m.role == "tool_result"]  # type: ignore[attr-defined]
    return text


async def test_a_subagent_is_bound_by_the_parents_guardrails() -> None:
    @input_guardrail
    def no_things(check: InputCheck) -> GuardrailResult | None:
        text = repr([m.content for m in check.prompts if isinstance(m, UserMessage)])
        return GuardrailResult.trip("no things allowed") if "thing" in text else None

    child = ScriptedModel(["did it"])
    parent, subs = _parent(child, guardrails=[no_things])
    result = await parent.prompt("please delegate")
    assert result.text == "parent done"
    assert subs.runs["main/helper#1"].status == "failed"
    assert _tool_text(parent).startswith("Subagent main/helper#1 failed: guardrail")
    assert child.requests == []  # the input guardrail tripped before the child's first call


async def test_a_subagent_is_bound_by_the_parents_usage_limits_and_budget() -> None:
    child = ScriptedModel([reply(tool_call("noop", id="c1")), reply(tool_call("noop", id="c2")), "never"])
    parent, subs = _parent(child, usage_limits=UsageLimits(tool_calls=1))  # the second call is refused
    await parent.prompt("please delegate")
    assert subs.runs["main/helper#1"].status == "failed"
    assert _tool_text(parent).startswith("Subagent main/helper#1 failed: usage_limit")
    assert len(child.requests) == 2

    expensive = Usage(input=1, total_tokens=1, cost=Cost(input=1.0, total=1.0))
    child = ScriptedModel([reply(tool_call("noop", id="c1"), usage=expensive), "never"])
    parent, subs = _parent(child, max_budget_usd=0.5)
    await parent.prompt("please delegate")
    assert _tool_text(parent).startswith("Subagent main/helper#1 failed: max_budget")
    assert len(child.requests) == 1


async def test_the_parents_stop_controls_do_not_drive_a_subagent() -> None:
    def escalate_child(info: StopInfo) -> StopDecision | None:
        return StopDecision.escalate("not the child's business") if info.message.text == "child answer" else None

    child = ScriptedModel([reply("working", tool_call("noop", id="c1")), "child answer"])
    # inherited, stop_when or max_turns would end the child after its first turn, on_stop would fail it
    parent, subs = _parent(child, stop_when=[lambda info: True], on_stop=escalate_child, max_turns=1)
    result = await parent.prompt("please delegate")
    assert (result.end_reason, result.summary.turns) == ("stop", 1)
    run = subs.runs["main/helper#1"]
    assert (run.status, run.text, run.turns) == ("completed", "child answer", 2)
