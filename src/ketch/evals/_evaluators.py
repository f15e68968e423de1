"""Evaluators: each scores one run of one case."""

from __future__ import annotations

from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from typing import Any

import msgspec

from ..llm import AssistantMessage
from ..llm import ToolCall
from ..loop import RunResult
from ._dataset import Case

__all__ = ["Evaluator", "ExactMatch", "Score", "ToolTrajectory", "TurnsBudget"]


class Score(msgspec.Struct, kw_only=True):
    """One evaluator's verdict on one run."""

    evaluator: str
    passed: bool
    reason: str = ""


Evaluator = Callable[[Case, RunResult], "Score | Awaitable[Score]"]
"""An evaluator: any callable taking the case and the run result, returning a Score (or awaitable)."""


def evaluator_name(ev: Evaluator) -> str:
    """How reports name an evaluator: its ``name``, else its ``__name__``, else its class name."""
    return str(getattr(ev, "name", getattr(ev, "__name__", type(ev).__name__)))


def tool_calls_of(result: RunResult) -> list[ToolCall]:
    """The tool calls a run made, in order."""
    return [
        c
        for m in result.messages
        if isinstance(m, AssistantMessage)
        for c in m.content
        if isinstance(c, ToolCall)
    ]


class ExactMatch:
    """Passes when the run's final text equals the case's ``expected`` (after stripping whitespace)."""

    name = "exact_match"

    def __call__(self, case: Case, result: RunResult) -> Score:
        got = result.text.strip()
        want = (case.expected or "").strip()
        ok = got == want
        return Score(evaluator=self.name, passed=ok, reason="" if ok else f"expected {want!r}, got {got!r}")


class ToolTrajectory:
    """Passes when the run called ``expected`` tools: ``[(name, args-subset)]``.

    ``ordered`` (default) requires that order; ``exact`` forbids other calls besides them;
    an args dict only needs the keys it lists to match.
    """

    name = "tool_trajectory"

    def __init__(
        self, expected: Sequence[tuple[str, dict[str, Any]]], *, ordered: bool = True, exact: bool = False
    ) -> None:
        self.expected = list(expected)
        self.ordered = ordered
        self.exact = exact

    def __call__(self, case: Case, result: RunResult) -> Score:
        calls = [(c.name, c.args) for c in tool_calls_of(result)]

        def fits(want: tuple[str, dict[str, Any]], got: tuple[str, dict[str, Any]]) -> bool:
            return want[0] == got[0] and all(got[1].get(k) == v for k, v in want[1].items())

        if self.exact and len(calls) != len(self.expected):
            return Score(
                evaluator=self.name,
                passed=False,
                reason=f"expected {len(self.expected)} calls, got {len(calls)}",
            )
        if self.ordered:
            i = 0
            for got in calls:
                if i < len(self.expected) and fits(self.expected[i], got):
                    i += 1
            missing = self.expected[i:]
        else:
            left = list(calls)
            missing = []
            for want in self.expected:
                hit = next((g for g in left if fits(want, g)), None)
                if hit is None:
                    missing.append(want)
                else:
                    left.remove(hit)
        names = [n for n, _ in calls]
        if missing:
            return Score(
                evaluator=self.name,
                passed=False,
                reason=f"missing call {missing[0][0]}({missing[0][1]}); calls were {names}",
            )
        return Score(evaluator=self.name, passed=True)


class TurnsBudget:
    """Passes when the run used at most ``max_turns`` turns and cost at most ``max_cost`` dollars."""

    name = "budget"

    def __init__(self, *, max_turns: int | None = None, max_cost: float | None = None) -> None:
        self.max_turns = max_turns
        self.max_cost = max_cost

    def __call__(self, case: Case, result: RunResult) -> Score:
        s = result.summary
        if self.max_turns is not None and s.turns > self.max_turns:
            return Score(evaluator=self.name, passed=False, reason=f"{s.turns} turns > {self.max_turns}")
        if self.max_cost is not None and s.cost > self.max_cost:
            return Score(evaluator=self.name, passed=False, reason=f"cost {s.cost} > {self.max_cost}")
        return Score(evaluator=self.name, passed=True)
