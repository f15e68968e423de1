"""Running a dataset: trials, concurrency, resume, pass@k and pass^k."""

from __future__ import annotations

import asyncio
import logging
import math
import os
import re
import shutil
from collections.abc import Awaitable
from collections.abc import Callable
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from typing import cast

import msgspec

from .. import Agent
from ..llm import message_to_dict
from ..loop import RunResult
from ._dataset import Case
from ._dataset import Dataset
from ._evaluators import Evaluator
from ._evaluators import Score
from ._evaluators import evaluator_name
from ._evaluators import evaluators_of
from ._trace import Tracing

log = logging.getLogger("ketch.evals")

__all__ = ["CaseResult", "EvalReport", "pass_at_k", "pass_hat_k", "run_evals"]


class CaseResult(msgspec.Struct, kw_only=True):
    """One trial of one case: its scores and whether all passed."""

    case: str
    trial: int
    passed: bool
    scores: list[Score]
    text: str = ""
    turns: int = 0
    error: str | None = None
    duration: float = 0.0
    """Seconds the agent's run took (model and tools), as :attr:`RunSummary.duration`."""
    cost: float = 0.0
    messages: list[dict[str, Any]] = msgspec.field(default_factory=list)
    """The run's transcript (:func:`ketch.message_to_dict` dicts), for reports."""


class EvalReport(msgspec.Struct, kw_only=True):
    """All trials of a run, with pass rates per case."""

    dataset: str
    trials: int
    results: list[CaseResult]
    model: str | None = None
    """What the agents ran on, when the caller recorded it (``ketch eval`` does)."""

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
    make_agent: Callable[[Case], Agent[Any]] | Callable[[Case, Path], Agent[Any]],
    evaluators: Sequence[Evaluator] = (),
    *,
    trials: int = 1,
    concurrency: int = 4,
    results_path: str | os.PathLike[str] | None = None,
    on_result: Callable[[CaseResult], object] | None = None,
    workspace: str | os.PathLike[str] | None = None,
    resolve_model: Callable[[str], Any] | None = None,
    tracer_provider: Any = None,
    answer: Callable[[Agent[Any], RunResult], str | None] | None = None,
) -> EvalReport:
    """Run each case ``trials`` times on a fresh agent and score it; see the module doc.

    ``on_result`` is called with each trial's result as it finishes (a progress display);
    an exception that escapes a trial (a crash: not a model, tool or evaluator error, which
    only fail their case) starts no further trial and is raised once the running ones end.

    Each case is scored by ``evaluators``, then the dataset's and its own file-written
    ones (a judge's model string goes through ``resolve_model`` when given). With
    ``workspace``, each trial gets a new empty directory ``<workspace>/<NNN>-<case>/<trial>``
    (NNN: the case's position, the name with characters other than letters, digits, ``_``
    and ``-`` as ``_``),
    passed to ``make_agent(case, directory)`` to build an agent working there.

    With ``tracer_provider`` (OpenTelemetry's), the run, each trial and each evaluator
    are spans carrying the case and the evaluator's name and verdict (see the docs).

    ``answer(agent, result)`` gives a run's answer when it is not the final text (None:
    it is): the evaluators then see a result whose ``text`` is that answer, and the
    :class:`CaseResult` keeps it (``ketch eval``: the embedded model's run that ends with
    its routed call, whose result is the answer ``ketch run`` prints).
    """
    if trials < 1:
        raise ValueError(f"run_evals: trials must be >= 1, got {trials}")
    if concurrency < 1:
        raise ValueError(f"run_evals: concurrency must be >= 1, got {concurrency}")
    path = Path(results_path) if results_path is not None else None
    done = _finished(path) if path is not None else {}
    common = [*evaluators, *evaluators_of(dataset.evaluators, resolve_model)]
    own = {c.name: evaluators_of(c.evaluators, resolve_model) for c in dataset.cases if c.evaluators}
    root = Path(workspace) if workspace is not None else None
    dirs = {c.name: f"{i:03}-{_slug(c.name)}" for i, c in enumerate(dataset.cases)}
    tracing = Tracing(tracer_provider, dataset.name)
    gate = asyncio.Semaphore(concurrency)
    lock = asyncio.Lock()
    crashed: list[BaseException] = []

    async def one(case: Case, trial: int) -> CaseResult | None:
        async with gate:
            if crashed:
                return None
            try:
                return await _trial(case, trial)
            except BaseException as e:
                crashed.append(e)
                raise

    async def _trial(case: Case, trial: int) -> CaseResult:
        if root is not None:
            where = root / dirs[case.name] / str(trial)
            if where.exists():  # a crashed run's leftovers: start clean
                shutil.rmtree(where)
            where.mkdir(parents=True)
            agent = cast("Callable[[Case, Path], Agent[Any]]", make_agent)(case, where)
        else:
            agent = cast("Callable[[Case], Agent[Any]]", make_agent)(case)
        with tracing.case(case.name, trial) as span:
            result = await agent.prompt(case.input)
            result = _answered(answer, agent, result)
            scores = []
            for ev in [*common, *own.get(case.name, ())]:
                with tracing.evaluator(case.name, evaluator_name(ev)) as ev_span:
                    score = await score_one(ev, case, result)
                    if ev_span is not None:
                        ev_span.set_attributes(
                            {"ketch.eval.passed": score.passed, "ketch.eval.reason": score.reason}
                        )
                scores.append(score)
            passed = result.summary.error is None and all(s.passed for s in scores)
            if span is not None:
                span.set_attribute("ketch.eval.passed", passed)
                if result.summary.error is not None:
                    span.set_attribute("ketch.eval.error", result.summary.error)
        out = CaseResult(
            case=case.name,
            trial=trial,
            passed=passed,
            scores=scores,
            text=result.text,
            turns=result.summary.turns,
            error=result.summary.error,
            duration=result.summary.duration,
            cost=result.summary.cost,
            messages=[message_to_dict(m) for m in result.messages],
        )
        if path is not None:
            async with lock:
                with path.open("ab") as f:
                    f.write(msgspec.json.encode(out) + b"\n")
        if on_result is not None:
            on_result(out)
        return out

    todo = [(c, t) for c in dataset.cases for t in range(trials) if (c.name, t) not in done]
    with tracing.run(trials):
        fresh = await asyncio.gather(*(one(c, t) for c, t in todo), return_exceptions=True)
    if crashed:
        raise crashed[0]
    got = dict(done)
    for item in fresh:
        if isinstance(item, CaseResult):
            got[(item.case, item.trial)] = item
    ordered = [got[(c.name, t)] for c in dataset.cases for t in range(trials)]
    return EvalReport(dataset=dataset.name, trials=trials, results=ordered)


