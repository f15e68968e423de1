"""What protecting configuration at any depth costs each sandboxed bash call: median of
``true`` runs through the bash tool in a real tree (default: this repository, its
``.venv`` included), with git's and ketch's root entries only, with today's
``DEFAULT_PROTECTED`` (``**/.ketch``, ``**/AGENTS.md``, ``**/CLAUDE.md``: a walk of the
workspace each at every command), and with those expanded once as the ``ketch`` command
does (:func:`ketch.sandbox.expand_protected`); and one walk of the tree alone.

Run: ``python benchmarks/bench_protected.py [FOLDER]`` (prints a Markdown table).
Figures are medians of wall time per call on the machine it runs on; nothing here is a test.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

from ketch._paths import expand_pattern
from ketch._paths import glob_escape
from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.sandbox import DEFAULT_PROTECTED
from ketch.sandbox import default_sandbox
from ketch.sandbox import expand_protected
from ketch.sandbox import sandbox_unavailable_reason
from ketch.tools import BashTool
from ketch.tools import Workspace

RUNS = 30
WARMUP = 3
ROOT_ONLY = tuple(p for p in DEFAULT_PROTECTED if not p.startswith("**/"))


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


def _walk_ms(root: Path) -> float:
    times = []
    for _ in range(RUNS):
        start = time.perf_counter()
        expand_pattern(os.path.join(glob_escape(str(root)), "**/.ketch"))
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


async def main(root: Path) -> None:
    sandbox = default_sandbox()
    if sandbox is None:
        sys.exit(f"no sandbox: {sandbox_unavailable_reason()}")
    entries = sum(len(dirs) + len(files) for _, dirs, files in os.walk(root))
    ws = Workspace(root)
    plain = await _median_ms(BashTool(ws, sandbox=sandbox, protected=ROOT_ONLY))
    deep = await _median_ms(BashTool(ws, sandbox=sandbox, protected=DEFAULT_PROTECTED))
    start = time.perf_counter()
    expanded = expand_protected(root, DEFAULT_PROTECTED)
    expand_ms = (time.perf_counter() - start) * 1000
    once = await _median_ms(BashTool(ws, sandbox=sandbox, protected=expanded))
    walk = _walk_ms(root)
    print(f"median of {RUNS} `true` runs through the sandboxed bash tool in {root} ({entries} entries)\n")
    print("| measure | ms per call |")
    print("|---|---|")
    print(f"| root entries only | {plain:.1f} |")
    print(f"| DEFAULT_PROTECTED (3 `**` patterns) | {deep:.1f} |")
    print(f"| expanded once per session, as the command does ({len(expanded)} entries) | {once:.1f} |")
    print(f"| that expansion, once | {expand_ms:.1f} |")
    print(f"| one walk of the tree (`**/.ketch`) | {walk:.1f} |")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1]).resolve()))
