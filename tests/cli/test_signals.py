"""Every way out of the ``ketch`` command ends the processes its tools started.

A scripted model asks bash to start a long-lived child that ignores SIGTERM (so only
ketch's own clean-up, not the bash tool's graceful stop, can end it in time) and to write
its pid to a file; the shell writes ``term`` when it receives SIGTERM, which tells the
test that the first Ctrl-C reached the running tool. Then the signals are sent and the
child must be gone once ketch has exited.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from clihelp import Env, Terminal, call_reply, lines, text_reply

_CHILD = (
    "trap 'echo > term' TERM; (trap '' TERM; exec sleep 1000) & echo $! > pid.tmp && mv pid.tmp pid; "
    "while kill -0 $! 2>/dev/null; do wait $!; done"
)


def _running(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper does not count)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2 :].split()[0] not in (b"Z", b"X")


def _poll(condition: Callable[[], bool], step: Callable[[], None]) -> bool:
    """Run ``step`` until ``condition()`` holds; bounded (about a minute), never a fixed wait."""
    for _ in range(6000):
        if condition():
            return True
        step()
    return condition()


def _pause() -> None:
    import time

    time.sleep(0.01)


@pytest.fixture
def children() -> Iterator[list[int]]:
    """Pids of the tool children; any still alive after the test is killed."""
    pids: list[int] = []
    try:
        yield pids
    finally:
        for pid in pids:
            if _running(pid):
                os.kill(pid, signal.SIGKILL)


def _script(env: Env) -> str:
    return env.script([call_reply(("c1", "bash", {"command": _CHILD})), text_reply("done")])


def _child_pid(env: Env, step: Callable[[], None], children: list[int]) -> int:
    pid_file = env.work / "pid"
    assert _poll(pid_file.exists, step), "the tool never started its child"
    pid = int(pid_file.read_text())
    children.append(pid)
    assert _running(pid)
    return pid


def _assert_gone(pid: int) -> None:
    assert _poll(lambda: not _running(pid), _pause), f"the tool's child {pid} outlived ketch"


# --- headless ------------------------------------------------------------------------


def _headless(env: Env, script: str, *extra: str) -> subprocess.Popen[str]:
    return env.popen("run", "--permission-mode", "bypass", "--model", f"scripted:{script}", *extra, "go")


def _wait(proc: subprocess.Popen[str]) -> int:
    proc.communicate(timeout=60)
    return proc.returncode


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_headless_second_signal_kills_the_tool_processes(env: Env, children: list[int], sig: signal.Signals) -> None:
    proc = _headless(env, _script(env))
    try:
        pid = _child_pid(env, _pause, children)
        proc.send_signal(sig)
        assert _poll((env.work / "term").exists, _pause), "the first signal did not reach the tool"
        proc.send_signal(sig)
        assert _wait(proc) == 130
    finally:
        proc.kill()
        proc.communicate()
    _assert_gone(pid)


def test_headless_hangup_kills_the_tool_processes(env: Env, children: list[int]) -> None:
    proc = _headless(env, _script(env))
    try:
        pid = _child_pid(env, _pause, children)
        proc.send_signal(signal.SIGHUP)
        assert _wait(proc) == 129
    finally:
        proc.kill()
        proc.communicate()
    _assert_gone(pid)


def test_headless_normal_exit_kills_processes_left_in_the_background(env: Env, children: list[int]) -> None:
    command = "(trap '' TERM; exec sleep 1000) > /dev/null 2>&1 & echo $! > pid.tmp && mv pid.tmp pid"
    script = env.script([call_reply(("c1", "bash", {"command": command})), text_reply("started it")])
    proc = env.run("run", "--permission-mode", "bypass", "--model", f"scripted:{script}", "go")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "started it\n"
    pid = int((env.work / "pid").read_text())
    children.append(pid)
    _assert_gone(pid)


def _grep_workers() -> set[int]:
    """Live processes running grep's Python worker (children of a ketch started here)."""
    found = set()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"_grep_worker.py" in cmdline and _running(int(entry)):
            found.add(int(entry))
    return found


def test_headless_sigint_stops_a_catastrophic_grep_in_the_python_fallback(env: Env, tmp_path: Path) -> None:
    (env.work / "a.txt").write_text("a" * 64 + "b\n")
    no_rg = tmp_path / "bin-without-rg"
    no_rg.mkdir()
    script = env.script([call_reply(("c1", "grep", {"pattern": "(a+)+$"})), text_reply("done")])
    before = _grep_workers()
    proc = env.popen("run", "-o", "stream-json", "--model", f"scripted:{script}", "go", extra={"PATH": str(no_rg)})
    try:
        assert _poll(lambda: bool(_grep_workers() - before), _pause), "the Python fallback never started"
        workers = _grep_workers() - before
        proc.send_signal(signal.SIGINT)
        stdout, _ = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.communicate()
    assert proc.returncode == 130
    end = next(e for e in lines(stdout) if e["type"] == "tool_execution_end")
    assert end["is_error"] is True
    assert end["result"]["content"] == [{"type": "text", "text": "Tool execution was aborted."}]
    assert not any(_running(pid) for pid in workers)


# --- interactive ---------------------------------------------------------------------


def _drain(term: Terminal) -> Callable[[], None]:
    """A poll step that reads the terminal (answering cursor-position requests)."""
    import pexpect

    def step() -> None:
        try:
            data = term.child.read_nonblocking(65536, timeout=0.01)
        except pexpect.TIMEOUT:
            return
        except pexpect.EOF:
            _pause()
            return
        term.seen += data
        for _ in re.finditer(re.escape(Terminal.CPR), data):
            term.child.send("\x1b[20;1R")

    return step


def _interactive(env: Env, terminals: list[Terminal], children: list[int]) -> tuple[Terminal, int]:
    term = Terminal(env, "--permission-mode", "bypass", "--model", f"scripted:{_script(env)}")
    terminals.append(term)
    term.expect("›")
    term.sendline("start the child")
    return term, _child_pid(env, _drain(term), children)


def test_interactive_ctrl_c_twice_kills_the_tool_processes(
    env: Env, terminals: list[Terminal], children: list[int]
) -> None:
    term, pid = _interactive(env, terminals, children)
    term.ctrl("c")
    assert _poll((env.work / "term").exists, _drain(term)), "Ctrl-C did not reach the tool"
    term.ctrl("c")
    assert term.wait_exit() == 0
    _assert_gone(pid)


def test_interactive_hangup_kills_the_tool_processes(env: Env, terminals: list[Terminal], children: list[int]) -> None:
    term, pid = _interactive(env, terminals, children)
    term.child.kill(signal.SIGHUP)
    assert term.wait_exit() == 129
    _assert_gone(pid)


def test_interactive_sigterm_ends_the_session_and_the_tool_processes(
    env: Env, terminals: list[Terminal], children: list[int]
) -> None:
    term, pid = _interactive(env, terminals, children)
    term.child.kill(signal.SIGTERM)
    assert term.wait_exit() == 143
    _assert_gone(pid)