def _answered(
    answer: Callable[[Agent[Any], RunResult], str | None] | None, agent: Agent[Any], result: RunResult
) -> RunResult:
    """``result``, with ``answer``'s answer as its text when it gives one."""
    given = answer(agent, result) if answer is not None else None
    if given is None:
        return result
    return _Answered(**{f: getattr(result, f) for f in result.__struct_fields__}, answer=given)


class _Answered(RunResult, kw_only=True):
    """A run whose answer is not its last assistant text (see ``answer`` of :func:`run_evals`)."""

    answer: str

    @property
    def text(self) -> str:
        return self.answer


def _finished(path: Path) -> dict[tuple[str, int], CaseResult]:
    """The trials a results file holds (a line a crash cut short is skipped with a warning)."""
    done: dict[tuple[str, int], CaseResult] = {}
    if not path.exists():
        return done
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):  # end the cut line, so the next result starts a line of its own
        with path.open("ab") as f:
            f.write(b"\n")
    for number, line in enumerate(data.splitlines(), 1):
        if not line.strip():
            continue
        try:
            r = msgspec.json.decode(line, type=CaseResult)
        except msgspec.DecodeError:
            # the line a crash cut short: its trial runs again
            log.warning("%s:%d: skipping an unreadable result line", os.fspath(path), number)
            continue
        done[(r.case, r.trial)] = r
    return done


def _slug(name: str) -> str:
    """A case name as a directory name (no separators, no leading dot)."""
    return re.sub(r"[^A-Za-z0-9_-]+", "_", name)[:60] or "_"


async def score_one(ev: Evaluator, case: Case, result: RunResult) -> Score:
    """``ev``'s score of ``result``; an evaluator that raises fails the case with a reason naming the error."""
    name = evaluator_name(ev)
    try:
        s = ev(case, result)
        return await s if isinstance(s, Awaitable) else s
    except Exception as e:  # a user evaluator's failure fails the case, not the run
        return Score(evaluator=name, passed=False, reason=f"evaluator raised {type(e).__name__}: {e}")
