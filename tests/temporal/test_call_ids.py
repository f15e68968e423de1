"""A server that sends tool calls without ids (or with the same id every turn): a durable
run still makes every call, as the in-process agent does (issue 39: the second turn's
write got the first call's saved result, and b.txt never existed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fake_openai import FakeOpenAI
from fake_openai import tool_results
from temporalio.client import Client

from ketch import Agent
from ketch.llm import get_model
from ketch.temporal import ActivitySettings
from ketch.temporal import DurableAgent
from ketch.temporal import build_worker
from ketch.temporal import start_run
from ketch.tools import coding_tools

FAST = ActivitySettings(heartbeat_timeout=5.0, initial_interval=0.05, max_interval=0.1, max_attempts=3)


def _two_writes(body: dict[str, Any]) -> tuple[str, list[tuple[str, dict[str, Any]]]]:
    done = len(tool_results(body))
    if done == 0:
        return "first", [("write", {"path": "a.txt", "content": "the first file\n"})]
    if done == 1:
        return "second", [("write", {"path": "b.txt", "content": "the second\n"})]
    return "done: " + " / ".join(tool_results(body)), []


def _agent(url: str, work: Path) -> Agent[Any]:
    return Agent(get_model("openai:gpt-test", api="openai-chat", base_url=url, api_key="sk-test"), tools=coding_tools(work))


@pytest.mark.parametrize("call_id", [None, "call_0"], ids=["no ids", "the same id every turn"])
async def test_a_durable_run_makes_every_write_when_the_server_repeats_or_omits_call_ids(
    client: Client, queue: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call_id: str | None
) -> None:
    monkeypatch.setenv("KETCH_IDEMPOTENCY_DIR", str(tmp_path / "journal"))
    expected = "done: Created a.txt (15 bytes, 1 line). / Created b.txt (11 bytes, 1 line)."
    async with FakeOpenAI(_two_writes, call_id=call_id) as server:
        local = tmp_path / "local"
        local.mkdir()
        result = await _agent(server.url, local).prompt("write two files")
        assert result.text == expected  # the in-process agent, for comparison
        assert sorted(p.name for p in local.iterdir()) == ["a.txt", "b.txt"]

        work = tmp_path / "durable"
        work.mkdir()
        durable = DurableAgent(_agent(server.url, work), name="writer", settings=FAST)
        async with build_worker(client, task_queue=queue, agents=[durable], sticky_timeout=1.0):
            run = await start_run(client, durable, "write two files", task_queue=queue)
            outcome = await run.result()
    assert outcome.messages[-1].text == expected  # type: ignore[union-attr]
    assert (work / "a.txt").read_text() == "the first file\n"
    assert (work / "b.txt").read_text() == "the second\n"
    ids = [c.id for m in outcome.transcript for c in getattr(m, "tool_calls", [])]
    assert len(ids) == 2 and (len(set(ids)) == 2 if call_id is None else set(ids) == {"call_0"})
