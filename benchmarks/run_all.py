"""The benchmark suite: ketch against the hand-written floor and peer agent frameworks.

Run (the peers come from the ``bench`` extra; one command, a few minutes)::

    pip install -e '.[bench]'
    python benchmarks/run_all.py              # add --big for 10,000 concurrent runs

It starts the scripted LLM server (:mod:`suite.server`) in its own process, then:

1. runs the same agent task — a prompt, three rounds of one streamed ``add(a, b)``
   call, a final answer of 300 streamed chunks; 200 runs, 10 at a time, after a
   warm-up run — in a fresh process per implementation: a hand-written aiohttp loop
   (the floor), ketch, the OpenAI Agents SDK, Pydantic AI (and ketch on the Anthropic
   adapter). Implementations alternate, ``--reps`` times (rotating the order), and
   the medians with min and max are reported, with client CPU per run measured
   inside each client process around the measured section only;
2. 1,000 (and with ``--big`` 10,000) concurrent ketch runs in one process, and the
   memory of 10,000 idle agents;
3. the cost of one more turn on transcripts of 10, 1,000 and 10,000 messages;
4. cold start: ``import ketch`` and the time to the first event of a run.

Prints Markdown tables; ``--json PATH`` also writes every raw figure.
``--profile`` writes a pyinstrument profile of ketch's measured section to
``$TMPDIR/ketch-profile.txt`` and prints a cProfile summary (main thread only).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from suite import script  # noqa: E402
from suite.impls import LABELS  # noqa: E402

# Children run in benchmarks/, so relative PYTHONPATH entries (PYTHONPATH=src) are made absolute.
_PATHS = [str(HERE), *(os.path.abspath(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p)]
ENV = {**os.environ, "PYTHONPATH": os.pathsep.join(_PATHS)}
PEERS = {"openai-agents": "agents", "pydantic-ai": "pydantic_ai"}


# -- processes ------------------------------------------------------------------------------
class Server:
    """The scripted server in a child process."""

    def __init__(self) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "suite.server"], cwd=HERE, env=ENV, stdout=subprocess.PIPE, text=True
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line.startswith("READY "):
            self.proc.kill()
            raise RuntimeError(f"server did not start: {line!r}")
        self.port = int(line.split()[1])
        self.base = f"http://127.0.0.1:{self.port}"

    def url(self, rounds: int = script.ROUNDS, chunks: int = script.CHUNKS) -> str:
        """The base URL (``.../v1``) of a script."""
        return self.base + script.base_path(rounds, chunks) + "/v1"

    def stats(self) -> dict[str, Any]:
        """The server's CPU seconds and request counts so far."""
        with urllib.request.urlopen(self.base + "/stats") as response:
            return dict(json.load(response))

    def stop(self) -> None:
        """Terminate the server."""
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def child(args: list[str], timeout: float = 900) -> dict[str, Any]:
    """Run ``python -m <args>`` in ``benchmarks/`` and parse its last output line as JSON."""
    done = subprocess.run(
        [sys.executable, "-m", *args], cwd=HERE, env=ENV, capture_output=True, text=True, timeout=timeout
    )
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:2])} failed:\n{done.stderr[-3000:]}")
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def machine() -> dict[str, Any]:
    """nproc, CPU model, memory, Python and OS."""
    model = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    mem = ""
    try:
        kb = int(Path("/proc/meminfo").read_text().split()[1])
        mem = f"{kb / 2**20:.0f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "memory": mem,
        "python": platform.python_version(),
        "os": f"{platform.system()} {platform.release()}",
    }


# -- figures ----------------------------------------------------------------------------------
def spread(values: list[float], fmt: str = "{:.2f}") -> str:
    """``median (min–max)``."""
    return f"{fmt.format(statistics.median(values))} ({fmt.format(min(values))}–{fmt.format(max(values))})"


def compare(server: Server, impls: list[str], reps: int, runs: int, concurrency: int) -> dict[str, Any]:
    """Alternate the implementations ``reps`` times; raw results per implementation."""
    results: dict[str, list[dict[str, Any]]] = {impl: [] for impl in impls}
    for rep in range(reps):
        order = impls[rep % len(impls) :] + impls[: rep % len(impls)]
        for impl in order:
            before = server.stats()
            args = ["--url", server.url(), "--runs", str(runs), "--concurrency", str(concurrency)]
            out = child(["suite.client", impl, *args])
            after = server.stats()
            out["server_cpu"] = after["cpu"] - before["cpu"]
            if out["errors"] or out["failed_checks"]:
                raise RuntimeError(f"{impl} failed its checks: {out['first_error'] or out['first_failure']}")
            # The warm-up run and the measured ones: one streamed request per round plus the answer.
            want = (runs + 1) * (script.ROUNDS + 1)
            streamed = after["streamed"] - before["streamed"]
            if streamed != want or after["unstreamed"] != before["unstreamed"]:
                raise RuntimeError(
                    f"{impl} sent {streamed} streamed requests (expected {want}) or unstreamed ones"
                )
            results[impl].append(out)
            print(
                f"  rep {rep + 1}/{reps} {impl:16} cpu/run {out['cpu'] / runs * 1e3:7.2f} ms  "
                f"wall {out['wall']:6.2f} s  rss {out['maxrss_kb'] / 1024:6.1f} MB",
                file=sys.stderr,
                flush=True,
            )
    return results


