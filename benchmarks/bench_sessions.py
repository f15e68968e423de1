"""Session stores: appending 10,000 message entries and loading a 10,000-message session,
JSONL against SQLite (time and peak traced memory), plus listing and fsync costs.

Run: ``python benchmarks/bench_sessions.py`` (prints a Markdown table). Times are
medians of 5 runs on the machine it runs on (a temporary directory on its disk); peak
memory is what ``tracemalloc`` saw during one run. Nothing here is a test.
"""

from __future__ import annotations

import asyncio
import statistics
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Awaitable
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec

from ketch import AssistantMessage
from ketch import TextContent
from ketch import ToolCall
from ketch import ToolResultMessage
from ketch import UserMessage
from ketch import message_to_dict
from ketch.sessions import Entry
from ketch.sessions import JsonlStore
from ketch.sessions import SessionStore
from ketch.sessions import SqliteStore

MESSAGES = 10_000
RUNS = 5
FSYNC_APPENDS = 300
LISTED_SESSIONS = 1_000


def _payloads() -> list[dict[str, Any]]:
    """A coding session's mix: prompt, assistant text with a tool call, tool result."""
    text = "Let me look at the parser first; the failing test points at the tokenizer. " * 12
    output = "def tokenize(source: str) -> list[Token]:\n    ...\n" * 40
    kinds = [
        message_to_dict(UserMessage(content=[TextContent(text="Fix the failing parser test, please. " * 5)])),
        message_to_dict(
            AssistantMessage(
                content=[TextContent(text=text), ToolCall(id="call_1", name="read", args={"path": "src/parser.py"})],
                model="m",
                stop_reason="tool_use",
            )
        ),
        message_to_dict(ToolResultMessage(tool_call_id="call_1", tool_name="read", content=[TextContent(text=output)])),
    ]
    return [{"message": kinds[i % 3]} for i in range(MESSAGES)]


def _entries(payloads: list[dict[str, Any]]) -> list[Entry]:
    out = []
    parent = "root"
    for i, payload in enumerate(payloads):
        entry = Entry(id=uuid.uuid4().hex, parent_id=parent, timestamp=1.0e9 + i, type="message", payload=payload)
        out.append(entry)
        parent = entry.id
    return out


def _close(store: SessionStore) -> None:
    if isinstance(store, SqliteStore):
        store.close()


async def _append_all(store: SessionStore, entries: list[Entry]) -> str:
    writer = await store.create(cwd="/bench")
    for entry in entries:
        await writer.append(entry)
    await writer.close()
    return writer.id


