"""Process-group signalling shared by the tools (bash, grep, find), the command hooks and
the task registry. It imports nothing of ketch."""

from __future__ import annotations

import contextlib
import os
import signal


def signal_group(pgid: int, sig: signal.Signals = signal.SIGKILL) -> None:
    """Send ``sig`` (default SIGKILL) to process group ``pgid``; a group that is gone, or
    not ours to signal, is left alone."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
