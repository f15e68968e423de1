"""Recorded histories of representative runs replay without non-determinism errors.

The histories in ``histories/`` were recorded by ``record_histories.py`` (six of them
before the late-message path existed, ``late.json`` after, both with the keyword
DurableAgent; ``wrapped.json`` with an Agent wrapped by DurableAgent, its worker-side hooks
and the bash tool's per-call decision: every generation replays on the current code); a
change to the workflow (or to the loop it runs) that would break runs in flight across a
deploy fails here. They replay with Temporal's default sandbox (``Replayer(workflows=
[AgentWorkflow])``), as a user's replay test would, and with ``sandbox_runner()``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import temporal_app as test_app
from temporalio.client import WorkflowHistory
from temporalio.worker import Replayer

from ketch.temporal import AgentWorkflow
from ketch.temporal import sandbox_runner

HISTORIES = sorted((Path(__file__).resolve().parent / "histories").glob("*.json"))


def _history(path: Path) -> WorkflowHistory:
    return WorkflowHistory.from_json(path.stem, json.loads(path.read_text()))


def test_every_scenario_has_a_recorded_history() -> None:
    assert [p.stem for p in HISTORIES] == [
        "abort", "approval", "continued", "late", "pure", "rounds", "steering", "wrapped",
    ]


def _define_the_agents(work_dir: Path) -> None:
    """Build the agents the histories ran, as a worker process (or a replay test) does:
    their worker-side parts run inside the workflow."""
    (work_dir / "work").mkdir(exist_ok=True)
    test_app.agent()
    test_app.writer()


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_recorded_history_replays_with_the_default_sandbox(path: Path, work_dir: Path) -> None:
    _define_the_agents(work_dir)
    result = await Replayer(workflows=[AgentWorkflow]).replay_workflow(_history(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_recorded_history_replays_with_the_sandbox_runner(path: Path, work_dir: Path) -> None:
    _define_the_agents(work_dir)
    replayer = Replayer(workflows=[AgentWorkflow], workflow_runner=sandbox_runner())
    result = await replayer.replay_workflow(_history(path), raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


async def test_a_replay_without_the_agents_worker_side_parts_names_them(monkeypatch: pytest.MonkeyPatch) -> None:
    from ketch.temporal import _pure

    monkeypatch.setattr(_pure, "_agents", {})
    path = next(p for p in HISTORIES if p.stem == "wrapped")
    result = await Replayer(workflows=[AgentWorkflow]).replay_workflow(_history(path), raise_on_replay_failure=False)
    assert "durable agent 'writer' is not defined in this worker process, and its stop_when, guardrails run " \
        "inside the workflow: run it on a worker built with this agent (build_worker(agents=[...]))" in str(
            result.replay_failure)


async def test_a_workflow_change_that_breaks_replay_is_detected(monkeypatch: pytest.MonkeyPatch) -> None:
    from ketch.temporal import _spec

    # the same history replayed by a workflow that names its tool activities differently
    monkeypatch.setattr(_spec, "tool_activity", lambda agent, tool: f"{agent}.renamed.{tool}")
    import ketch.temporal._workflow as wf

    monkeypatch.setattr(wf, "tool_activity", _spec.tool_activity)
    path = next(p for p in HISTORIES if p.stem == "rounds")
    history = _history(path)
    replayer = Replayer(workflows=[AgentWorkflow], workflow_runner=sandbox_runner())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is not None
    assert "nondetermin" in str(result.replay_failure).lower()
