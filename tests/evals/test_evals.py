"""ketch.evals on scripted models: evaluators, pass@k / pass^k, resume after a crash."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pytest

from ketch import Agent
from ketch import tool
from ketch.evals import Case
from ketch.evals import Dataset
from ketch.evals import EvaluatorSpec
from ketch.evals import ExactMatch
from ketch.evals import Score
from ketch.evals import ToolTrajectory
from ketch.evals import TurnsBudget
from ketch.evals import pass_at_k
from ketch.evals import pass_hat_k
from ketch.evals import run_evals
from ketch.loop import RunResult
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


@tool
def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def scripted_agent(case: Case) -> Agent[None]:
    a, b = case.metadata["a"], case.metadata["b"]
    answer = str(a + b) if not case.metadata.get("wrong") else "0"
    script = [reply(tool_call("add", {"a": a, "b": b})), answer]
    return Agent(ScriptedModel(script), tools=[add], max_turns=5)


class Crash(BaseException):
    """Stands for the process dying mid-run."""


def dataset(n: int = 20) -> Dataset:
    cases = [
        Case(
            name=f"c{i:02}",
            input=f"add {i} and 1",
            expected=str(i + 1),
            metadata={"a": i, "b": 1, "wrong": i % 5 == 4},
        )
        for i in range(n)
    ]
    return Dataset(name="sums", cases=cases)


def is_short(case: Case, result: RunResult) -> Score:
    return Score(evaluator="short", passed=len(result.text) <= 2, reason=result.text)


def test_twenty_cases_with_every_evaluator_kind() -> None:
    ds = dataset()
    report = asyncio.run(
        run_evals(
            ds,
            scripted_agent,
            [
                ExactMatch(),
                ToolTrajectory([("add", {"b": 1})], exact=True),
                TurnsBudget(max_turns=2),
                is_short,
            ],
            concurrency=3,
        )
    )
    assert [r.case for r in report.results] == [c.name for c in ds.cases]
    assert [r.case for r in report.results if not r.passed] == ["c04", "c09", "c14", "c19"]
    failed = report.results[4]
    assert [(s.evaluator, s.passed) for s in failed.scores] == [
        ("exact_match", False),
        ("tool_trajectory", True),
        ("budget", True),
        ("short", True),
    ]
    assert failed.scores[0].reason == "expected '5', got '0'"
    assert report.pass_at_k(1) == 16 / 20
    assert json.loads(report.to_json())["results"][0]["passed"] is True
    assert report.table().splitlines()[2] == f"{'c00':<24} 1/1"


def test_trajectory_and_budget_failures_name_the_problem() -> None:
    ds = Dataset(name="one", cases=[Case(name="x", input="go", metadata={"a": 2, "b": 3})])
    report = asyncio.run(
        run_evals(ds, scripted_agent, [ToolTrajectory([("add", {"a": 9})]), TurnsBudget(max_turns=1)])
    )
    scores = report.results[0].scores
    assert scores[0].reason == "missing call add({'a': 9}); calls were ['add']"
    assert scores[1].reason == "2 turns > 1"


def test_pass_hat_k_on_known_outcomes() -> None:
    # case "ok" passes every trial, case "flaky" passes trials 0 and 2 of 4, "bad" never.
    outcomes = {"ok": [True] * 4, "flaky": [True, False, True, False], "bad": [False] * 4}
    counters: dict[str, int] = {k: 0 for k in outcomes}

    def make(case: Case) -> Agent[None]:
        i = counters[case.name]
        counters[case.name] += 1
        return Agent(ScriptedModel(["yes" if outcomes[case.name][i] else "no"]))

    ds = Dataset(name="k", cases=[Case(name=n, input="?", expected="yes") for n in outcomes])
    report = asyncio.run(run_evals(ds, make, [ExactMatch()], trials=4, concurrency=1))
    assert [report.passes(n) for n in outcomes] == [4, 2, 0]
    assert report.pass_hat_k(2) == pytest.approx((1 + 1 / 6 + 0) / 3)
    assert report.pass_at_k(2) == pytest.approx((1 + 5 / 6 + 0) / 3)
    assert pass_hat_k(4, 2, 1) == 0.5
    assert pass_at_k(4, 0, 3) == 0.0
    with pytest.raises(ValueError, match="need 1 <= k <= n"):
        pass_hat_k(4, 2, 5)


def test_a_crash_mid_run_resumes_without_rerunning_finished_cases(tmp_path: Path) -> None:
    ds = dataset(6)
    results = tmp_path / "results.jsonl"
    ran: list[str] = []

    def crashing(case: Case) -> Agent[None]:
        if case.name == "c03":
            raise Crash  # the process dies here
        ran.append(case.name)
        return scripted_agent(case)

    with pytest.raises(Crash):
        asyncio.run(run_evals(ds, crashing, [ExactMatch()], concurrency=1, results_path=results))
    assert ran[:3] == ["c00", "c01", "c02"]
    assert [json.loads(line)["case"] for line in results.read_text().splitlines()] == ["c00", "c01", "c02"]

    ran.clear()

    def counting(case: Case) -> Agent[None]:
        ran.append(case.name)
        return scripted_agent(case)

    report = asyncio.run(run_evals(ds, counting, [ExactMatch()], concurrency=1, results_path=results))
    assert ran == ["c03", "c04", "c05"]
    assert [r.case for r in report.results] == ["c00", "c01", "c02", "c03", "c04", "c05"]
    assert [r.passed for r in report.results] == [True, True, True, True, False, True]
    assert len(results.read_text().splitlines()) == 6


def test_dataset_files_and_bad_input(tmp_path: Path) -> None:
    f = tmp_path / "ds.json"
    f.write_text(json.dumps({"name": "f", "cases": [{"name": "a", "input": "hi", "expected": "yo"}]}))
    assert Dataset.from_file(f).cases[0].expected == "yo"
    f.write_text(json.dumps({"name": "f", "cases": [{"name": "a", "input": "hi", "expectd": "yo"}]}))
    with pytest.raises(ValueError, match="unknown field `expectd`"):
        Dataset.from_file(f)
    with pytest.raises(ValueError, match="case name 'a' is used twice"):
        Dataset(name="d", cases=[Case(name="a", input="x"), Case(name="a", input="y")])
    with pytest.raises(ValueError, match="trials must be >= 1, got 0"):
        asyncio.run(run_evals(Dataset(name="d", cases=[]), scripted_agent, [], trials=0))


def test_twenty_cases_with_every_built_in_and_file_evaluator() -> None:
    # the dataset names its evaluators as a file would; code adds typed output and a user one
    from ketch.evals import LatencyBudget
    from ketch.evals import LLMJudge
    from ketch.evals import TypedOutput

    ds = Dataset(
        name="sums",
        cases=dataset().cases,
        evaluators=msgspec.convert(
            [
                {"type": "exact_match"},
                {"type": "tool_trajectory", "calls": [{"name": "add", "args": {"b": 1}}], "exact": True},
                {"type": "budget", "max_turns": 2, "max_cost": 1.0},
                {"type": "latency", "max_seconds": 60},
                {"type": "judge", "rubric": "The answer is a number.", "model": "judge"},
            ],
            type=list[EvaluatorSpec],
        ),
    )
    verdicts = iter(["FAIL\nnot the sum" if i % 5 == 4 else "PASS\na number" for i in range(20)])

    def judge_model(name: str) -> ScriptedModel:
        assert name == "judge"
        return ScriptedModel([next(verdicts) for _ in range(20)])

    report = asyncio.run(
        run_evals(ds, scripted_agent, [TypedOutput(int), is_short], concurrency=1, resolve_model=judge_model)
    )
    names = [s.evaluator for s in report.results[0].scores]
    assert names == ["typed_output", "short", "exact_match", "tool_trajectory", "budget", "latency", "judge"]
    assert [r.case for r in report.results if not r.passed] == ["c04", "c09", "c14", "c19"]
    failed = {s.evaluator: (s.passed, s.reason) for s in report.results[4].scores}
    assert failed == {
        "typed_output": (True, ""),
        "short": (True, "0"),
        "exact_match": (False, "expected '5', got '0'"),
        "tool_trajectory": (True, ""),
        "budget": (True, ""),
        "latency": (True, ""),
        "judge": (False, "not the sum"),
    }
    assert all(s.passed for s in report.results[0].scores)
    assert report.pass_at_k(1) == 16 / 20
    assert LatencyBudget(60).name == "latency" and LLMJudge(ScriptedModel([]), "r").name == "judge"


def test_a_results_line_cut_short_by_a_crash_is_run_again(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ds = dataset(3)
    results = tmp_path / "results.jsonl"
    asyncio.run(run_evals(ds, scripted_agent, [ExactMatch()], concurrency=1, results_path=results))
    lines = results.read_bytes().splitlines()
    results.write_bytes(lines[0] + b"\n" + lines[1] + b"\n" + lines[2][:40])  # the last write was cut
    ran: list[str] = []

    def counting(case: Case) -> Agent[None]:
        ran.append(case.name)
        return scripted_agent(case)

    report = asyncio.run(run_evals(ds, counting, [ExactMatch()], concurrency=1, results_path=results))
    assert ran == ["c02"]
    assert [r.case for r in report.results] == ["c00", "c01", "c02"]
    assert f"{results}:3: skipping an unreadable result line" in caplog.text
    ran.clear()  # the rerun's result starts a line of its own: nothing runs a third time
    again = asyncio.run(run_evals(ds, counting, [ExactMatch()], concurrency=1, results_path=results))
    assert (ran, [r.passed for r in again.results]) == ([], [True, True, True])


def test_tool_trajectory_tolerances() -> None:
    ds = Dataset(
        name="t",
        cases=[
            Case(name="x", input="go", metadata={"a": 2, "b": 3}),
            Case(name="y", input="go", metadata={"a": 5, "b": 1}),
        ],
    )
    report = asyncio.run(
        run_evals(
            ds,
            scripted_agent,
            [
                ToolTrajectory([("add", {"a": 3})], tolerance=1),
                ToolTrajectory([("add", {"a": 3})]),
                ToolTrajectory([("add", {"c": None})]),  # a key the call does not have never matches
                ToolTrajectory([("add", {"b": 1}), ("add", {"a": 5})], ordered=False),
            ],
        )
    )
    assert [[s.passed for s in r.scores] for r in report.results] == [
        [True, False, False, False],
        [False, False, False, False],
    ]
    with pytest.raises(ValueError, match="tolerance must be >= 0, got -1"):
        ToolTrajectory([], tolerance=-1)
