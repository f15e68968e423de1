"""Recorded histories of representative runs replay without non-determinism errors.

The histories in ``histories/`` were recorded by ``record_histories.py`` (six of them
before the late-message path existed, ``late.json`` after: both generations replay on
the current code); a change to the workflow (or to the loop it runs) that would break
runs in flight across a deploy fails here.
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
    assert [p.stem for p in HISTORIES] == ["abort", "approval", "continued", "late", "pure", "rounds", "steering"]


@pytest.mark.parametrize("path", HISTORIES, ids=lambda p: p.stem)
async def test_recorded_history_replays(path: Path) -> None:
    test_app.agent()  # registers the agent's pure tools, as a worker process does
    history = _history(path)
    replayer = Replayer(workflows=[AgentWorkflow], workflow_runner=sandbox_runner())
    result = await replayer.replay_workflow(history, raise_on_replay_failure=False)
    assert result.replay_failure is None, f"{path.name}: {result.replay_failure!r}"


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
