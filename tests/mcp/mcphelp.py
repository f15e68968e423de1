"""Helpers for the MCP tests (a module of its own: tests import it by a unique name)."""

from __future__ import annotations

import os
from pathlib import Path


def child_processes() -> dict[int, str]:
    """This process's live children (zombies excluded): pid -> command line."""
    me = os.getpid()
    found: dict[int, str] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        if int(fields[1]) == me and fields[0] != "Z":
            found[int(entry.name)] = cmdline
    return found


def server_pids(marker: str) -> list[int]:
    """The pids of this process's children whose command line contains ``marker``."""
    return sorted(pid for pid, cmd in child_processes().items() if marker in cmd)
