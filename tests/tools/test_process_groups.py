"""White-box test: imports ketch implementation modules (private) directly.

The registry of the tools' live process groups: what the ``ketch`` command ends on exit."""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

from ketch._proc import kill_process_groups
from ketch._proc import live_process_groups
from ketch._proc import spawn_group
from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.tools import Workspace
from ketch.tools._bash import BashTool
from support import running


async def _bash(root: Path, command: str) -> None:
    result = await BashTool(Workspace(root)).execute(
        {"command": command}, ToolContext(call_id="c", tool_name="bash", signal=AbortSignal())
    )
    assert not result.is_error, result.text


async def test_a_finished_command_leaves_no_group_behind(tmp_path: Path) -> None:
    before = live_process_groups()
    await _bash(tmp_path, "echo $$ > shell")
    shell = int((tmp_path / "shell").read_text())
    assert shell not in live_process_groups()
    assert live_process_groups() <= before


async def test_background_processes_stay_tracked_until_killed(tmp_path: Path) -> None:
    await _bash(tmp_path, "echo $$ > shell; (trap '' TERM; exec sleep 1000) > /dev/null 2>&1 & echo $! > pid")
    shell = int((tmp_path / "shell").read_text())
    pid = int((tmp_path / "pid").read_text())
    try:
        assert running(pid)
        assert shell in live_process_groups()  # the group is named after the shell
        kill_process_groups(grace=0.05)  # SIGTERM is ignored: SIGKILL ends it
        for _ in range(3000):  # bounded: until the kernel has removed it
            if not running(pid):
                break
            await asyncio.sleep(0.01)
        assert not running(pid)
        assert live_process_groups() == frozenset()
    finally:
        if running(pid):
            os.kill(pid, signal.SIGKILL)


def test_children_also_ends_groups_led_by_untracked_children() -> None:
    import subprocess

    child = subprocess.Popen(["sleep", "1000"], start_new_session=True, stdin=subprocess.DEVNULL)
    try:
        assert child.pid not in live_process_groups()
        kill_process_groups(grace=0.05)
        assert child.poll() is None  # not tracked: left alone
        kill_process_groups(grace=0.05, children=True)
        assert child.wait(timeout=60) == -signal.SIGTERM
    finally:
        child.kill()
        child.wait()


def _with_token(token: str) -> list[int]:
    """Live processes whose command line contains ``token``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and running(int(entry)):
            try:
                with open(f"/proc/{entry}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        found.append(int(entry))
            except OSError:
                pass
    return found


async def test_a_cancellation_while_the_process_starts_leaves_nothing_running(tmp_path: Path) -> None:
    token = f"ketch-start-race-{os.getpid()}-{tmp_path.name}"
    task = asyncio.create_task(spawn_group("/bin/sh", "-c", f"exec -a {token} sleep 1000"))
    await asyncio.sleep(0)  # the process is spawned; its start is still being awaited
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass
    else:
        raise AssertionError("the start was not cancelled")
    assert _with_token(token) == []
