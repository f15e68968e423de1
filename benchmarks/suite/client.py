"""The measuring harness one client process runs for one implementation.

Run: ``python -m suite.client <impl> --url URL [--runs 200] [--concurrency 10]``
(from ``benchmarks/``). It imports and sets up the implementation, does the warm-up
run(s), then measures ``--runs`` runs with ``--concurrency`` in flight at a time and
prints one JSON object: client CPU (user and system, from ``getrusage(RUSAGE_SELF)``
around the measured section only), wall time, peak RSS, and the result checks. Every
run's final text must equal the scripted text (which names the tool results the server
received) and every run must have seen exactly ``ROUNDS`` tool calls.

``--profile cprofile|pyinstrument --profile-out PATH`` profiles the measured section.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import resource
import sys
import time
from typing import Any

from . import script
from .impls import SETUPS
from .script import CALLS


def _cpu() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime, usage.ru_stime


async def measure(
    impl: str, url: str, runs: int, concurrency: int, warmup: int, profile: str | None
) -> dict[str, Any]:
    """Set up ``impl``, warm up, run the measured section; the figures as a dict."""
    t0 = time.perf_counter()
    run_once, close = await SETUPS[impl](url)
    setup_s = time.perf_counter() - t0
    expected = script.expected_text()
    failures: list[str] = []

    def check(text: str, calls: int) -> None:
        if text != expected or calls != script.ROUNDS:
            failures.append(f"calls={calls} text={text[:60]!r}...({len(text)} chars)")

    for _ in range(warmup):
        check(*(await run_once()))
    gc.collect()

    remaining = runs
    errors: list[str] = []

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            try:
                check(*(await run_once()))
            except Exception as exc:
                errors.append(f"{type(exc).__name__}: {exc}")

    profiler: Any = None
    if profile == "cprofile":
        import cProfile

        profiler = cProfile.Profile()
        profiler.enable()
    elif profile == "pyinstrument":
        from pyinstrument import Profiler

        profiler = Profiler(interval=0.0005, async_mode="disabled")
        profiler.start()
    u0, s0 = _cpu()
    w0 = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    wall = time.perf_counter() - w0
    u1, s1 = _cpu()
    if profile == "cprofile":
        profiler.disable()
    elif profile == "pyinstrument":
        profiler.stop()
    await close()
    expected_calls = script.ROUNDS * (runs + warmup)
    if CALLS["add"] != expected_calls and not errors:
        failures.append(f"add() ran {CALLS['add']} times, expected {expected_calls}")
    return {
        "impl": impl,
        "runs": runs,
        "concurrency": concurrency,
        "setup_s": setup_s,
        "cpu_user": u1 - u0,
        "cpu_sys": s1 - s0,
        "cpu": (u1 - u0) + (s1 - s0),
        "wall": wall,
        "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
        "errors": len(errors),
        "first_error": errors[0] if errors else None,
        "failed_checks": len(failures),
        "first_failure": failures[0] if failures else None,
        "_profiler": profiler,
    }


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser()
    parser.add_argument("impl", choices=sorted(SETUPS))
    parser.add_argument("--url", required=True)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--profile", choices=["cprofile", "pyinstrument"])
    parser.add_argument("--profile-out")
    args = parser.parse_args()
    out = asyncio.run(measure(args.impl, args.url, args.runs, args.concurrency, args.warmup, args.profile))
    profiler = out.pop("_profiler")
    if profiler is not None and args.profile_out:
        if args.profile == "cprofile":
            profiler.dump_stats(args.profile_out)
        else:
            with open(args.profile_out, "w") as f:
                f.write(profiler.output_text(unicode=False, color=False, show_all=False))
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
