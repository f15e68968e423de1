"""Helper process for test_crash.py (run as a script, not collected by pytest).

``zygote``: reads one job per stdin line (JSON: kind, root, session, kill_after), forks a
writer that opens the session and appends entries forever, reporting ``ready N`` and
then ``ok N`` for every completed append through a pipe; after ``kill_after`` reports
(0: at once) it sends SIGKILL, drains the pipe, reaps the writer and answers one JSON
line: ``{"ready": N | null, "reported": [...], "errors": [...]}``.

``fill``: opens a session, waits for ``go`` on stdin, appends ``count`` entries, prints
``done``.

``hold``: opens a session and prints what happened (the lock error's message or ``opened``).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from ketch.sessions import Entry
from ketch.sessions import JsonlStore
from ketch.sessions import SessionStore
from ketch.sessions import SqliteStore

SIZES = [20, 300, 2000, 60, 150_000, 900, 40, 5000, 10, 700, 80, 3000, 50, 400, 30, 1200]


def payload(n: int) -> dict[str, Any]:
    """The deterministic payload of entry ``n`` (some are large, to tear writes)."""
    return {"n": n, "text": chr(97 + n % 26) * SIZES[(n * 7) % len(SIZES)]}


def entry_id(n: int) -> str:
    return f"entry{n:08d}"


def make_store(kind: str, root: str) -> SessionStore:
    if kind == "jsonl":
        return JsonlStore(Path(root))
    return SqliteStore(Path(root) / "sessions.db")


async def _append_forever(kind: str, root: str, session: str, out: int) -> None:
    store = make_store(kind, root)
    writer = await store.open(session)
    n = len(writer.entries) - 1
    os.write(out, f"ready {n}\n".encode())
    while True:
        entry = Entry(
            id=entry_id(n), parent_id=writer.entries[-1].id, timestamp=2_000_000_000.0 + n, type="message", payload=payload(n)
        )
        await writer.append(entry)
        os.write(out, f"ok {n}\n".encode())
        n += 1


def _writer(kind: str, root: str, session: str, out: int) -> None:
    try:
        asyncio.run(_append_forever(kind, root, session, out))
    except BaseException as exc:
        os.write(out, f"error {type(exc).__name__}: {exc}\n".encode())
    finally:
        os._exit(1)


def zygote() -> None:
    for line in sys.stdin:
        job = json.loads(line)
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(r)
            _writer(job["kind"], job["root"], job["session"], w)
        os.close(w)
        ready: int | None = None
        reported: list[int] = []
        errors: list[str] = []
        killed = False
        with os.fdopen(r, "rb") as progress:
            if job["kill_after"] == 0:
                os.kill(pid, signal.SIGKILL)
                killed = True
            for raw in progress:
                text = raw.decode().strip()
                if text.startswith("ready "):
                    ready = int(text[6:])
                elif text.startswith("ok "):
                    reported.append(int(text[3:]))
                else:
                    errors.append(text)
                if not killed and len(reported) >= job["kill_after"]:
                    os.kill(pid, signal.SIGKILL)
                    killed = True
        _, status = os.waitpid(pid, 0)
        if not (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL):
            errors.append(f"writer ended with status {status}")
        print(json.dumps({"ready": ready, "reported": reported, "errors": errors}), flush=True)


async def fill(kind: str, root: str, session: str, count: int) -> None:
    store = make_store(kind, root)
    writer = await store.open(session)
    print("opened", flush=True)
    sys.stdin.readline()
    for n in range(count):
        await writer.append(
            Entry(id=entry_id(n), parent_id=writer.entries[-1].id, timestamp=2_000_000_000.0 + n, type="message", payload=payload(n))
        )
    await writer.close()
    print("done", flush=True)


async def hold(kind: str, root: str, session: str) -> None:
    store = make_store(kind, root)
    try:
        writer = await store.open(session)
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", flush=True)
        return
    print("opened", flush=True)
    await writer.close()


if __name__ == "__main__":
    mode = sys.argv[1]
    if mode == "zygote":
        zygote()
    elif mode == "fill":
        asyncio.run(fill(sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])))
    else:
        asyncio.run(hold(sys.argv[2], sys.argv[3], sys.argv[4]))
