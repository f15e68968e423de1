"""Rewind that includes bash: what the checkpoints cost per bash call on a workspace of
10,000 files, what rewinding costs, and the shadow-git alternative measured on the same tree.

Run: ``python benchmarks/bench_rewind.py [--files N]`` (prints a Markdown table and the
machine's load). Each bash command runs in the sandbox (bubblewrap) when there is one.
Times are medians of ``--runs`` calls (the first, cold snapshot is one call); the blobs go
to a real JSONL session store in a temporary directory. Nothing here is a test.

Rows:

- ``bash alone``: one sandboxed command that appends a line to one file, no checkpoints;
- ``bash + checkpoint, first call``: the first call of a session: every file is read,
  hashed and stored once;
- ``bash + checkpoint, later call``: a later call: stat of every file, read only what changed;
- ``checkpoint of a call changing 100 files``: ``sed -i`` on 100 files;
- ``rewind``: restoring everything the calls above changed;
- ``shadow git add -A, first / later``: the alternative (a separate GIT_DIR whose work
  tree is the workspace; ``git add -A && git write-tree`` before a call), for comparison.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.sandbox import default_sandbox
from ketch.sessions import FileCheckpoints
from ketch.sessions import JsonlStore
from ketch.sessions import new_entry
from ketch.sessions import restore_files
from ketch.tools import BashTool
from ketch.tools import Workspace


def make_tree(root: Path, files: int) -> int:
    """``files`` source-like files of 200 B to 6 KB in folders of 50; returns the bytes written."""
    total = 0
    old = time.time() - 3600
    for i in range(files):
        path = root / f"pkg{i // 500}" / f"mod{(i // 50) % 10}" / f"file{i}.py"
        path.parent.mkdir(parents=True, exist_ok=True)
        data = (f"# file {i}\n" + "def f(x):\n    return x * 2\n" * (5 + (i * 37) % 200)).encode()
        path.write_bytes(data)
        os.utime(path, (old, old))  # an hour old, as in a real checkout (a file changed in the last 2 s is re-read)
        total += len(data)
    return total


async def timed(tool: BashTool, checkpoints: FileCheckpoints | None, command: str) -> float:
    ctx: ToolContext[Any] = ToolContext(call_id="c", tool_name="bash", signal=AbortSignal())
    args: dict[str, Any] = {"command": command}

    async def run(a: dict[str, Any]) -> Any:
        result = await tool.execute(a, ctx)
        assert not result.is_error, result.text
        return result

    call: Any = SimpleNamespace(tool=tool, args=args, tool_call=SimpleNamespace(id=f"c{time.perf_counter_ns()}"))
    start = time.perf_counter()
    if checkpoints is None:
        await run(args)
    else:
        await checkpoints.middleware(call, run)
    return time.perf_counter() - start


def git_snapshot(root: Path, git_dir: Path) -> float:
    env = dict(os.environ, GIT_DIR=str(git_dir), GIT_WORK_TREE=str(root))
    start = time.perf_counter()
    subprocess.run(["git", "add", "-A"], cwd=root, env=env, check=True, capture_output=True)
    subprocess.run(["git", "write-tree"], cwd=root, env=env, check=True, capture_output=True)
    return time.perf_counter() - start


def shadow_git(root: Path, git_dir: Path, target: str, runs: int) -> tuple[float, list[float]]:
    """The first snapshot, then ``runs`` snapshots each after one appended line."""
    subprocess.run(["git", "init", "-q", "--bare", str(git_dir)], check=True)
    first = git_snapshot(root, git_dir)
    later = []
    for _ in range(runs):
        with (root / target).open("a") as f:
            f.write("x\n")
        later.append(git_snapshot(root, git_dir))
    return first, later


def ms(seconds: float) -> str:
    return f"{seconds * 1000:,.1f} ms"


async def main(files: int, runs: int) -> None:
    base = Path(tempfile.mkdtemp(prefix="ketch-bench-rewind-"))
    try:
        root = base / "work"
        size = make_tree(root, files)
        sandbox = default_sandbox()
        tool = BashTool(Workspace(root), sandbox=sandbox)
        target = "pkg0/mod0/file0.py"
        alone = [await timed(tool, None, f"echo x >> {target}") for _ in range(runs)]
        store = JsonlStore(base / "sessions")
        writer = await store.create(cwd=str(root))
        records: list[dict[str, Any]] = []

        async def record(payload: dict[str, Any]) -> None:
            await writer.append(new_entry("checkpoint", payload, parent_id=None))
            records.append(payload)

        checkpoints = FileCheckpoints(root, writer, record=record)
        first = await timed(tool, checkpoints, f"echo x >> {target}")
        later = [await timed(tool, checkpoints, f"echo x >> {target}") for _ in range(runs)]
        hundred = [f"pkg1/mod{i // 50 % 10}/file{500 + i}.py" for i in range(100)]
        wide = await timed(tool, checkpoints, "sed -i 's/x \\* 2/x * 3/' " + " ".join(hundred))
        start = time.perf_counter()
        report = await restore_files(root, records, writer)
        rewind = time.perf_counter() - start
        assert not report.conflicts and not report.skipped, report
        assert len(report.restored) == 101, report
        await writer.close()
        git_first, git_later = shadow_git(root, base / "shadow.git", target, runs)
        load = os.getloadavg()
        print(f"workspace: {files:,} files, {size / 1e6:.1f} MB; sandbox: {type(sandbox).__name__ if sandbox else 'none'}; "
              f"{os.cpu_count()} cores; load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}\n")
        print("| what | time |\n|---|---|")
        print(f"| bash alone (median of {runs}) | {ms(statistics.median(alone))} |")
        print(f"| bash + checkpoint, first call | {ms(first)} |")
        print(f"| bash + checkpoint, later call (median of {runs}) | {ms(statistics.median(later))} |")
        print(f"| checkpoint overhead per later call | {ms(statistics.median(later) - statistics.median(alone))} |")
        print(f"| bash + checkpoint of a call changing 100 files | {ms(wide)} |")
        print(f"| rewind of {len(records)} checkpoints (101 files) | {ms(rewind)} |")
        print(f"| shadow git add -A + write-tree, first | {ms(git_first)} |")
        print(f"| shadow git add -A + write-tree, later (median of {runs}) | {ms(statistics.median(git_later))} |")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=15)
    options = parser.parse_args()
    asyncio.run(main(options.files, options.runs))
