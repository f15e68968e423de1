"""``ketch worker``: bad input is a one-line error with exit code 2; the default agent (the
built-in coding tools) starts and serves a run."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from temporalio.client import Client

from ketch import Agent
from ketch.llm import ToolResultMessage
from ketch.temporal import DevServer
from ketch.temporal import DurableAgent
from ketch.temporal import start_run
from ketch.testing import ScriptedModel
from ketch.tools import coding_tools

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _worker(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.run(
        [sys.executable, "-m", "ketch", "worker", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_app_must_be_module_colon_attr() -> None:
    out = _worker("--task-queue", "q", "--app", "nope")
    assert (out.returncode, out.stderr) == (2, "ketch worker: --app must be module:attr, got 'nope'\n")


def test_an_app_module_that_does_not_exist() -> None:
    out = _worker("--task-queue", "q", "--app", "no_such_module_xyz:app")
    assert out.returncode == 2
    assert out.stderr.startswith("ketch worker: --app 'no_such_module_xyz:app': cannot import 'no_such_module_xyz'")
    assert out.stderr.count("\n") == 1


def test_the_default_agent_needs_a_model() -> None:
    out = _worker("--task-queue", "q")
    assert (out.returncode, out.stderr) == (
        2, "ketch worker: --model is required without --app (e.g. -m anthropic:claude-sonnet-4-5)\n"
    )


def test_the_task_queue_is_required() -> None:
    out = _worker()
    assert out.returncode == 2
    assert "--task-queue" in out.stderr


def _serve(address: str, queue: str, model: str, cwd: Path, journal: Path | None) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != "KETCH_IDEMPOTENCY_DIR"}
    env["PYTHONPATH"] = SRC
    if journal is not None:
        env["KETCH_IDEMPOTENCY_DIR"] = str(journal)
    return subprocess.Popen(
        [sys.executable, "-m", "ketch", "worker", "--task-queue", queue, "--address", address, "-m", model],
        env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def _stop(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.terminate()
    _, err = process.communicate(timeout=30)
    return process.returncode, err


async def _ready(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    return await asyncio.to_thread(process.stdout.readline)


async def test_the_default_worker_starts_with_the_local_model(temporal_server: DevServer, queue: str, tmp_path: Path) -> None:
    # the documented default (the built-in coding tools) used to exit 2: "tool 'bash': sequential is a function"
    worker = _serve(temporal_server.address, queue, "local", tmp_path, tmp_path / "journal")
    try:
        line = await _ready(worker)
    finally:
        code, err = _stop(worker)
    assert line == f"ketch worker: ketch on task queue {queue!r} at {temporal_server.address}\n", err
    assert (code, err) == (0, "")


async def test_the_default_worker_serves_a_run_with_the_coding_tools(
    temporal_server: DevServer, client: Client, queue: str, tmp_path: Path
) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([
        {"blocks": [{"type": "tool_call", "id": "c1", "name": "bash", "args": {"command": "echo from bash"}}]},
        {"blocks": [{"type": "tool_call", "id": "c2", "name": "write", "args": {"path": "out.txt", "content": "hi\n"}}]},
        "all done",
    ]))
    repo = tmp_path / "repo"
    repo.mkdir()
    worker = _serve(temporal_server.address, queue, f"scripted:{script}", repo, tmp_path / "journal")
    try:
        assert (await _ready(worker)).startswith("ketch worker: ketch on task queue")
        # the client's copy of the worker's default agent
        model = ScriptedModel([], provider="scripted", api="scripted", id="scripted-model")
        ketch = DurableAgent(Agent(model, tools=coding_tools(repo)), name="ketch")
        run = await start_run(client, ketch, "go", task_queue=queue)
        result = await run.result()
    finally:
        code, err = _stop(worker)
    assert (code, err) == (0, "")
    assert result.summary.end_reason == "stop"
    texts = [m.content[0].text for m in result.transcript if isinstance(m, ToolResultMessage)]  # type: ignore[union-attr]
    assert texts[0].strip() == "from bash"
    assert texts[1] == "Created out.txt (3 bytes, 1 line)."
    assert (repo / "out.txt").read_text() == "hi\n"
    assert result.messages[-1].content[0].text == "all done"  # type: ignore[union-attr]


def test_an_unknown_model_is_a_one_line_error() -> None:
    out = _worker("--task-queue", "q", "-m", "nosuchprovider:x")
    assert out.returncode == 2
    assert out.stderr.startswith("ketch worker: Unknown provider 'nosuchprovider' in 'nosuchprovider:x'. Known providers: ")
    assert out.stderr.count("\n") == 1


async def test_a_worker_whose_journal_is_machine_local_says_so(
    temporal_server: DevServer, queue: str, tmp_path: Path
) -> None:
    worker = _serve(temporal_server.address, queue, "local", tmp_path, None)
    try:
        await _ready(worker)
    finally:
        code, err = _stop(worker)
    assert code == 0
    assert err == (
        "durable agent ketch: the write and edit tools keep their exactly-once records in "
        f"{tempfile.gettempdir()}/ketch-idempotency, on this machine only: a call retried on another machine "
        "would run again; set KETCH_IDEMPOTENCY_DIR to a folder every worker shares, or give "
        "build_worker(journal=StoreJournal(store)) a session store they share\n"
    )
