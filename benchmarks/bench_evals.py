"""Overhead of ketch.evals per case beyond the agent run: run_evals over N scripted cases
versus the same N agent runs in a plain loop, in CPU time of this process (steadier than
wall time on a loaded machine). Run: python benchmarks/bench_evals.py"""

from __future__ import annotations

import asyncio
import tempfile
import time
from pathlib import Path

from ketch import Agent
from ketch.evals import Case
from ketch.evals import Dataset
from ketch.evals import ExactMatch
from ketch.evals import run_evals
from ketch.testing import ScriptedModel

N = 500


def make(case: Case) -> Agent[None]:
    return Agent(ScriptedModel(["ok"]))


async def plain(ds: Dataset) -> None:
    for case in ds.cases:
        await make(case).prompt(case.input)


def main() -> None:
    ds = Dataset(name="b", cases=[Case(name=f"c{i}", input="hi", expected="ok") for i in range(N)])
    t0 = time.process_time()
    asyncio.run(plain(ds))
    base = time.process_time() - t0
    t0 = time.process_time()
    asyncio.run(run_evals(ds, make, [ExactMatch()], concurrency=1))
    evals = time.process_time() - t0
    with tempfile.TemporaryDirectory() as d:
        t0 = time.process_time()
        asyncio.run(run_evals(ds, make, [ExactMatch()], concurrency=1, results_path=Path(d) / "r.jsonl"))
        resumable = time.process_time() - t0
        t0 = time.process_time()
        asyncio.run(run_evals(ds, lambda case, where: make(case), [ExactMatch()], concurrency=1, workspace=d))
        workspaces = time.process_time() - t0
    print(f"{N} cases: plain runs {base * 1e3 / N:.3f} ms/case")
    print(f"run_evals overhead: {(evals - base) * 1e6 / N:.1f} us/case")
    print(f"run_evals + results file overhead: {(resumable - base) * 1e6 / N:.1f} us/case")
    print(f"run_evals + a workspace directory per case: {(workspaces - base) * 1e6 / N:.1f} us/case")


if __name__ == "__main__":
    main()