async def _timed(fn: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await fn()
    return time.perf_counter() - start


def _disk_size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


async def _measure(name: str, make: Callable[[Path], SessionStore], entries: list[Entry]) -> str:
    append_times, load_times = [], []
    size = 0
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory() as tmp:
            store = make(Path(tmp))
            start = time.perf_counter()
            session_id = await _append_all(store, entries)
            append_times.append(time.perf_counter() - start)
            _close(store)
            store = make(Path(tmp))
            start = time.perf_counter()
            await store.load(session_id)
            load_times.append(time.perf_counter() - start)
            _close(store)
            size = _disk_size(Path(tmp))
    with tempfile.TemporaryDirectory() as tmp:
        store = make(Path(tmp))
        tracemalloc.start()
        session_id = await _append_all(store, entries)
        append_peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        _close(store)
        store = make(Path(tmp))
        tracemalloc.start()
        await store.load(session_id)
        load_peak = tracemalloc.get_traced_memory()[1] / 2**20
        tracemalloc.stop()
        _close(store)
    append_s = statistics.median(append_times)
    load_s = statistics.median(load_times)
    return (
        f"| {name} | {append_s * 1000:.0f} ms ({append_s / MESSAGES * 1e6:.1f} µs each) | {append_peak:.1f} MiB "
        f"| {load_s * 1000:.0f} ms | {load_peak:.1f} MiB | {size / 2**20:.1f} MiB |"
    )


async def _fsync_cost(make: Callable[[Path], SessionStore], entries: list[Entry]) -> float:
    with tempfile.TemporaryDirectory(dir=Path.home()) as tmp:
        store = make(Path(tmp))
        elapsed = await _timed(lambda: _append_all(store, entries[:FSYNC_APPENDS]))
        _close(store)
    return elapsed / FSYNC_APPENDS * 1e6


async def _list_cost(make: Callable[[Path], SessionStore]) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        store = make(Path(tmp))
        for i in range(LISTED_SESSIONS):
            writer = await store.create(cwd="/bench")
            await writer.append(
                Entry(id=f"e{i}", parent_id=writer.entries[0].id, timestamp=2.0e9 + i, type="message", payload={})
            )
            await writer.close()
        times = [await _timed(lambda: store.list(cwd="/bench", limit=50)) for _ in range(RUNS)]
        _close(store)
    return statistics.median(times) * 1000


async def _to_thread_hop() -> float:
    times = []
    for _ in range(200):
        start = time.perf_counter()
        await asyncio.to_thread(int)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


TURNS = 2_000


async def _noop(args: dict[str, Any], ctx: Any) -> str:
    return "ok"


def _tool_turns(turns: int) -> Any:
    # bench_core's model: the fewest events a tool turn can have, so the loop's own cost shows.
    from bench_core import MinimalModel

    return MinimalModel(turns)


async def _run_cost(make: Callable[[Path], SessionStore] | None) -> tuple[float, int]:
    """Seconds per committed message of a 2,000-tool-turn Agent run, with a session on
    ``make``'s store (None: no session), and the messages committed."""
    from ketch import Agent
    from ketch import Tool
    from ketch.sessions import Session

    noop = Tool("noop", "Does nothing.", {"type": "object", "properties": {}}, _noop)
    times = []
    committed = 0
    for _ in range(RUNS):
        with tempfile.TemporaryDirectory() as tmp:
            session = await Session.create(make(Path(tmp)), cwd=tmp) if make is not None else None
            agent = Agent(_tool_turns(TURNS), tools=[noop], session=session)
            start = time.perf_counter()
            result = await agent.prompt("go")
            times.append(time.perf_counter() - start)
            committed = len(result.messages)
            if session is not None:
                await session.close()
                _close(session.store)
    return statistics.median(times) / committed, committed


async def main() -> None:
    entries = _entries(_payloads())
    stores: list[tuple[str, Callable[[Path], SessionStore]]] = [
        ("JSONL", lambda d: JsonlStore(d / "sessions")),
        ("SQLite (WAL)", lambda d: SqliteStore(d / "sessions.db")),
    ]
    synced: list[tuple[str, Callable[[Path], SessionStore]]] = [
        ("JSONL", lambda d: JsonlStore(d / "sessions", fsync="always")),
        ("SQLite (WAL)", lambda d: SqliteStore(d / "sessions.db", fsync="always")),
    ]
    average = sum(len(msgspec.json.encode(e)) for e in entries) // len(entries)
    print(f"{MESSAGES:,} message entries (user, assistant with a tool call, tool result; {average:,} bytes each on average)")
    print(f"median of {RUNS} runs; peak = tracemalloc peak during one run\n")
    print("| store | append 10,000 | peak memory (append) | load 10,000 | peak memory (load) | on disk |")
    print("|---|---|---|---|---|---|")
    for name, make in stores:
        print(await _measure(name, make, entries))
    print()
    print("| store | per append, fsync=always | list: first 50 of 1,000 sessions |")
    print("|---|---|---|")
    for (name, make), (_, make_synced) in zip(stores, synced, strict=True):
        print(f"| {name} | {await _fsync_cost(make_synced, entries):.0f} µs | {await _list_cost(make):.1f} ms |")
    print(f"\nasyncio.to_thread round trip (no work): {await _to_thread_hop():.0f} µs")
    base, committed = await _run_cost(None)
    print(f"\nInside a run: an Agent with bench_core's minimal model, {TURNS:,} tool turns ({committed:,} messages committed)\n")
    print("| session | run cost per committed message | persistence per message | share of the loop's cost |")
    print("|---|---|---|---|")
    print(f"| none | {base * 1e6:.1f} µs | - | - |")
    for name, make in stores:
        cost, _ = await _run_cost(make)
        extra = cost - base
        print(f"| {name} | {cost * 1e6:.1f} µs | {extra * 1e6:.1f} µs | {extra / base:.0%} |")


if __name__ == "__main__":
    asyncio.run(main())
