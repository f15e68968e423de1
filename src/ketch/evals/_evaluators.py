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
from ._specs import BudgetSpec
from ._specs import EvaluatorSpec
from ._specs import ExactMatchSpec
from ._specs import JudgeSpec
from ._specs import LatencySpec
from ._specs import ToolTrajectorySpec

__all__ = [
    "Evaluator",
    "ExactMatch",
    "LLMJudge",
    "LatencyBudget",
    "Score",
    "ToolTrajectory",
    "TurnsBudget",
    "TypedOutput",
    "evaluators_of",
]


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
    an args dict only needs the keys it lists to match; numbers match within
    ``tolerance`` (absolute; default 0: equal).
    """

    name = "tool_trajectory"

    def __init__(
        self,
        expected: Sequence[tuple[str, dict[str, Any]]],
        *,
        ordered: bool = True,
        exact: bool = False,
        tolerance: float = 0.0,
    ) -> None:
        if not tolerance >= 0:
            raise ValueError(f"ToolTrajectory: tolerance must be >= 0, got {tolerance}")
        self.expected = list(expected)
        self.ordered = ordered
        self.exact = exact
        self.tolerance = tolerance

    def __call__(self, case: Case, result: RunResult) -> Score:
        calls = [(c.name, c.args) for c in tool_calls_of(result)]

        def fits(want: tuple[str, dict[str, Any]], got: tuple[str, dict[str, Any]]) -> bool:
            return want[0] == got[0] and all(
                k in got[1] and self._same(v, got[1][k]) for k, v in want[1].items()
            )

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

    def _same(self, want: Any, got: Any) -> bool:
        numbers = (int, float)
        if (
            self.tolerance
            and isinstance(want, numbers)
            and isinstance(got, numbers)
            and not isinstance(want, bool)
            and not isinstance(got, bool)
        ):
            return abs(want - got) <= self.tolerance
        return bool(want == got)


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


class LatencyBudget:
    """Passes when the run took at most ``max_seconds`` (its :attr:`RunSummary.duration`)."""

    name = "latency"

    def __init__(self, max_seconds: float) -> None:
        if not max_seconds > 0:
            raise ValueError(f"LatencyBudget: max_seconds must be > 0, got {max_seconds}")
        self.max_seconds = max_seconds

    def __call__(self, case: Case, result: RunResult) -> Score:
        took = result.summary.duration
        if took > self.max_seconds:
            return Score(
                evaluator=self.name, passed=False, reason=f"took {took:.3f} s > {self.max_seconds} s"
            )
        return Score(evaluator=self.name, passed=True)


class TypedOutput:
    """Passes when the run's output is a valid ``type`` (a msgspec Struct, dataclass,
    pydantic model or any type msgspec converts to), equal to ``expected`` when given.

    The output is the run's typed output (``Agent(output_type=...)``) when it has one,
    else its final text read as JSON.
    """

    name = "typed_output"

    def __init__(self, type: Any, expected: Any = None) -> None:
        self.type = type
        self.expected = expected

    def _convert(self, value: Any) -> Any:
        validate = getattr(self.type, "model_validate", None)  # pydantic
        if callable(validate):
            return validate(value)
        return msgspec.convert(value, type=self.type)

    def __call__(self, case: Case, result: RunResult) -> Score:
        value = result.output
        try:
            if value is None:
                value = msgspec.json.decode(result.text.strip())
            got = value if isinstance(value, self.type) else self._convert(value)
        except Exception as e:  # not JSON, or not of the type
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            return Score(evaluator=self.name, passed=False, reason=f"not a {_type_name(self.type)}: {first}")
        if self.expected is not None and got != self.expected:
            return Score(evaluator=self.name, passed=False, reason=f"expected {self.expected!r}, got {got!r}")
        return Score(evaluator=self.name, passed=True)


def _type_name(t: Any) -> str:
    return str(getattr(t, "__name__", t))


JUDGE_PROMPT = """You grade an AI assistant's answer against a rubric.

Rubric:
{rubric}

The task given to the assistant:
{input}
{expected}
The assistant's answer:
{answer}

Reply with PASS or FAIL on the first line, then one line saying why."""
"""The judge's prompt (``{rubric}``, ``{input}``, ``{expected}``, ``{answer}`` filled in)."""


class LLMJudge:
    """A model grades the run's final answer against ``rubric``: passes when the judge's
    reply starts with ``PASS`` (case and spaces ignored), fails on ``FAIL``; the reason is
    the rest of its reply. Any other reply, or a judge error, fails the case naming it.

    ``model`` is any ketch model or ``provider:model`` string.
    """

    name = "judge"

    def __init__(self, model: Any, rubric: str) -> None:
        if not rubric.strip():
            raise ValueError("LLMJudge: the rubric is empty")
        self.model = model
        self.rubric = rubric

    async def __call__(self, case: Case, result: RunResult) -> Score:
        from .. import Agent

        expected = f"\nA reference answer:\n{case.expected}\n" if case.expected else ""
        prompt = JUDGE_PROMPT.format(
            rubric=self.rubric, input=case.input, expected=expected, answer=result.text
        )
        verdict = await Agent(self.model, max_turns=1).prompt(prompt)
        if verdict.summary.error is not None:
            return Score(
                evaluator=self.name, passed=False, reason=f"the judge failed: {verdict.summary.error}"
            )
        text = verdict.text.strip()
        head, _, rest = text.partition("\n")
        word = head.strip().upper()
        why = (rest.strip() or head.strip()[4:].strip(" :-")).strip()
        if word.startswith("PASS"):
            return Score(evaluator=self.name, passed=True, reason=why)
        if word.startswith("FAIL"):
            return Score(evaluator=self.name, passed=False, reason=why)
        return Score(
            evaluator=self.name,
            passed=False,
            reason=f"the judge answered neither PASS nor FAIL: {text[:200]!r}",
        )


def evaluators_of(
    specs: Sequence[EvaluatorSpec], resolve_model: Callable[[str], Any] | None = None
) -> list[Evaluator]:
    """The evaluators a dataset file describes; ``resolve_model`` turns a judge's
    ``model`` string into a model (default: the string itself, resolved by ``Agent``)."""
    out: list[Evaluator] = []
    for spec in specs:
        match spec:
            case ExactMatchSpec():
                out.append(ExactMatch())
            case ToolTrajectorySpec(calls=calls, ordered=ordered, exact=exact):
                out.append(
                    ToolTrajectory(
                        [(c.name, c.args) for c in calls],
                        ordered=ordered,
                        exact=exact,
                        tolerance=spec.tolerance,
                    )
                )
            case BudgetSpec(max_turns=turns, max_cost=cost):
                out.append(TurnsBudget(max_turns=turns, max_cost=cost))
            case LatencySpec(max_seconds=seconds):
                out.append(LatencyBudget(seconds))
            case JudgeSpec(rubric=rubric, model=model):
                if model is None:
                    raise ValueError(
                        'judge: a dataset file\'s judge needs a model ("model": "provider:model")'
                    )
                out.append(LLMJudge(resolve_model(model) if resolve_model else model, rubric))
    return out
