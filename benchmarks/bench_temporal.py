"""Durable runs on Temporal: throughput with 1, 2 and 4 workers, per-run overhead;
ketch against the OpenAI Agents SDK's Temporal integration.

Run from the repository root (needs the ``temporal`` extra, and ``bench-temporal`` for
the SDK; starts its own Temporal dev servers and the scripted LLM server, all on
loopback)::

    PYTHONPATH=src python benchmarks/bench_temporal.py [--runs 200] [--workers 1,2,4]
        [--latency-runs 30] [--unsandboxed] [--only ketch|openai-agents]

The task is a short run of the benchmark suite's script: the prompt, one round of an
``add(a, b)`` call, then a final answer of 5 chunks (two model calls, one tool call),
against the scripted OpenAI-compatible server (``suite.server``). Each framework gets a
fresh dev server; for each:

- throughput: ``--runs`` runs started at once, all on worker processes (ketch:
  ``ketch worker --app bench_temporal:app``; the SDK: ``python -m bench_temporal_oai``),
  after 10 warm-up runs; runs per second from the first start to the last result, and
  the CPU the workers and the dev server spent per run (``/proc/<pid>/stat``);
- per-run latency: runs one after another on a worker in this process, against the same
  run in-process (``ketch.Agent``; ``Runner.run`` without Temporal); the difference is
  the cost of durability per run (two model activities, one tool activity, their
  workflow tasks and history writes). ketch's part also times a plain workflow of the
  same shape (three no-op activities), the floor the server sets.

ketch's model activity streams the response; the SDK's (``Runner.run``, the plugin's
``invoke_model_activity``) does not. The SDK part runs only when
``temporalio-openai-agents`` (with ``openai-agents``) is installed; otherwise the output
says so. Prints one JSON object.
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
import uuid
from collections.abc import Awaitable
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from temporalio import activity
from temporalio import workflow

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
    from ketch import Agent
    from ketch import get_model
    from ketch import tool
    from ketch.temporal import DurableAgent

    url = os.environ.get("BENCH_LLM_URL", "http://127.0.0.1:9/v1")
    model = get_model("openai:" + script.MODEL, api="openai-chat", base_url=url, api_key="x")
    return DurableAgent(Agent(model, tools=[tool(name="add")(add)]), name="bench")


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


async def _sequential(once: Callable[[], Awaitable[Any]], runs: int) -> float:
    """Mean milliseconds per run of ``once``, one run after another (after three warm-up runs)."""
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


def _start_workers(
    n: int, command: list[str], ready: str, env: dict[str, str]
) -> list[subprocess.Popen[str]]:
    """``n`` worker processes running ``command``, once each has printed its ``ready`` line."""
    procs = [
        subprocess.Popen(command, cwd=HERE, env=env, stdout=subprocess.PIPE, text=True) for _ in range(n)
    ]
    for p in procs:
        assert p.stdout is not None
        line = p.stdout.readline()
        if not line.startswith(ready):
            _stop(procs)
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
    text = result.transcript[-1].content[0].text  # type: ignore[attr-defined]
    if not text.startswith("Sums: 3."):
        raise RuntimeError(f"unexpected final text {text[:40]!r}")


async def _inprocess(runs: int, concurrent: bool) -> float:
    """Seconds for ``runs`` in-process runs of the same task (one after another, or all at once)."""
    from ketch import Agent
    from ketch import get_model
    from ketch import tool

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


async def _throughput(
    server: Any,
    counts: list[int],
    runs: int,
    queue_prefix: str,
    command: Callable[[str], list[str]],
    ready: str,
    env: dict[str, str],
    run: Callable[[str], Awaitable[None]],
) -> dict[str, dict[str, float]]:
    """For each worker count: ``runs`` runs started at once on worker processes (after
    10 warm-up runs); runs/s, and the workers' and the dev server's CPU per run."""
    keys = ("runs_per_s", "worker_cpu_ms_per_run", "temporal_server_cpu_ms_per_run")
    out: dict[str, dict[str, float]] = {key: {} for key in keys}
    server_pid = server.pid
    assert server_pid is not None
    for n in counts:
        queue = f"{queue_prefix}-{n}"
        procs = _start_workers(n, command(queue), ready, env)
        try:
            await asyncio.gather(*(run(queue) for _ in range(10)))  # warm-up
            cpu = sum(_cpu_seconds(p.pid) for p in procs)
            server_before = _cpu_seconds(server_pid)
            started = time.perf_counter()
            await asyncio.gather(*(run(queue) for _ in range(runs)))
            out["runs_per_s"][str(n)] = round(runs / (time.perf_counter() - started), 1)
            worker_cpu = sum(_cpu_seconds(p.pid) for p in procs) - cpu
            out["worker_cpu_ms_per_run"][str(n)] = round(1000 * worker_cpu / runs, 2)
            server_cpu = _cpu_seconds(server_pid) - server_before
            out["temporal_server_cpu_ms_per_run"][str(n)] = round(1000 * server_cpu / runs, 2)
        finally:
            _stop(procs)
    return out


async def _measure_ketch(args: argparse.Namespace, counts: list[int], env: dict[str, str]) -> dict[str, Any]:
    """ketch's durable runs (``ketch worker`` processes) on a dev server of their own."""
    from temporalio.client import Client
    from temporalio.worker import Worker

    from ketch.temporal import DevServer
    from ketch.temporal import build_worker

    out: dict[str, Any] = {}
    bench = agent()
    async with DevServer() as server:
        client = await Client.connect(server.address)
        # Latency: one run after another, each on a worker in this process; the same
        # for a plain workflow of the same shape (the SDK's and the server's floor).
        async with Worker(client, task_queue="plain", workflows=[Plain], activities=[_noop]):
            out["plain_workflow_latency_ms"] = await _sequential(
                lambda: client.execute_workflow("plain", id=f"plain-{uuid.uuid4().hex}", task_queue="plain"),
                args.latency_runs,
            )
        async with build_worker(client, task_queue="latency", agents=[bench], sandboxed=not args.unsandboxed):
            out["durable_latency_ms"] = await _sequential(
                lambda: _durable_run(client, bench, "latency"), args.latency_runs
            )
        command = [sys.executable, "-m", "ketch", "worker", "--address", server.address,
                   "--app", "bench_temporal:app", "--task-queue"]
        figures = await _throughput(
            server, counts, args.runs, QUEUE, lambda queue: [*command, queue], "ketch worker:", env,
            lambda queue: _durable_run(client, bench, queue),
        )
    out["durable_runs_per_s"] = figures["runs_per_s"]
    out["worker_cpu_ms_per_run"] = figures["worker_cpu_ms_per_run"]
    out["temporal_server_cpu_ms_per_run"] = figures["temporal_server_cpu_ms_per_run"]
    seq = await _inprocess(args.latency_runs, concurrent=False)
    out["inprocess_latency_ms"] = round(1000 * seq / args.latency_runs, 2)
    par = await _inprocess(args.runs, concurrent=True)
    out["inprocess_runs_per_s"] = round(args.runs / par, 1)
    out["overhead_per_run_ms"] = round(out["durable_latency_ms"] - out["inprocess_latency_ms"], 2)
    out["overhead_over_plain_workflow_ms"] = round(out["durable_latency_ms"] - out["plain_workflow_latency_ms"], 2)
    return out


