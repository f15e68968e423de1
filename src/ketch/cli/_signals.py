"""Signals and leaving at once: what ``ketch``, ``ketch run``, the control mode,
``ketch serve`` and ``ketch mcp serve`` share."""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import signal
import sys
from collections.abc import Callable
from collections.abc import Mapping
from typing import NoReturn


def handle_signals(handlers: Mapping[signal.Signals, Callable[[], object]]) -> Callable[[], None]:
    """Hand each signal to its handler on the running event loop, where the platform lets
    the loop handle signals. SIGHUP stays ignored when it is (``nohup``). Returns the
    function that takes the installed handlers off again."""
    loop = asyncio.get_running_loop()
    installed: list[signal.Signals] = []
    for sig, handler in handlers.items():
        if sig == signal.SIGHUP and signal.getsignal(sig) is signal.SIG_IGN:
            continue
        with contextlib.suppress(NotImplementedError, RuntimeError):  # no signals here (Windows, a thread)
            loop.add_signal_handler(sig, handler)
            installed.append(sig)

    def remove() -> None:
        for sig in installed:
            loop.remove_signal_handler(sig)

    return remove


def exit_now(code: int) -> NoReturn:
    """Leave the program at once with ``code``, after ending the tools' processes
    (a second Ctrl-C, a hangup): nothing a tool started outlives ketch."""
    from .._proc import kill_process_groups

    try:
        kill_process_groups(children=True)
    finally:
        with contextlib.suppress(Exception):
            atexit._run_exitfuncs()  # os._exit skips them: temporary files, the bash logs
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)
