"""White-box test: imports ketch implementation modules (private) directly.

The lists of checks a run builds from its configuration (ketch.loop._controls.Checks):
only the checks of the features configured, in the order the loop asks them.
"""

from __future__ import annotations

from typing import Any

import msgspec

from ketch.loop import Conversation
from ketch.loop import GuardrailResult
from ketch.loop import LoopConfig
from ketch.loop import StopDecision
from ketch.loop import UsageLimits
from ketch.loop import input_guardrail
from ketch.loop import output_guardrail
from ketch.loop import stop_after_tool
from ketch.loop._controls import Checks
from ketch.loop._runtime import Run
from ketch.testing import ScriptedModel


def _names(checks: list[Any]) -> list[str]:
    """Each check's class (a bound method: its object's class and the method; a function: its name)."""
    out = []
    for check in checks:
        owner = getattr(check, "__self__", None)
        if owner is not None:
            out.append(f"{type(owner).__name__}.{check.__name__}")
        elif hasattr(check, "__code__"):
            out.append(check.__name__)
        else:
            out.append(type(check).__name__)
    return out


def _checks(**config: Any) -> Checks:
    return Checks(Run(Conversation(), LoopConfig(model=ScriptedModel(), **config), None))


def test_a_plain_run_asks_only_the_checks_of_every_run() -> None:
    checks = _checks(length_recoveries=0)
    assert (checks.first_call, checks.before_call, checks.after_turn) == ([], [], [])
    assert _names(checks.at_stop) == ["queued", "Aborted"]


def test_the_default_length_recoveries_come_first_at_the_stop() -> None:
    assert _names(_checks().at_stop) == ["LengthRecovery", "queued", "Aborted"]


def test_each_configured_feature_adds_its_checks_in_the_loop_order() -> None:
    class Answer(msgspec.Struct):
        a: int

    rails = [
        input_guardrail(lambda check: None, name="in"),
        output_guardrail(lambda check: GuardrailResult.passed(), name="out"),
    ]
    checks = _checks(
        max_turns=3,
        max_budget_usd=1.0,
        usage_limits=UsageLimits(tool_calls=5),
        stop_when=[stop_after_tool("x")],
        on_stop=lambda info: StopDecision.allow(),
        get_steering_messages=lambda: [],
        get_follow_up_messages=lambda: [],
        prepare_next_turn=lambda info: None,
        guardrails=rails,
        output_type=Answer,
        output_mode="tool",
    )
    assert _names(checks.first_call) == ["UsageLimit.first", "InputGuard"]
    assert _names(checks.before_call) == ["Maximum", "Maximum", "UsageLimit"]
    assert _names(checks.after_turn) == ["OutputAnswer", "PrepareNextTurn", "StopWhen"]
    assert _names(checks.at_stop) == [
        "LengthRecovery",
        "queued",
        "Aborted",
        "FollowUps",
        "OutputText",
        "OutputGuard",
        "OnStop",
    ]


def test_typed_output_without_the_output_tool_checks_only_the_text() -> None:
    class Answer(msgspec.Struct):
        a: int

    checks = _checks(output_type=Answer, output_mode="prompted", length_recoveries=0)
    assert checks.after_turn == []
    assert _names(checks.at_stop) == ["queued", "Aborted", "OutputText"]
