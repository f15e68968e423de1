"""Helpers shared by the tests (import as ``from support import ...``)."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec


def describe(event: Any) -> str:
    """A compact label of an event: its type, plus the role or tool call id where useful."""
    kind = event.type
    if kind in ("message_start", "message_end"):
        return f"{kind}:{event.message.role}"
    if kind in ("tool_execution_start", "tool_execution_end", "tool_execution_update"):
        return f"{kind}:{event.tool_call_id}"
    return str(kind)


async def collect(stream: Any) -> list[Any]:
    """All events of a run stream."""
    return [ev async for ev in stream]


def trace(events: list[Any]) -> list[tuple[Any, ...]]:
    """Model stream events as comparable tuples (without the shared partial message)."""
    out: list[tuple[Any, ...]] = []
    for e in events:
        t = e.type
        if t == "start":
            out.append(("start",))
        elif t in ("text_start", "thinking_start", "toolcall_start"):
            out.append((t, e.index))
        elif t in ("text_delta", "thinking_delta", "toolcall_delta"):
            out.append((t, e.index, e.delta))
        elif t in ("text_end", "thinking_end"):
            out.append((t, e.index, e.content))
        elif t == "toolcall_end":
            out.append((t, e.index, e.tool_call.id, e.tool_call.name, e.tool_call.args))
        elif t == "hosted_tool":
            out.append((t, e.index, type(e.block).__name__, e.block.kind))
        elif t == "retry":
            out.append((t, e.attempt, e.max_attempts, e.delay, e.error_kind, e.error_message, e.discard_partial))
        elif t == "done":
            out.append((t, e.reason))
        elif t == "error":
            out.append((t, e.reason, e.error.error_kind, e.error.error_message))
        else:  # pragma: no cover - every event type is listed above
            raise AssertionError(t)
    return out


async def run(model: Any, context: Any, options: Any = None) -> list[Any]:
    """Every stream event of one request."""
    return [e async for e in model.stream(context, options)]


def final(events: list[Any]) -> Any:
    """The final message of a model stream (done or error)."""
    last = events[-1]
    return last.message if last.type == "done" else last.error


def plain(message: Any) -> dict[str, Any]:
    """A message as JSON data without its timestamp."""
    data: dict[str, Any] = msgspec.to_builtins(message)
    data.pop("timestamp")
    return data


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process (Linux ``/proc``; a zombie waiting for its reaper
    does not count)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


@contextmanager
def served(script: Path, ready: str, what: str, *args: str) -> Iterator[str]:
    """``python script PORT *args`` on a free loopback port, until it prints ``ready`` on stderr
    (no sleeping); yields ``http://127.0.0.1:PORT`` and stops it after."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, str(script), str(port), *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    assert proc.stderr is not None
    seen: list[str] = []
    for line in proc.stderr:
        seen.append(line)
        if ready in line:
            break
    else:
        proc.wait()
        import pytest

        pytest.fail(f"{what} did not start: {''.join(seen)}", pytrace=False)
    threading.Thread(target=lambda: [None for _ in proc.stderr or ()], daemon=True).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
