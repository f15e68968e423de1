"""The evaluators beyond exact match: typed output, latency, an LLM judge (scripted), the
ones a dataset file writes (JSON and YAML), datasets from saved sessions, workspaces."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import msgspec
import pydantic
import pytest

from ketch import Agent
from ketch import tool
from ketch.evals import Case
from ketch.evals import Dataset
from ketch.evals import LatencyBudget
from ketch.evals import LLMJudge
from ketch.evals import TypedOutput
from ketch.evals import load_session
from ketch.evals import run_evals
from ketch.loop import RunResult
from ketch.loop import RunSummary
from ketch.sessions import JsonlStore
from ketch.sessions import Session
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


class Point(msgspec.Struct):
    x: int
    y: int


class PPoint(pydantic.BaseModel):
    x: int
    y: int


def run_of(text: str, duration: float = 0.0, output: object = None) -> RunResult:
    return RunResult(messages=[], summary=RunSummary(duration=duration), output=output)


def text_run(text: str) -> RunResult:
    agent = Agent(ScriptedModel([text]))
    return asyncio.run(agent.prompt("?"))


CASE = Case(name="c", input="Where is the point?", expected="x=1, y=2")


def test_typed_output_with_msgspec_and_pydantic_types() -> None:
    ok = text_run('{"x": 1, "y": 2}')
    assert TypedOutput(Point)(CASE, ok).passed
    assert TypedOutput(Point, expected=Point(1, 2))(CASE, ok).passed
    assert TypedOutput(PPoint, expected=PPoint(x=1, y=2))(CASE, ok).passed
    wrong = TypedOutput(Point, expected=Point(1, 3))(CASE, ok)
    assert (wrong.passed, wrong.reason) == (False, "expected Point(x=1, y=3), got Point(x=1, y=2)")
    bad = TypedOutput(Point)(CASE, text_run('{"x": "one", "y": 2}'))
    assert (bad.passed, bad.reason) == (False, "not a Point: Expected `int`, got `str` - at `$.x`")
    prose = TypedOutput(Point)(CASE, text_run("It is at 1, 2."))
    assert prose.passed is False and prose.reason.startswith("not a Point: ")
    typed = TypedOutput(Point)(CASE, run_of("", output=Point(4, 5)))  # the run's typed output wins
    assert typed.passed


def test_latency_budget() -> None:
    assert LatencyBudget(2.0)(CASE, run_of("", duration=1.5)).passed
    slow = LatencyBudget(2.0)(CASE, run_of("", duration=2.25))
    assert (slow.passed, slow.reason) == (False, "took 2.250 s > 2.0 s")
    with pytest.raises(ValueError, match="max_seconds must be > 0, got 0"):
        LatencyBudget(0)


def test_llm_judge_on_a_scripted_judge() -> None:
    judge_model = ScriptedModel(["PASS\nIt names both coordinates.", "fail: it names only x", "maybe"])
    judge = LLMJudge(judge_model, "The answer names both coordinates.")
    answer = text_run("x is 1 and y is 2")
    first = asyncio.run(judge(CASE, answer))
    assert (first.evaluator, first.passed, first.reason) == ("judge", True, "It names both coordinates.")
    sent = judge_model.requests[0].messages[0].content[0].text
    assert "Rubric:\nThe answer names both coordinates." in sent
    assert "A reference answer:\nx=1, y=2" in sent
    assert "The assistant's answer:\nx is 1 and y is 2" in sent
    second = asyncio.run(judge(CASE, answer))
    assert (second.passed, second.reason) == (False, "it names only x")
    third = asyncio.run(judge(CASE, answer))
    assert (third.passed, third.reason) == (False, "the judge answered neither PASS nor FAIL: 'maybe'")
    failing = asyncio.run(judge(CASE, answer))  # the script ran out: the judge's error fails the case
    assert failing.passed is False
    assert failing.reason == "the judge failed: no more scripted responses"


@tool
def lookup(word: str) -> str:
    """Look a word up."""
    return f"{word}: a word"


DATASET = {
    "name": "file",
    "evaluators": [{"type": "budget", "max_turns": 2}, {"type": "latency", "max_seconds": 60}],
    "cases": [
        {"name": "exact", "input": "say hi", "expected": "hi", "evaluators": [{"type": "exact_match"}]},
        {
            "name": "tools",
            "input": "look up ketch",
            "evaluators": [
                {"type": "tool_trajectory", "calls": [{"name": "lookup", "args": {"word": "boat"}}]}
            ],
        },
        {
            "name": "judged",
            "input": "greet",
            "evaluators": [{"type": "judge", "rubric": "It greets.", "model": "judge-model"}],
        },
    ],
}

YAML = """\
name: file
evaluators:
  - {type: budget, max_turns: 2}
  - {type: latency, max_seconds: 60}