async def _measure_openai_agents(
    args: argparse.Namespace, counts: list[int], env: dict[str, str]
) -> dict[str, Any]:
    """The same task on the OpenAI Agents SDK's Temporal integration (``bench_temporal_oai``
    worker processes) on a dev server of its own, measured the same way."""
    from importlib.metadata import version

    import bench_temporal_oai as oai
    from temporalio.client import Client

    from ketch.temporal import DevServer

    out: dict[str, Any] = {
        "versions": {name: version(name) for name in ("openai-agents", "temporalio-openai-agents", "openai")},
        "model_calls": "not streamed (Runner.run: the plugin's invoke_model_activity)",
    }
    async with DevServer() as server:
        client = await Client.connect(server.address, plugins=[oai.plugin()])
        async with oai.worker(client, "oai-latency"):
            out["durable_latency_ms"] = await _sequential(
                lambda: oai.durable_run(client, "oai-latency", f"oai-{uuid.uuid4().hex}"), args.latency_runs
            )
        command = [sys.executable, "-m", "bench_temporal_oai", "--address", server.address, "--task-queue"]
        figures = await _throughput(
            server, counts, args.runs, "oai", lambda queue: [*command, queue], "oai worker:", env,
            lambda queue: oai.durable_run(client, queue, f"oai-{uuid.uuid4().hex}"),
        )
    out.update(figures)
    url = os.environ["BENCH_LLM_URL"]
    seq = await oai.inprocess(args.latency_runs, False, url)
    out["inprocess_latency_ms"] = round(1000 * seq / args.latency_runs, 2)
    par = await oai.inprocess(args.runs, True, url)
    out["inprocess_runs_per_s"] = round(args.runs / par, 1)
    out["overhead_per_run_ms"] = round(out["durable_latency_ms"] - out["inprocess_latency_ms"], 2)
    return out


def _cpu_model() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--latency-runs", type=int, default=30)
    parser.add_argument(
        "--unsandboxed", action="store_true", help="ketch's workers run the workflow without the sandbox"
    )
    parser.add_argument("--only", choices=["ketch", "openai-agents"], help="measure one of the two")
    args = parser.parse_args()
    counts = [int(n) for n in args.workers.split(",")]

    from importlib.metadata import version
    from importlib.util import find_spec

    llm, port = _start_llm_server()
    os.environ["BENCH_LLM_URL"] = _url(port)
    os.environ["OPENAI_AGENTS_DISABLE_TRACING"] = "1"
    if args.unsandboxed:
        os.environ["BENCH_UNSANDBOXED"] = "1"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(HERE)]))
    out: dict[str, Any] = {
        "machine": f"{_cpu_model()}, {os.cpu_count()} cores, Python {platform.python_version()}",
        "load_at_start": [round(x, 2) for x in os.getloadavg()],
        "temporalio": version("temporalio"),
        "task": f"{ROUNDS} tool round + {CHUNKS}-chunk answer (2 model calls, 1 tool call)",
        "runs": args.runs,
        "sandboxed": not args.unsandboxed,
    }
    try:
        if args.only != "openai-agents":
            out["ketch"] = await _measure_ketch(args, counts, env)
        if args.only != "ketch":
            if find_spec("agents") is None or find_spec("temporalio.openai_agents") is None:
                out["openai_agents_temporal"] = (
                    "not run: temporalio-openai-agents (with openai-agents; the bench extra) is not installed"
                )
            else:
                out["openai_agents_temporal"] = await _measure_openai_agents(args, counts, env)
    finally:
        llm.terminate()
        llm.wait()
    out["load_at_end"] = [round(x, 2) for x in os.getloadavg()]
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    asyncio.run(main())
