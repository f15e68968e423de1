"""Durable runs on Temporal: throughput with 1, 2 and 4 workers, per-run overhead.

Run from the repository root (needs the ``temporal`` extra; starts its own Temporal dev
server and the scripted LLM server, both on loopback)::

    PYTHONPATH=src python benchmarks/bench_temporal.py [--runs 200] [--workers 1,2,4]

The task is a short run of the benchmark suite's script: the prompt, one round of a
streamed ``add(a, b)`` call, then a final answer of 5 streamed chunks (two model calls,
one tool call), against the scripted OpenAI-compatible server (``suite.server``).

- throughput: ``--runs`` runs started at once, all on worker processes
  (``ketch worker --app bench_temporal:app``); runs per second from the first start to
  the last result;
- per-run latency: runs one after another (one worker), against the same run in-process
  (``ketch.Agent``); the difference is the cost of durability per run (two model
  activities, one tool activity, their workflow tasks and history writes).

The OpenAI Agents SDK's Temporal integration is compared only when ``openai-agents``
is installed (the ``bench`` extra); otherwise the script says so.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import subprocess
import sys
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity, workflow

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))

from suite import script  # noqa: E402

ROUNDS = 1
CHUNKS = 5
QUEUE = "bench"


def _url(port: int) -> str:
    return f"http://127.0.0.1:{port}{script.base_path(ROUNDS, CHUNKS)}/v1"


async def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def agent() -> Any:
    """The benchmark's durable agent (its model points at ``$BENCH_LLM_URL``)."""
    from ketch import get_model, tool
    from ketch.temporal import DurableAgent

    url = os.environ.get("BENCH_LLM_URL", "http://127.0.0.1:9/v1")
    model = get_model("openai:" + script.MODEL, api="openai-chat", base_url=url, api_key="x")
    return DurableAgent("bench", model, tools=[tool(name="add")(add)])


def app() -> dict[str, Any]:
    """What each worker process runs (``ketch worker --app bench_temporal:app``)."""
    return {
        "agents": [agent()],
        "max_concurrent_activities": 200,
        "sandboxed": os.environ.get("BENCH_UNSANDBOXED") != "1",
    }


@activity.defn(name="plain.noop")
async def _noop(x: int) -> int:
    return x


@workflow.defn(name="plain", sandboxed=False)
class Plain:
    """A plain Temporal workflow with the same activities (two model calls, one tool
    call) doing nothing: the floor the SDK and the server set for a run of this shape."""

    @workflow.run
    async def run(self) -> int:
        """Three activities in a row."""
        for i in range(3):
            await workflow.execute_activity("plain.noop", i, start_to_close_timeout=timedelta(seconds=30))
        return 0


async def _sequential(client: Any, queue: str, runs: int, plain: bool, bench: Any) -> float:
    """Mean milliseconds per run, one run after another (after three warm-up runs)."""
    import uuid

    async def once() -> None:
        if plain:
            await client.execute_workflow("plain", id=f"plain-{uuid.uuid4().hex}", task_queue=queue)
        else:
            await _durable_run(client, bench, queue)

    for _ in range(3):
        await once()
    started = time.perf_counter()
    for _ in range(runs):
        await once()
    return round(1000 * (time.perf_counter() - started) / runs, 2)


def _start_llm_server() -> tuple[subprocess.Popen[str], int]:
    p = subprocess.Popen(
        [sys.executable, "-m", "suite.server", "--port", "0"], cwd=HERE, stdout=subprocess.PIPE, text=True
    )
    assert p.stdout is not None
    line = p.stdout.readline()
    if not line.startswith("READY "):
        p.kill()
        raise RuntimeError(f"scripted server did not start: {line!r}")
    return p, int(line.split()[1])


def _start_workers(n: int, address: str, queue: str, env: dict[str, str]) -> list[subprocess.Popen[str]]:
    procs = []
    for _ in range(n):
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "ketch", "worker", "--task-queue", queue, "--address", address,
             "--app", "bench_temporal:app"],
            env=env, stdout=subprocess.PIPE, text=True,
        ))
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        if not line.startswith("ketch worker:"):
            raise RuntimeError(f"worker did not start: {line!r}")
    return procs


