"""Streaming a large tool call: a scripted ``write`` of 10 KB, 100 KB and 1 MB whose
arguments arrive in 8-character fragments (what a provider sends: a few tokens each).

Two figures per size:

- **CPU** of the run in process: ``Agent.prompt`` with a :class:`ketch.testing.ScriptedModel`
  and the built-in ``write`` tool in a temporary directory (``time.process_time`` around
  the run; the median of 3 runs, 1 for the slow ones);
- **bytes** that ``ketch run -o stream-json`` writes for the same script (counted as they
  are read from its stdout; a run past :data:`BYTE_CAP` is stopped and shown as ``>``).

Run: ``python benchmarks/bench_streaming.py`` prints the figures of this checkout and,
side by side, those of another checkout's interpreter (``--before PYTHON``; default
``/work/main/.venv/bin/python`` when it exists): the same script measured against that
interpreter's ``ketch``. ``--sizes 10000,100000`` picks the sizes. Nothing here is a test.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZES = (10_000, 100_000, 1_000_000)
CHUNK = 8
BYTE_CAP = 2_000_000_000
"""A stream-json run that writes more than this is stopped (the quadratic output of old
versions: about 60 GB for 1 MB)."""
CPU_SLOW = 2.0
"""A size whose first run took more CPU seconds than this is run once only."""
DEFAULT_BEFORE = "/work/main/.venv/bin/python"


def file_text(size: int) -> str:
    """``size`` characters of source-like text (quotes, backslashes and newlines that JSON
    escapes, as in real files)."""
    lines = []
    total = 0
    i = 0
    while total < size:
        line = f'    value_{i} = compute("item {i}", path="C:\\\\data\\\\{i % 97}", scale={i % 7})  # step {i}\n'
        lines.append(line)
        total += len(line)
        i += 1
    return "".join(lines)[:size]


def script(size: int) -> list[Any]:
    """The scripted replies: one ``write`` call of ``size`` characters, then a short answer."""
    call = {"type": "tool_call", "id": "w1", "name": "write", "args": {"path": "big.py", "content": file_text(size)}}
    return [{"blocks": [call], "chunk_size": CHUNK}, "Done."]


# -- one measurement, in the interpreter under test ----------------------------------------------
async def _run_once(size: int, root: str) -> tuple[float, str]:
    """The CPU seconds of one run writing the file into ``root``, and its answer."""
    import msgspec

    from ketch import Agent
    from ketch.testing import Reply
    from ketch.testing import ScriptedModel
    from ketch.tools import Workspace
    from ketch.tools import WriteTool

    replies = msgspec.convert(script(size), list[str | Reply])
    agent = Agent(model=ScriptedModel(replies), tools=[WriteTool(Workspace(root))])
    start = time.process_time()
    result = await agent.prompt("write the file")
    return time.process_time() - start, result.text


def _cpu_once(size: int) -> float:
    with tempfile.TemporaryDirectory() as root:
        cpu, answer = asyncio.run(_run_once(size, root))
        written = Path(root, "big.py").stat().st_size
    if answer != "Done." or written != size:
        raise SystemExit(f"the run went wrong: {answer!r}, {written} bytes written")
    return cpu


def measure_cpu(size: int) -> float:
    first = _cpu_once(size)
    if first > CPU_SLOW:
        return first
    return statistics.median([first, *(_cpu_once(size) for _ in range(2))])


def measure_bytes(size: int, python: str) -> tuple[int, bool]:
    """The bytes ``ketch run -o stream-json`` writes, and whether the cap stopped it."""
    with tempfile.TemporaryDirectory() as root:
        path = Path(root, "script.json")
        path.write_text(json.dumps(script(size)))
        work = Path(root, "work")
        work.mkdir()
        env = {**os.environ, "KETCH_TEST_SCRIPT": str(path), "HOME": root, "XDG_CONFIG_HOME": root}
        command = [python, "-m", "ketch", "run", "--no-session", "--permission-mode", "bypass"]
        command += ["--no-compaction", "-o", "stream-json", "-C", str(work), "write the file"]
        proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env)
        assert proc.stdout is not None
        total = 0
        capped = False
        while chunk := proc.stdout.read(1 << 20):
            total += len(chunk)
            if total > BYTE_CAP:
                capped = True
                proc.kill()
                break
        proc.wait()
        if not capped and proc.returncode != 0:
            raise SystemExit(f"ketch run failed ({proc.returncode}) for {size}")
    return total, capped


def measure(sizes: list[int]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for size in sizes:
        cpu = measure_cpu(size)
        wrote, capped = measure_bytes(size, sys.executable)
        out[str(size)] = {"cpu": cpu, "bytes": wrote, "capped": capped}
    return out


# -- the side-by-side table -----------------------------------------------------------------------
def _run(python: str, sizes: list[int]) -> dict[str, Any]:
    proc = subprocess.run(
        [python, __file__, "--measure", ",".join(map(str, sizes))], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        raise SystemExit(f"{python} failed:\n{proc.stderr}")
    return json.loads(proc.stdout.splitlines()[-1])


def _size(n: int) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1_000_000 else f"{n / 1e3:.0f} KB"


def _bytes(entry: dict[str, Any]) -> str:
    shown = f"{entry['bytes'] / 1e6:,.2f} MB"
    return ">" + shown if entry["capped"] else shown


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", default=DEFAULT_BEFORE if os.path.exists(DEFAULT_BEFORE) else None)
    parser.add_argument("--sizes", default=",".join(map(str, SIZES)))
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        print(json.dumps(measure([int(s) for s in args.measure.split(",")])))
        return
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.perf_counter()
    after = _run(sys.executable, sizes)
    before = _run(args.before, sizes) if args.before else None
    print(f"Tool-call streaming: a scripted write in {CHUNK}-character fragments (python {sys.version.split()[0]})\n")
    head = "| call | CPU after | stream-json after |"
    rule = "|---|---:|---:|"
    if before is not None:
        head += " CPU before | stream-json before |"
        rule += "---:|---:|"
    print(head)
    print(rule)
    for size in sizes:
        a = after[str(size)]
        row = f"| {_size(size)} | {a['cpu'] * 1000:,.0f} ms | {_bytes(a)} |"
        if before is not None:
            b = before[str(size)]
            row += f" {b['cpu'] * 1000:,.0f} ms | {_bytes(b)} |"
        print(row)
    big, small = str(max(sizes)), str(sorted(sizes)[-2]) if len(sizes) > 1 else None
    if small is not None:
        ratio = after[big]["cpu"] / after[small]["cpu"]
        print(f"\nCPU of the {_size(int(big))} call / the {_size(int(small))} call (after): {ratio:.1f}x")
    if before is not None:
        print(f"before: {args.before}")
    print(f"({time.perf_counter() - started:.0f} s in all)")


if __name__ == "__main__":
    main()
