"""Process groups, shared by the tools (bash, grep, find), the command hooks and the task
registry: each program a tool or hook starts leads a group of its own, so that it and
everything it starts can be signalled at once. It imports nothing of ketch."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from typing import Any


def signal_group(pgid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    """Send ``sig`` (default SIGKILL) to process group ``pgid``; a group that is gone, or
    not ours to signal, is left alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


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


async def spawn_group(*argv: str, **kwargs: Any) -> asyncio.subprocess.Process:
    """``asyncio.create_subprocess_exec(*argv, **kwargs)`` in a new session, the leader of
    its own process group. A cancellation that arrives while the process is being started
    does not leave it running unseen: its group is stopped (:func:`stop_group`) first."""
    spawn = asyncio.ensure_future(asyncio.create_subprocess_exec(*argv, start_new_session=True, **kwargs))
    try:
        return await asyncio.shield(spawn)
    except asyncio.CancelledError:
        try:
            started = await spawn
        except OSError:
            raise asyncio.CancelledError from None
        await stop_group(started)
        raise