def _cpu_seconds(pid: int) -> float:
    """User + system CPU seconds a process used so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _stop(procs: list[subprocess.Popen[str]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(15)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


async def _durable_run(client: Any, bench: Any, queue: str) -> None:
    from ketch.temporal import start_run

    run = await start_run(client, bench, script.PROMPT, task_queue=queue)
    result = await run.result()
    if result.summary.end_reason != "stop" or result.summary.tool_calls != ROUNDS:
        raise RuntimeError(f"run ended with {result.summary.end_reason}: {result.summary.error}")
    text = result.transcript[-1].content[0].text  # type: ignore[union-attr]
    if not text.startswith("Sums: 3."):
        raise RuntimeError(f"unexpected final text {text[:40]!r}")


async def _inprocess(runs: int, concurrent: bool) -> float:
    """Seconds for ``runs`` in-process runs of the same task (one after another, or all at once)."""
    from ketch import Agent, get_model, tool

    model = get_model("openai:" + script.MODEL, api="openai-chat", base_url=os.environ["BENCH_LLM_URL"], api_key="x")
    add_tool = tool(name="add")(add)

    async def once() -> None:
        result = await Agent(model, tools=[add_tool]).prompt(script.PROMPT)
        assert result.end_reason == "stop", result.summary.error

    await once()
    started = time.perf_counter()
    if concurrent:
        await asyncio.gather(*(once() for _ in range(runs)))
    else:
        for _ in range(runs):
            await once()
    return time.perf_counter() - started


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--latency-runs", type=int, default=30)
    parser.add_argument("--unsandboxed", action="store_true", help="workers run the workflow without the sandbox")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]

    from temporalio.client import Client

    from ketch.temporal import DevServer

    llm, port = _start_llm_server()
    os.environ["BENCH_LLM_URL"] = _url(port)
    if args.unsandboxed:
        os.environ["BENCH_UNSANDBOXED"] = "1"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(HERE)]))
    out: dict[str, Any] = {
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "task": f"{ROUNDS} tool round + {CHUNKS}-chunk answer (2 model calls, 1 tool call)",
        "runs": args.runs,
        "sandboxed": not args.unsandboxed,
    }
    try:
        async with DevServer() as server:
            client = await Client.connect(server.address)
            bench = agent()
            throughput: dict[str, float] = {}
            worker_cpu: dict[str, float] = {}
            server_cpu: dict[str, float] = {}
            server_pid = server.pid
            assert server_pid is not None
            # Latency: one run after another, each on a worker in this process; the same
            # for a plain workflow of the same shape (the SDK's and the server's floor).
            from temporalio.worker import Worker

            from ketch.temporal import build_worker

            async with Worker(client, task_queue="plain", workflows=[Plain], activities=[_noop]):
                out["plain_workflow_latency_ms"] = await _sequential(client, "plain", args.latency_runs, True, bench)
            async with build_worker(client, task_queue="latency", agents=[bench], sandboxed=not args.unsandboxed):
                out["durable_latency_ms"] = await _sequential(client, "latency", args.latency_runs, False, bench)
            for n in counts:
                queue = f"{QUEUE}-{n}"
                procs = _start_workers(n, server.address, queue, env)
                try:
                    await asyncio.gather(*(_durable_run(client, bench, queue) for _ in range(10)))  # warm-up
                    cpu = sum(_cpu_seconds(p.pid) for p in procs)
                    server_before = _cpu_seconds(server_pid)
                    started = time.perf_counter()
                    await asyncio.gather(*(_durable_run(client, bench, queue) for _ in range(args.runs)))
                    throughput[str(n)] = round(args.runs / (time.perf_counter() - started), 1)
                    worker_cpu[str(n)] = round(1000 * (sum(_cpu_seconds(p.pid) for p in procs) - cpu) / args.runs, 2)
                    server_cpu[str(n)] = round(1000 * (_cpu_seconds(server_pid) - server_before) / args.runs, 2)
                finally:
                    _stop(procs)
            out["durable_runs_per_s"] = throughput
            out["worker_cpu_ms_per_run"] = worker_cpu
            out["temporal_server_cpu_ms_per_run"] = server_cpu
        seq = await _inprocess(args.latency_runs, concurrent=False)
        out["inprocess_latency_ms"] = round(1000 * seq / args.latency_runs, 2)
        par = await _inprocess(args.runs, concurrent=True)
        out["inprocess_runs_per_s"] = round(args.runs / par, 1)
        out["overhead_per_run_ms"] = round(out["durable_latency_ms"] - out["inprocess_latency_ms"], 2)
        out["overhead_over_plain_workflow_ms"] = round(out["durable_latency_ms"] - out["plain_workflow_latency_ms"], 2)
        try:
            import agents  # noqa: F401
            out["openai_agents_temporal"] = "installed but not benchmarked by this script"
        except ImportError:
            out["openai_agents_temporal"] = "not run: openai-agents is not installed in this environment"
    finally:
        llm.terminate()
        llm.wait()
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