def comparison_tables(results: dict[str, list[dict[str, Any]]], runs: int) -> tuple[str, str, dict[str, Any]]:
    """The main table, the provider-layer table, and the ratios."""
    lines = [
        f"| implementation | client CPU per run (ms) | wall, {runs} runs (s) | peak RSS (MB) | server CPU per run (ms) |",
        "|---|---|---|---|---|",
    ]
    for impl, rows in results.items():
        cpu = [r["cpu"] / runs * 1e3 for r in rows]
        wall = [r["wall"] for r in rows]
        rss = [r["maxrss_kb"] / 1024 for r in rows]
        server = [r["server_cpu"] / runs * 1e3 for r in rows]
        lines.append(
            f"| {LABELS[impl]} | {spread(cpu)} | {spread(wall)} | {spread(rss, '{:.0f}')} | {spread(server)} |"
        )
    ratios: dict[str, Any] = {}
    ratio_lines = ["", "| ratio (client CPU per run, same invocation) | median (min–max) |", "|---|---|"]
    for other in ("floor", "openai-agents", "pydantic-ai"):
        if other in results and "ketch" in results:
            per_rep = [k["cpu"] / o["cpu"] for k, o in zip(results["ketch"], results[other], strict=True)]
            ratios[f"ketch/{other}"] = per_rep
            ratio_lines.append(f"| ketch / {LABELS[other]} | {spread(per_rep)} |")
    provider = [
        "| client CPU per agent run | ms, median (min–max) | ratio to the floor |",
        "|---|---|---|",
    ]
    for impl in ("floor", "ketch", "ketch-anthropic"):
        if impl in results and "floor" in results:
            cpu = [r["cpu"] / runs * 1e3 for r in results[impl]]
            ratio = [k["cpu"] / f["cpu"] for k, f in zip(results[impl], results["floor"], strict=True)]
            provider.append(f"| {LABELS[impl]} | {spread(cpu)} | {spread(ratio)} |")
    return "\n".join(lines + ratio_lines), "\n".join(provider), ratios


def scale(server: Server, sizes: list[int]) -> tuple[str, list[dict[str, Any]], dict[str, Any]]:
    """Concurrent runs per size, and idle agents."""
    rows = []
    for n in sizes:
        print(f"  {n} concurrent ketch runs", file=sys.stderr, flush=True)
        rows.append(child(["suite.scale", "runs", "--url", server.url(), "--n", str(n)], timeout=1800))
    idle = child(["suite.scale", "idle", "--n", "10000"])
    lines = [
        "| concurrent runs | completed | runs/s | client CPU per run (ms) | memory per in-flight run (KB) | peak RSS (MB) | tasks left | sockets after / after close (before) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['n']:,} | {r['ok']:,} ({r['failed']} failed) | {r['runs_per_s']:.0f} | {r['cpu_per_run_ms']:.2f} | "
            f"{r['kb_per_in_flight_run']:.1f} | {r['peak_rss_mb']:.0f} | {r['leftover_tasks']} "
            f"({r['tasks_right_after']} finalizers queued at once) | {r['sockets_after_runs']} / "
            f"{r['sockets_after_close']} ({r['sockets_without_session_before']}) |"
        )
    lines.append("")
    lines.append(
        f"10,000 idle `Agent` objects: {idle['traced_per_agent_kb']:.2f} KB each (tracemalloc), "
        f"{idle['rss_per_agent_kb']:.2f} KB each (RSS), {idle['construction_us']:.1f} µs to build one."
    )
    return "\n".join(lines), rows, idle


