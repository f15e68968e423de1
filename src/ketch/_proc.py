"""Process groups, shared by the tools (bash, grep, find), the command hooks and the task
registry: each program a tool or hook starts leads a group of its own, so that it and
everything it starts can be signalled at once, and every such group is tracked until it
is empty, so that :func:`kill_process_groups` ends what is left when the program exits.
It imports nothing of ketch."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
from typing import Any

_LIVE_GROUPS: set[int] = set()


def signal_group(pgid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    """Send ``sig`` (default SIGKILL) to process group ``pgid``; a group that is gone, or
    not ours to signal, is left alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def group_alive(pgid: int) -> bool:
    """Whether a process of group ``pgid`` is still running (zombies do not count)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    if not sys.platform.startswith("linux"):
        return True
    stats = _proc_stats()
    if stats is None:
        return True
    group = str(pgid).encode()
    return any(fields[2] == group and fields[0] not in (b"Z", b"X") for _, fields in stats)


def _proc_stats() -> list[tuple[str, list[bytes]]] | None:
    """Each process's pid and the fields of ``/proc/PID/stat`` after its name (state,
    parent, group, …); None when ``/proc`` cannot be read."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return None
    found: list[tuple[str, list[bytes]]] = []
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) > 2:
            found.append((entry, fields))
    return found


def track_process_group(pgid: int) -> None:
    """Remember the process group ``pgid`` (a child started in a new session) so that
    :func:`kill_process_groups` ends it when the program exits. Groups already gone are
    forgotten on the way."""
    for old in list(_LIVE_GROUPS):
        try:
            os.killpg(old, 0)
        except ProcessLookupError:
            _LIVE_GROUPS.discard(old)
        except PermissionError:
            pass
    _LIVE_GROUPS.add(pgid)


def untrack_process_group(pgid: int, *, unless_alive: bool = False) -> None:
    """Forget the process group ``pgid`` (its processes have ended). With ``unless_alive``
    a group that still has a running process (a background child of the finished leader)
    stays tracked, so the program's exit still ends it."""
    if not (unless_alive and group_alive(pgid)):
        _LIVE_GROUPS.discard(pgid)


def live_process_groups() -> frozenset[int]:
    """The tracked process groups (see :func:`track_process_group`)."""
    return frozenset(_LIVE_GROUPS)


def child_groups() -> set[int]:
    """Process groups led by direct children of this process (Linux; else empty)."""
    me = str(os.getpid()).encode()
    return {int(pid) for pid, fields in _proc_stats() or () if fields[1] == me and fields[2] == pid.encode()}


def kill_group_if_alive(pgid: int) -> None:
    """SIGKILL process group ``pgid`` when a process of it still runs (a timer's action)."""
    if group_alive(pgid):
        signal_group(pgid, signal.SIGKILL)


def kill_process_groups(grace: float = 1.0, *, children: bool = False) -> None:
    """End every tracked process group: SIGTERM, then SIGKILL for whatever is still alive
    after ``grace`` seconds. Synchronous and safe to call on any way out of a program
    (the command line calls it before it exits, also on a second Ctrl-C or a hangup):
    the processes of tools and hooks run in sessions of their own, so nothing else would
    stop them.

    ``children`` also ends the groups led by direct children of this process (on Linux),
    which covers a process started but not yet tracked; only a program that owns all its
    children (the ``ketch`` command) should ask for that.
    """
    groups = {g for g in _LIVE_GROUPS if group_alive(g)}
    _LIVE_GROUPS.clear()
    if children:
        groups |= child_groups()
    if not groups:
        return
    for pgid in groups:
        signal_group(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while groups and time.monotonic() < deadline:
        time.sleep(0.01)
        groups = {g for g in groups if group_alive(g)}
    for pgid in groups:
        signal_group(pgid, signal.SIGKILL)


async def stop_group(proc: asyncio.subprocess.Process) -> None:
    """Kill ``proc``'s process group and reap it, reading its pipes to their end so the
    transport closes (bounded: a process that left the group may hold a pipe open)."""
    signal_group(proc.pid)
    try:
        async with asyncio.timeout(5.0):
            await proc.communicate()
    except (TimeoutError, OSError, ValueError):
        transport = getattr(proc, "_transport", None)
        if transport is not None:
            transport.close()
    untrack_process_group(proc.pid)


async def spawn_group(*argv: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """``asyncio.create_subprocess_exec(*argv, **kwargs)`` in a new session, the leader of
    its own process group, which is tracked (:func:`track_process_group`) until the caller
    forgets it. A cancellation that arrives while the process is being started does not
    leave it running unseen: its group is stopped (:func:`stop_group`) first."""
    spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(*argv, start_new_session=True, **kwargs))
    try:
        proc = await asyncio.shield(spawn)
    except asyncio.CancelledError:
        try:
            started = await spawn
        except OSError:
            raise asyncio.CancelledError from None
        await stop_group(started)
        raise
    track_process_group(proc.pid)
    return proc
