"""Model error kinds map to Temporal retry behaviour; the provider's own retries are off."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import timedelta
from typing import Any

from temporalio.client import Client

from ketch import Agent
from ketch.llm import MessageBuilder
from ketch.llm import Request
from ketch.llm import StreamEvent
from ketch.llm import StreamOptions
from ketch.llm import get_model
from ketch.temporal import ActivitySettings
from ketch.temporal import DurableAgent
from ketch.temporal import build_worker
from ketch.temporal import start_run
from ketch.testing import FunctionModel
from ketch.testing import reply

FAST = ActivitySettings(heartbeat_timeout=5.0, initial_interval=0.05, max_interval=0.1, max_attempts=5)


class FailingModel(FunctionModel):
    """Fails ``failures`` times with ``kind`` (and ``retry_after``), then answers."""

    def __init__(self, kind: str, failures: int, retry_after: float | None = None) -> None:
        super().__init__(lambda r, o: reply("fine"), provider="scripted", api="scripted", id="failing")
        self.kind = kind
        self.failures = failures
        self.retry_after = retry_after
        self.calls = 0

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        if self.calls <= self.failures:
            return self._fail()
        return super().stream(request, options)

    async def _fail(self) -> AsyncIterator[StreamEvent]:
        builder = MessageBuilder(provider="scripted", api="scripted", model="failing")
        yield builder.start()
        error = builder.error(f"{self.kind} happened", kind=self.kind)
        error.retry_after = self.retry_after
        yield error


async def _run(client: Client, queue: str, model: FailingModel) -> Any:
    agent = DurableAgent(Agent(model), name="failing", settings=FAST)
    async with build_worker(client, task_queue=queue, agents=[agent]):
        run = await start_run(client, agent, "hi", task_queue=queue)
        result = await run.result()
    history = await run.workflow.fetch_history()
    started = [e.activity_task_started_event_attributes for e in history.events
               if e.HasField("activity_task_started_event_attributes")]
    return result, started


async def test_non_retryable_kinds_fail_the_turn_at_once(client: Client, queue: str) -> None:
    for kind in ("auth", "invalid_request", "content_filter", "context_overflow"):
        model = FailingModel(kind, failures=1)
        result, started = await _run(client, f"{queue}-{kind}", model)
        assert model.calls == 1, kind
        assert [s.attempt for s in started] == [1]
        assert result.summary.end_reason == "error"
        last = result.transcript[-1]
        assert (last.stop_reason, last.error_kind, last.error_message) == ("error", kind, f"{kind} happened")


async def test_retryable_kinds_are_retried_by_temporal(client: Client, queue: str) -> None:
    model = FailingModel("overloaded", failures=2)
    result, started = await _run(client, queue, model)
    assert model.calls == 3
    assert [s.attempt for s in started] == [3]  # one started event, recorded for the attempt that completed
    assert started[0].last_failure.application_failure_info.type == "overloaded"
    assert result.summary.end_reason == "stop"


async def test_a_rate_limit_waits_the_servers_retry_after(client: Client, queue: str) -> None:
    model = FailingModel("rate_limit", failures=1, retry_after=0.25)
    result, started = await _run(client, queue, model)
    assert model.calls == 2
    info = started[0].last_failure.application_failure_info
    assert info.type == "rate_limit"
    assert info.next_retry_delay.ToTimedelta() == timedelta(seconds=0.25)
    assert result.summary.end_reason == "stop"


async def test_the_providers_own_retries_are_off_on_the_worker(client: Client, queue: str) -> None:
    model = get_model("openai:gpt-4o-mini", api_key="sk-test")
    assert model.retry.max_attempts > 1  # type: ignore[attr-defined]
    build_worker(client, task_queue=queue, agents=[DurableAgent(Agent(model), name="http")])
    assert model.retry.max_attempts == 1  # type: ignore[attr-defined]
