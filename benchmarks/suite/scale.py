"""Many concurrent ketch runs in one process, and the memory of idle agents.

Run: ``python -m suite.scale runs --url URL --n 1000`` or ``python -m suite.scale idle
--n 10000`` (from ``benchmarks/``); each prints one JSON object.

``runs`` starts ``n`` runs of the benchmark task at once (one ``Agent`` each, one model,
one process). The first ``add`` call of every run waits on a barrier until all ``n``
runs have reached it, so at that moment every run is in flight (its agent, transcript,
loop state and pending tool all live); the resident memory then, minus the memory before
the runs started, divided by ``n`` is the memory per in-flight run. Afterwards it checks
every run's result, that no asyncio task is left (counted at once, which shows
async-generator finalizer tasks still queued, and again 0.4 s later), and counts open sockets and file
descriptors: after the runs (idle keep-alive connections stay pooled) and after
``close_session()`` (back to the count before the first request).
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import resource
import sys
import time
import tracemalloc
from typing import Any

from . import script

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    """Current resident set size of this process."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE


def open_fds() -> tuple[int, int]:
    """``(file descriptors, of which sockets)`` open in this process."""
    fds = sockets = 0
    for name in os.listdir("/proc/self/fd"):
        fds += 1
        try:
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                sockets += 1
        except OSError:
            pass
    return fds, sockets


async def concurrent_runs(url: str, n: int) -> dict[str, Any]:
    """``n`` concurrent ketch runs of the benchmark task; figures and checks."""
    from ketch import Agent
    from ketch import get_model
    from ketch import tool
    from ketch.llm import close_session

    model = get_model("openai:" + script.MODEL, api="openai-chat", base_url=url, api_key="x")
    arrived = 0
    everyone_in = asyncio.Event()
    gate = {"on": False}
    snapshot: dict[str, Any] = {}

    async def add(a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: The first number.
            b: The second number.
        """
        nonlocal arrived
        if gate["on"] and a == 1:
            arrived += 1
            if arrived == n:
                snapshot["rss_all_in_flight"] = rss_bytes()
                snapshot["t_all_in_flight"] = time.perf_counter()
                everyone_in.set()
            else:
                await everyone_in.wait()
        return a + b

    add_tool = tool(add)
    expected = script.expected_text()

    async def one() -> bool:
        result = await Agent(model, tools=[add_tool]).prompt(script.PROMPT)
        return (
            result.end_reason == "stop"
            and result.text == expected
            and result.summary.tool_calls == script.ROUNDS
        )

    assert await one(), "warm-up run failed"
    fds_before, sockets_before = open_fds()
    await close_session()
    fds_no_session, sockets_no_session = open_fds()
    assert await one(), "warm-up run failed"
    gc.collect()
    rss_before = rss_bytes()
    gate["on"] = True
    usage0 = resource.getrusage(resource.RUSAGE_SELF)
    t0 = time.perf_counter()
    outcomes = await asyncio.gather(*(one() for _ in range(n)), return_exceptions=True)
    wall = time.perf_counter() - t0
    usage1 = resource.getrusage(resource.RUSAGE_SELF)
    ok = sum(1 for o in outcomes if o is True)
    raised = [o for o in outcomes if isinstance(o, BaseException)]
    await asyncio.sleep(0)
    tasks_right_after = len(asyncio.all_tasks()) - 1
    await asyncio.sleep(0.2)
    gc.collect()
    await asyncio.sleep(0.2)
    leftover_tasks = len(asyncio.all_tasks()) - 1
    fds_after, sockets_after = open_fds()
    await close_session()
    await asyncio.sleep(0)
    fds_closed, sockets_closed = open_fds()
    cpu = (usage1.ru_utime - usage0.ru_utime) + (usage1.ru_stime - usage0.ru_stime)
    return {
        "n": n,
        "ok": ok,
        "failed": n - ok,
        "first_exception": repr(raised[0]) if raised else None,
        "wall_s": wall,
        "runs_per_s": n / wall,
        "cpu_s": cpu,
        "cpu_per_run_ms": cpu / n * 1e3,
        "rss_before_mb": rss_before / 2**20,
        "rss_all_in_flight_mb": snapshot.get("rss_all_in_flight", 0) / 2**20,
        "kb_per_in_flight_run": (snapshot.get("rss_all_in_flight", 0) - rss_before) / n / 1024,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "time_to_all_in_flight_s": snapshot.get("t_all_in_flight", t0) - t0,
        "tasks_right_after": tasks_right_after,
        "leftover_tasks": leftover_tasks,
        "fds_with_session_before": fds_before,
        "sockets_with_session_before": sockets_before,
        "fds_without_session_before": fds_no_session,
        "sockets_without_session_before": sockets_no_session,
        "fds_after_runs": fds_after,
        "sockets_after_runs": sockets_after,
        "fds_after_close": fds_closed,
        "sockets_after_close": sockets_closed,
    }


def idle_agents(n: int) -> dict[str, Any]:
    """Memory of ``n`` idle ``Agent`` objects sharing one model and one tool."""
    from ketch import Agent
    from ketch import get_model
    from ketch import tool

    from .script import add_numbers

    model = get_model(
        "openai:" + script.MODEL, api="openai-chat", base_url="http://127.0.0.1:9/v1", api_key="x"
    )
    add = tool(name="add")(add_numbers)
    Agent(model, tools=[add])
    gc.collect()
    rss0 = rss_bytes()
    t0 = time.perf_counter()
    agents = [Agent(model, tools=[add]) for _ in range(n)]
    build = time.perf_counter() - t0
    gc.collect()
    rss1 = rss_bytes()
    del agents
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    agents = [Agent(model, tools=[add]) for _ in range(n)]
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    traced = sum(s.size_diff for s in after.compare_to(before, "filename"))
    del agents
    return {
        "n": n,
        "rss_per_agent_kb": (rss1 - rss0) / n / 1024,
        "traced_per_agent_kb": traced / n / 1024,
        "construction_us": build / n * 1e6,
    }


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser()
    parser.add_argument("mode", choices=["runs", "idle"])
    parser.add_argument("--url")
    parser.add_argument("--n", type=int, default=1000)
    args = parser.parse_args()
    if args.mode == "runs":
        out = asyncio.run(concurrent_runs(args.url, args.n))
    else:
        out = idle_agents(args.n)
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