def history(server: Server) -> tuple[str, dict[str, Any]]:
    """One more turn on long transcripts."""
    out = child(["suite.history", "--url-base", server.base])
    lines = [
        "| transcript | request | wall per turn (ms) | client CPU per turn (ms) | encoding the request (ms) "
        "| sending it: POST call until response headers (ms) | CPU beyond encoding and sending (ms) "
        "| vs 10 messages: total / beyond encoding / "
        "beyond encoding and sending |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in out["rows"]:
        lines.append(
            f"| {r['messages']:,} messages | {r['request_kb']:,.0f} KB | {r['wall_ms']:.2f} | {r['cpu_ms']:.2f} | "
            f"{r['encode_ms']:.2f} | {r['send_ms']:.2f} | {r['cpu_beyond_encode_send_ms']:.2f} | "
            f"{r['cpu_ratio']:.2f}x / {r['cpu_beyond_encode_ratio']:.2f}x / {r['cpu_beyond_encode_send_ratio']:.2f}x |"
        )
    return "\n".join(lines), out


def coldstart(server: Server, repeats: int) -> tuple[str, dict[str, Any]]:
    """Process-level import time and time to first event, medians."""

    def wall(code: str) -> float:
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, env=ENV)
        return time.perf_counter() - t0

    bare = [wall("pass") for _ in range(repeats)]
    full = [wall("import ketch") for _ in range(repeats)]
    inproc = [
        float(
            subprocess.check_output(
                [
                    sys.executable,
                    "-c",
                    "import time; t=time.perf_counter(); import ketch; print(time.perf_counter()-t)",
                ],
                env=ENV,
            )
        )
        for _ in range(repeats)
    ]
    first: list[dict[str, Any]] = []
    path = str(HERE / "suite" / "coldstart.py")
    for _ in range(repeats):
        t0 = time.monotonic()
        done = subprocess.run(
            [sys.executable, path, server.url(), repr(t0)],
            capture_output=True,
            text=True,
            env=ENV,
            check=True,
        )
        first.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert all(f["end_reason"] == "stop" for f in first), first

    def ms(values: list[float]) -> str:
        return spread([v * 1e3 for v in values], "{:.0f}")

    lines = [
        "| cold start (fresh process, ms; median (min–max)) | value |",
        "|---|---|",
        f'| `python -c "import ketch"`, whole process | {ms(full)} |',
        f'| `python -c "pass"`, whole process (baseline) | {ms(bare)} |',
        f"| `import ketch` inside the process | {ms(inproc)} |",
        f"| start to `import ketch` done | {ms([f['import_done'] for f in first])} |",
        f"| start to first event of a run (`agent_start`) | {ms([f['first_event'] for f in first])} |",
        f"| start to first streamed delta (includes the lazy aiohttp import and connect) | {ms([f['first_delta'] for f in first])} |",
        f"| start to end of the run (3 tool rounds, 300 chunks) | {ms([f['run_done'] for f in first])} |",
    ]
    return "\n".join(lines), {"bare": bare, "import": full, "inproc": inproc, "runs": first}


def profile(server: Server, runs: int, concurrency: int) -> str:
    """Profile ketch's measured section: pyinstrument to a file, cProfile summary printed."""
    target = Path(tempfile.gettempdir()) / "ketch-profile.txt"
    child(
        [
            "suite.client",
            "ketch",
            "--url",
            server.url(),
            "--runs",
            str(runs),
            "--concurrency",
            str(concurrency),
            "--profile",
            "pyinstrument",
            "--profile-out",
            str(target),
        ]
    )
    stats = Path(tempfile.gettempdir()) / "ketch-profile.pstats"
    child(
        [
            "suite.client",
            "ketch",
            "--url",
            server.url(),
            "--runs",
            str(runs),
            "--concurrency",
            str(concurrency),
            "--profile",
            "cprofile",
            "--profile-out",
            str(stats),
        ]
    )
    import io
    import pstats

    buf = io.StringIO()
    pstats.Stats(str(stats), stream=buf).sort_stats("tottime").print_stats(30)
    stats.unlink()
    return f"pyinstrument tree: {target}\n\n```\n{buf.getvalue()}\n```"


