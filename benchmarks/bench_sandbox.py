"""The sandbox's overhead per bash call: median of 50 ``true`` runs through the bash tool
with and without the bubblewrap sandbox (write mode and plan mode).

Run: ``python benchmarks/bench_sandbox.py`` (prints a Markdown table). Figures are
medians of wall time per call on the machine it runs on; nothing here is a test.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.sandbox import default_sandbox
from ketch.sandbox import sandbox_unavailable_reason
from ketch.tools import BashTool
from ketch.tools import Workspace

RUNS = 50
WARMUP = 3


async def _median_ms(tool: BashTool) -> float:
    ctx = ToolContext(call_id="c", tool_name="bash", signal=AbortSignal())
    times = []
    for i in range(WARMUP + RUNS):
        start = time.perf_counter()
        result = await tool.execute({"command": "true"}, ctx)
        elapsed = time.perf_counter() - start
        if result.is_error:
            raise RuntimeError(f"`true` failed: {result.text}")
        if i >= WARMUP:
            times.append(elapsed)
    return statistics.median(times) * 1000


async def main() -> None:
    sandbox = default_sandbox()
    if sandbox is None:
        sys.exit(f"no sandbox: {sandbox_unavailable_reason()}")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / ".git" / "hooks").mkdir(parents=True)
        (root / ".git" / "config").write_text("[core]\n")
        ws = Workspace(root)
        plain = await _median_ms(BashTool(ws))
        write = await _median_ms(BashTool(ws, sandbox=sandbox))
        plan = await _median_ms(BashTool(ws, sandbox=sandbox, write_allowed=lambda: False))
    print(f"median of {RUNS} `true` runs through the bash tool\n")
    print("| measure | ms per call |")
    print("|---|---|")
    print(f"| without sandbox | {plain:.2f} |")
    print(f"| bubblewrap, write mode | {write:.2f} |")
    print(f"| bubblewrap, plan mode | {plan:.2f} |")
    print(f"| overhead (write mode) | {write - plain:.2f} |")


if __name__ == "__main__":
    asyncio.run(main())