cases:
  - name: exact
    input: say hi
    expected: hi
    evaluators: [{type: exact_match}]
  - name: tools
    input: look up ketch
    evaluators:
      - type: tool_trajectory
        calls: [{name: lookup, args: {word: boat}}]
  - name: judged
    input: greet
    evaluators: [{type: judge, rubric: It greets., model: judge-model}]
"""


def make(case: Case) -> Agent[None]:
    script: list = {
        "exact": ["hi"],
        "tools": [reply(tool_call("lookup", {"word": "ketch"})), "done"],
        "judged": ["Hello!"],
    }[case.name]
    return Agent(ScriptedModel(script), tools=[lookup])


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_evaluators_written_in_a_dataset_file(tmp_path: Path, suffix: str) -> None:
    f = tmp_path / f"ds{suffix}"
    f.write_text(json.dumps(DATASET) if suffix == ".json" else YAML)
    ds = Dataset.from_file(f)
    asked: list[str] = []

    def resolve(name: str) -> ScriptedModel:
        asked.append(name)
        return ScriptedModel(["PASS\nit greets"])

    report = asyncio.run(run_evals(ds, make, resolve_model=resolve))
    assert asked == ["judge-model"]
    got = [(r.case, r.passed, [(s.evaluator, s.passed, s.reason) for s in r.scores]) for r in report.results]
    assert got == [
        ("exact", True, [("budget", True, ""), ("latency", True, ""), ("exact_match", True, "")]),
        (
            "tools",
            False,
            [
                ("budget", True, ""),
                ("latency", True, ""),
                ("tool_trajectory", False, "missing call lookup({'word': 'boat'}); calls were ['lookup']"),
            ],
        ),
        ("judged", True, [("budget", True, ""), ("latency", True, ""), ("judge", True, "it greets")]),
    ]


def test_bad_dataset_files_name_the_problem(tmp_path: Path) -> None:
    f = tmp_path / "ds.json"
    f.write_text(json.dumps({"name": "x", "cases": [], "evaluators": [{"type": "exact"}]}))
    with pytest.raises(ValueError, match=r"ds.json: Invalid value 'exact' - at `\$.evaluators\[0\].type`"):
        Dataset.from_file(f)
    f.write_text(json.dumps({"name": "x", "cases": [], "evaluators": [{"type": "latency", "max_secs": 1}]}))
    with pytest.raises(ValueError, match="unknown field `max_secs`"):
        Dataset.from_file(f)
    f.write_text("{")
    with pytest.raises(ValueError, match="ds.json: not valid JSON: "):
        Dataset.from_file(f)
    y = tmp_path / "ds.yml"
    y.write_text("name: [")
    with pytest.raises(ValueError, match="ds.yml: not valid YAML: "):
        Dataset.from_file(y)
    with pytest.raises(ValueError, match="missing.json: cannot read the dataset: No such file or directory"):
        Dataset.from_file(tmp_path / "missing.json")


def test_a_dataset_from_saved_sessions(tmp_path: Path) -> None:
    async def save(task: str, answer: str) -> str:
        session = await Session.create(JsonlStore(tmp_path), cwd=tmp_path)
        await Agent(ScriptedModel([answer]), session=session).prompt(task)
        await session.close()
        return session.id

    ids = {"capital": asyncio.run(save("Capital of Norway?", "Oslo")), "sum": asyncio.run(save("2+2?", "4"))}
    store = JsonlStore(tmp_path)
    ds = Dataset.from_sessions("saved", {k: asyncio.run(load_session(store, v)) for k, v in ids.items()})
    assert [(c.name, c.input, c.expected) for c in ds.cases] == [
        ("capital", "Capital of Norway?", "Oslo"),
        ("sum", "2+2?", "4"),
    ]


def test_each_trial_in_its_own_workspace(tmp_path: Path) -> None:
    seen: list[tuple[str, str, list[str]]] = []

    def make_in(case: Case, where: Path) -> Agent[None]:
        seen.append((case.name, str(where.relative_to(tmp_path)), sorted(p.name for p in where.iterdir())))
        (where / "scratch.txt").write_text(case.name)
        return Agent(ScriptedModel(["ok"]))

    ds = Dataset(name="w", cases=[Case(name="a/../b", input="?"), Case(name="c", input="?")])
    asyncio.run(run_evals(ds, make_in, trials=2, concurrency=1, workspace=tmp_path))
    assert seen == [
        ("a/../b", "000-a_b/0", []),
        ("a/../b", "000-a_b/1", []),
        ("c", "001-c/0", []),
        ("c", "001-c/1", []),
    ]
