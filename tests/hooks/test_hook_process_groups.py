"""White-box test: reads ketch._proc's registry of live process groups directly.

A shell hook's process group is tracked like a tool's: forgotten once it is empty, kept
while something the hook left behind still runs, so that the program's exit ends it."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

from hookkit import runner
from hookkit import write_script
from test_hook_robustness import agent_with
from test_hook_robustness import gone_soon

from ketch._proc import kill_process_groups
from ketch._proc import live_process_groups
from ketch.hooks import HookNotice
from support import running

# The group of the script's shell: field 5 of /proc/$$/stat (the name has no spaces).
_GROUP = "read -r _ _ _ _ group _ < /proc/$$/stat\n"


async def _run_hook(tmp_path: Path, body: str) -> int:
    """Run a prompt with ``body`` as its PreToolUse shell hook; the hook's process group."""
    notices: list[HookNotice] = []
    hooks = runner(tmp_path, notices)
    hooks.add("PreToolUse", write_script(tmp_path, "hook.sh", f"{_GROUP}echo $group > {tmp_path / 'group'}\n{body}"))
    calls: list[dict[str, Any]] = []
    agent, _ = agent_with(hooks, calls)
    result = await agent.prompt("list")
    assert (notices, calls, result.end_reason) == ([], [{"command": "ls"}], "stop")
    return int((tmp_path / "group").read_text())


async def test_a_finished_hook_leaves_no_group_behind(tmp_path: Path) -> None:
    group = await _run_hook(tmp_path, "exit 0\n")
    assert group not in live_process_groups()


async def test_what_a_hook_leaves_running_is_ended_on_exit(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    group = await _run_hook(tmp_path, f"(trap '' TERM; exec sleep 1000) > /dev/null 2>&1 &\necho $! > {pid_file}\n")
    pid = int(pid_file.read_text())
    try:
        assert running(pid)
        assert group in live_process_groups()  # the hook is done; its child still runs
        kill_process_groups(grace=0.05)  # SIGTERM is ignored: SIGKILL ends it
        assert gone_soon(pid)
        assert group not in live_process_groups()
    finally:
        if running(pid):
            os.kill(pid, signal.SIGKILL)