def targets(
    ratios: dict[str, Any], scale_rows: list[dict[str, Any]], hist: dict[str, Any], cold: dict[str, Any]
) -> str:
    """The targets table."""
    rows = ["| target | measured | met |", "|---|---|---|"]

    def add(name: str, measured: str, ok: bool) -> None:
        rows.append(f"| {name} | {measured} | {'yes' if ok else '**no**'} |")

    if "ketch/floor" in ratios:
        r = statistics.median(ratios["ketch/floor"])
        add("ketch CPU per run ≤ 2x the floor", f"{r:.2f}x", r <= 2)
    for peer in ("openai-agents", "pydantic-ai"):
        key = f"ketch/{peer}"
        if key in ratios:
            r = statistics.median(ratios[key])
            add(f"ketch CPU per run ≥ 5x below {LABELS[peer]}", f"{1 / r:.1f}x below", 1 / r >= 5)
    for row in scale_rows:
        ok = (
            row["failed"] == 0
            and row["leftover_tasks"] == 0
            and row["sockets_after_close"] <= row["sockets_without_session_before"]
        )
        add(
            f"{row['n']:,} concurrent runs complete without errors or leaks",
            f"{row['ok']:,} ok, {row['kb_per_in_flight_run']:.1f} KB per in-flight run",
            ok,
        )
    last = hist["rows"][-1]
    add(
        f"flat cost per turn, 10 → {last['messages']:,} messages (≤ 1.5x beyond encoding and sending the request)",
        f"{last['cpu_beyond_encode_send_ratio']:.2f}x beyond encoding and sending; "
        f"{last['cpu_beyond_encode_ratio']:.2f}x beyond encoding alone; {last['cpu_ratio']:.1f}x in total",
        last["cpu_beyond_encode_send_ratio"] <= 1.5,
    )
    imp = statistics.median(cold["inproc"]) * 1e3
    add(
        "import ketch < 150 ms",
        f"{imp:.0f} ms in process, {statistics.median(cold['import']) * 1e3:.0f} ms whole process",
        imp < 150,
    )
    return "\n".join(rows)


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description="ketch benchmark suite")
    parser.add_argument("--reps", type=int, default=7, help="repetitions of the comparison (default 7)")
    parser.add_argument("--runs", type=int, default=200, help="measured runs per client process")
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--impls", default="floor,ketch,openai-agents,pydantic-ai,ketch-anthropic")
    parser.add_argument("--big", action="store_true", help="also 10,000 concurrent runs")
    parser.add_argument(
        "--skip", default="", help="comma list of sections to skip: compare,scale,history,cold"
    )
    parser.add_argument("--profile", action="store_true", help="profile ketch's measured section")
    parser.add_argument("--json", help="write all raw figures to this file")
    args = parser.parse_args()
    skip = set(filter(None, args.skip.split(",")))
    impls = [i for i in args.impls.split(",") if i]
    missing = [i for i in impls if i in PEERS and importlib.util.find_spec(PEERS[i]) is None]
    impls = [i for i in impls if i not in missing]
    info = machine()
    raw: dict[str, Any] = {"machine": info, "skipped_not_installed": missing}
    out: list[str] = [
        f"Machine: {info['nproc']} CPUs ({info['cpu']}), {info['memory']}, Python {info['python']}, {info['os']}.",
    ]
    if missing:
        out.append(f"Not installed, skipped: {', '.join(missing)} (pip install -e '.[bench]').")
    server = Server()
    ratios: dict[str, Any] = {}
    scale_rows: list[dict[str, Any]] = []
    hist: dict[str, Any] | None = None
    cold: dict[str, Any] | None = None
    try:
        if "compare" not in skip:
            print(f"comparison: {args.reps} reps x {impls}", file=sys.stderr, flush=True)
            results = compare(server, impls, args.reps, args.runs, args.concurrency)
            raw["compare"] = results
            main_table, provider_table, ratios = comparison_tables(results, args.runs)
            out += [
                "",
                f"### The task: {script.ROUNDS} streamed tool rounds + {script.CHUNKS} chunks; "
                f"{args.runs} runs, {args.concurrency} at a time; median (min–max) of {args.reps}",
                "",
                main_table,
                "",
                "### Provider layer: client CPU per agent run against the scripted server",
                "",
                provider_table,
            ]
        if "scale" not in skip:
            sizes = [1000, 10000] if args.big else [1000]
            table, scale_rows, idle = scale(server, sizes)
            raw["scale"] = {"runs": scale_rows, "idle": idle}
            out += ["", "### Scale: concurrent ketch runs in one process", "", table]
        if "history" not in skip:
            print("  history growth", file=sys.stderr, flush=True)
            table, hist = history(server)
            raw["history"] = hist
            out += ["", "### One more turn on a long transcript", "", table]
        if "cold" not in skip:
            print("  cold start", file=sys.stderr, flush=True)
            table, cold = coldstart(server, 10)
            raw["cold"] = cold
            out += ["", "### Cold start", "", table]
        if hist is not None and cold is not None and ratios:
            out += ["", "### Targets", "", targets(ratios, scale_rows, hist, cold)]
        if args.profile:
            out += [
                "",
                "### Profile of ketch's measured section",
                "",
                profile(server, args.runs, args.concurrency),
            ]
    finally:
        server.stop()
    print("\n".join(out))
    if args.json:
        Path(args.json).write_text(json.dumps(raw, indent=1))


if __name__ == "__main__":
    main()
