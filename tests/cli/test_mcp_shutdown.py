"""Shutdown with a stdio MCP server that ignores cancellation: after SIGINT the command
ends the server (SIGTERM at once, SIGKILL after a grace) instead of waiting for it."""

from __future__ import annotations

import json
import signal
import sys
import threading
from pathlib import Path

from clihelp import Env
from clihelp import call_reply

STUBBORN = Path(__file__).resolve().parents[1] / "mcp" / "stubborn_server.py"


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (no process, or a zombie not reaped yet)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(b")") + 2 :].split()[0] in (b"Z", b"X")


def test_sigint_ends_a_server_that_ignores_cancellation_at_once(env: Env) -> None:
    log = env.home / "server.log"
    added = env.run("mcp", "add", "stubborn", "--", sys.executable, str(STUBBORN), str(log))
    assert added.returncode == 0, added.stderr
    script = env.script([call_reply(("c1", "mcp__stubborn__slow", {})), "never reached"])
    proc = env.popen("run", "--model", f"scripted:{script}", "--permission-mode", "bypass", "-o", "stream-json", "--no-session", "go")
    guard = threading.Timer(60, proc.kill)  # a hang fails the test instead of blocking it
    guard.start()
    try:
        assert proc.stdout is not None
        # the server reports progress once the call reached it: then interrupt the run
        for line in proc.stdout:
            if json.loads(line)["type"] == "tool_execution_update":
                break
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate()
    finally:
        guard.cancel()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    result = json.loads(out.splitlines()[-1])
    assert (result["type"], result["end_reason"]) == ("result", "aborted")
    events = log.read_text().splitlines()
    start, *rest = events
    # the server was told to cancel the call (when that notice arrives is up to the pipes)
    assert rest.count("cancelled") == 1
    # the busy server got SIGTERM before its stdin closed (before: stdin closed first, and
    # SIGTERM only came after the SDK's 2-second wait); it ignored both, so SIGKILL ended it
    assert [e for e in rest if e != "cancelled"] == ["called", "SIGTERM", "EOF"]
    assert _gone(int(start.split()[1]))
