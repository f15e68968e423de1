"""White-box test: imports ketch implementation modules (private) directly.

grep stays abortable and bounded in time: the Python fallback runs in a worker process
that an abort or the deadline kills, even in the middle of a catastrophic backtracking
match (which would otherwise hold the interpreter lock, freezing the event loop)."""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

import pytest

from ketch._proc import live_process_groups
from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.tools import GrepTool
from ketch.tools import Workspace
from support import running

RG = shutil.which("rg")
EVIL = "(a+)+$"


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path.resolve()
    (root / "a.txt").write_text("a" * 64 + "b\n")
    return root


def _worker_pids() -> set[int]:
    """Our children running the grep worker."""
    me = str(os.getpid()).encode()
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if fields[1] == me and b"_grep_worker.py" in cmdline and fields[0] not in (b"Z", b"X"):
            found.add(int(entry))
    return found


async def test_abort_stops_a_catastrophic_python_search(root: Path) -> None:
    signal = AbortSignal()
    grep = GrepTool(Workspace(root), ripgrep=False)
    task = asyncio.create_task(grep.execute({"pattern": EVIL}, ToolContext(call_id="c", tool_name="grep", signal=signal)))
    workers: set[int] = set()
    for _ in range(3000):  # bounded: until the worker process runs the match
        workers = _worker_pids()
        if workers or task.done():
            break
        await asyncio.sleep(0.01)
    assert workers, "the Python fallback should run in a worker process"
    assert not task.done()
    signal.abort()
    result = await task
    assert isinstance(result, ToolResult)
    assert result.is_error
    assert result.text == "The search for '(a+)+$' was aborted."
    assert not any(running(pid) for pid in workers)
    assert not workers & live_process_groups()


async def test_deadline_stops_a_catastrophic_python_search(root: Path) -> None:
    grep = GrepTool(Workspace(root), ripgrep=False, deadline=0.2)
    before = live_process_groups()
    result = await grep.execute({"pattern": EVIL}, ToolContext(call_id="c", tool_name="grep", signal=AbortSignal()))
    assert result.is_error
    assert result.text == (
        "The search for '(a+)+$' timed out after 0.2 seconds and was stopped. Use a simpler pattern "
        "(nested repetition such as (a+)+ can take forever) or a narrower path or glob."
    )
    assert _worker_pids() == set()
    assert live_process_groups() <= before


async def test_cancelling_the_call_kills_the_worker(root: Path) -> None:
    grep = GrepTool(Workspace(root), ripgrep=False)
    task = asyncio.create_task(grep.execute({"pattern": EVIL}, ToolContext(call_id="c", tool_name="grep", signal=AbortSignal())))
    workers: set[int] = set()
    for _ in range(3000):
        workers = _worker_pids()
        if workers or task.done():
            break
        await asyncio.sleep(0.01)
    assert workers
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not any(running(pid) for pid in workers)
    assert not workers & live_process_groups()


@pytest.mark.parametrize("ripgrep", [pytest.param(False, id="python"), pytest.param(RG, id="rg")])
async def test_an_aborted_signal_stops_before_searching(root: Path, ripgrep: str | bool) -> None:
    signal = AbortSignal()
    signal.abort()
    grep = GrepTool(Workspace(root), ripgrep=ripgrep)  # type: ignore[arg-type]
    result = await grep.execute({"pattern": "a"}, ToolContext(call_id="c", tool_name="grep", signal=signal))
    assert result.text == "The search for 'a' was aborted."


async def test_the_deadline_applies_to_ripgrep_too(root: Path) -> None:
    assert RG is not None, "ripgrep (rg) must be installed for the test suite"
    grep = GrepTool(Workspace(root), ripgrep=RG, deadline=0.000001)
    before = live_process_groups()
    result = await grep.execute({"pattern": "a"}, ToolContext(call_id="c", tool_name="grep", signal=AbortSignal()))
    assert result.text.startswith("The search for 'a' timed out after 1e-06 seconds and was stopped.")
    assert live_process_groups() <= before
