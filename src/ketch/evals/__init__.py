"""Evals: run an agent over a dataset of cases, score each run, repeat trials.

A :class:`Case` is an input plus what to check; a :class:`Dataset` is a list of cases
(from code or a JSON file). :func:`run_evals` runs every case ``trials`` times, at most
``concurrency`` at a time, each run on a fresh agent from your factory, and scores it
with the evaluators. With ``results_path`` each finished trial is appended to a JSONL
file as it finishes, and a rerun with the same file skips the trials already there
(resume after a crash).
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import msgspec

from .. import Agent
from ..llm import AssistantMessage
from ..llm import ToolCall
from ..loop import RunResult

__all__ = [
    "Case",
    "CaseResult",
    "Dataset",
    "EvalReport",
    "Evaluator",
    "ExactMatch",
    "Score",
    "ToolTrajectory",
    "TurnsBudget",
    "pass_at_k",
    "pass_hat_k",
    "run_evals",
]


class Case(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """One eval case: a name, the prompt, an optional expected answer and metadata."""

    name: str
    input: str
    expected: str | None = None
    metadata: dict[str, Any] = msgspec.field(default_factory=dict)


class Dataset(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    """A named list of cases (names unique)."""

    name: str
    cases: list[Case]

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for case in self.cases:
            if case.name in seen:
                raise ValueError(
                    f"Dataset {self.name!r}: case name {case.name!r} is used twice; names must be unique"
                )
            seen.add(case.name)

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> Dataset:
        """Read a dataset from a JSON file ``{"name": ..., "cases": [...]}``; unknown keys are an error."""
        try:
            return msgspec.json.decode(Path(path).read_bytes(), type=cls)
        except msgspec.ValidationError as e:
            raise ValueError(f"{os.fspath(path)}: {e}") from None


class Score(msgspec.Struct, kw_only=True):
    """One evaluator's verdict on one run."""

    evaluator: str
    passed: bool
    reason: str = ""


Evaluator = Callable[[Case, RunResult], "Score | Awaitable[Score]"]
"""An evaluator: any callable taking the case and the run result, returning a Score (or awaitable)."""


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


class CaseResult(msgspec.Struct, kw_only=True):
    """One trial of one case: its scores and whether all passed."""

    case: str
    trial: int
    passed: bool
    scores: list[Score]
    text: str = ""
    turns: int = 0
    error: str | None = None


class EvalReport(msgspec.Struct, kw_only=True):
    """All trials of a run, with pass rates per case."""

    dataset: str
    trials: int
    results: list[CaseResult]

    def passes(self, case: str) -> int:
        return sum(r.passed for r in self.results if r.case == case)

    def pass_at_k(self, k: int) -> float:
        """Mean over cases of the chance that at least one of k trials passes."""
        cases = sorted({r.case for r in self.results})
        return sum(pass_at_k(self.trials, self.passes(c), k) for c in cases) / len(cases) if cases else 0.0

    def pass_hat_k(self, k: int) -> float:
        """Mean over cases of the chance that all k trials pass (pass^k)."""
        cases = sorted({r.case for r in self.results})
        return sum(pass_hat_k(self.trials, self.passes(c), k) for c in cases) / len(cases) if cases else 0.0

    def to_json(self) -> bytes:
        return msgspec.json.encode(self)

    def table(self) -> str:
        """A plain-text table: one row per case, passes out of trials."""
        lines = [f"{'case':<24} passed", "-" * 32]
        for c in dict.fromkeys(r.case for r in self.results):
            lines.append(f"{c:<24} {self.passes(c)}/{self.trials}")
        return "\n".join(lines)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n trials with c passes: 1 - C(n-c, k) / C(n, k)."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass_at_k: need 1 <= k <= n and 0 <= c <= n, got n={n} c={c} k={k}")
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_hat_k(n: int, c: int, k: int) -> float:
    """pass^k from n trials with c passes: C(c, k) / C(n, k), the chance k draws all pass."""
    if not 1 <= k <= n or not 0 <= c <= n:
        raise ValueError(f"pass_hat_k: need 1 <= k <= n and 0 <= c <= n, got n={n} c={c} k={k}")
    return math.comb(c, k) / math.comb(n, k)


async def run_evals(
    dataset: Dataset,
    make_agent: Callable[[Case], Agent[Any]],
    evaluators: Sequence[Evaluator],
    *,
    trials: int = 1,
    concurrency: int = 4,
    results_path: str | os.PathLike[str] | None = None,
) -> EvalReport:
    """Run each case ``trials`` times on a fresh agent and score it; see the module doc."""
    if trials < 1:
        raise ValueError(f"run_evals: trials must be >= 1, got {trials}")
    if concurrency < 1:
        raise ValueError(f"run_evals: concurrency must be >= 1, got {concurrency}")
    done: dict[tuple[str, int], CaseResult] = {}
    path = Path(results_path) if results_path is not None else None
    if path is not None and path.exists():
        for line in path.read_bytes().splitlines():
            if line.strip():
                r = msgspec.json.decode(line, type=CaseResult)
                done[(r.case, r.trial)] = r
    gate = asyncio.Semaphore(concurrency)
    lock = asyncio.Lock()

    async def one(case: Case, trial: int) -> CaseResult:
        async with gate:
            result = await make_agent(case).prompt(case.input)
            scores: list[Score] = []
            for ev in evaluators:
                name = getattr(ev, "name", getattr(ev, "__name__", type(ev).__name__))
                try:
                    s = ev(case, result)
                    score = await s if isinstance(s, Awaitable) else s
                except Exception as e:  # a user evaluator's failure fails the case, not the run
                    score = Score(
                        evaluator=str(name), passed=False, reason=f"evaluator raised {type(e).__name__}: {e}"
                    )
                scores.append(score)
            out = CaseResult(
                case=case.name,
                trial=trial,
                passed=result.summary.error is None and all(s.passed for s in scores),
                scores=scores,
                text=result.text,
                turns=result.summary.turns,
                error=result.summary.error,
            )
            if path is not None:
                async with lock:
                    with path.open("ab") as f:
                        f.write(msgspec.json.encode(out) + b"\n")
            return out

    todo = [(c, t) for c in dataset.cases for t in range(trials) if (c.name, t) not in done]
    fresh = await asyncio.gather(*(one(c, t) for c, t in todo))
    got = {(r.case, r.trial): r for r in [*done.values(), *fresh]}
    ordered = [got[(c.name, t)] for c in dataset.cases for t in range(trials)]
    return EvalReport(dataset=dataset.name, trials=trials, results=ordered)
