"""Every way out of the ``ketch`` command ends the processes its tools started.

A scripted model asks bash to start a long-lived child that ignores SIGTERM (so only
ketch's own clean-up, not the bash tool's graceful stop, can end it in time), named with
a marker the test finds in ``/proc`` (inside the sandbox the child has a pid of its own
namespace), and to write a file once it started; unsandboxed, the shell writes ``term``
when it receives SIGTERM, which tells the test that the first Ctrl-C reached the running
tool. Then the signals are sent and the child must be gone once ketch has exited. Every
test runs twice: with bash in the OS sandbox (the default) and with the sandbox turned
off in the user's configuration.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from collections.abc import Callable
from collections.abc import Iterator
from pathlib import Path

import pytest
from clihelp import Env
from clihelp import Terminal
from clihelp import call_reply
from clihelp import lines
from clihelp import text_reply

from support import running

_MARKER = "ketch-signal-test-child"
_CHILD = (
    f"trap 'echo > term' TERM; (trap '' TERM; exec -a {_MARKER}-TOKEN sleep 1000) & echo $! > pid.tmp && mv pid.tmp pid; "
    "while kill -0 $! 2>/dev/null; do wait $!; done"
)


@pytest.fixture(params=[True, False], ids=["sandboxed", "unsandboxed"])
def sandboxed(request: pytest.FixtureRequest, env: Env) -> bool:
    """Whether bash runs in the OS sandbox; off through the user's configuration."""
    if not request.param:
        env.user_config("[sandbox]\nenabled = false\n")
    return bool(request.param)


def _marked(token: str) -> list[int]:
    """Live processes whose command line starts with this test's child marker."""
    found = []
    marker = f"{_MARKER}-{token}".encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if cmdline.split(b"\0", 1)[0] == marker and running(int(entry)):
            found.append(int(entry))
    return found


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
            if running(pid):
                os.kill(pid, signal.SIGKILL)


def _script(env: Env) -> str:
    token = env.work.parent.name
    command = _CHILD.replace("TOKEN", token)
    return env.script([call_reply(("c1", "bash", {"command": command})), text_reply("done")])


def _child_pid(env: Env, step: Callable[[], None], children: list[int]) -> int:
    pid_file = env.work / "pid"
    assert _poll(pid_file.exists, step), "the tool never started its child"
    token = env.work.parent.name
    assert _poll(lambda: len(_marked(token)) == 1, step), "the child is not running"
    (pid,) = _marked(token)
    children.append(pid)
    return pid


def _assert_gone(pid: int) -> None:
    assert _poll(lambda: not running(pid), _pause), f"the tool's child {pid} outlived ketch"


# --- headless ------------------------------------------------------------------------


def _headless(env: Env, script: str, *extra: str) -> subprocess.Popen[str]:
    return env.popen("run", "--permission-mode", "bypass", "--model", f"scripted:{script}", *extra, "go")


def _wait(proc: subprocess.Popen[str]) -> int:
    proc.communicate(timeout=60)
    return proc.returncode


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_headless_second_signal_kills_the_tool_processes(
    env: Env, children: list[int], sig: signal.Signals, sandboxed: bool
) -> None:
    proc = _headless(env, _script(env))
    try:
        pid = _child_pid(env, _pause, children)
        proc.send_signal(sig)
        if not sandboxed:  # in the sandbox the tool's shell dies with the sandbox, no trap runs
            assert _poll((env.work / "term").exists, _pause), "the first signal did not reach the tool"
        proc.send_signal(sig)
        assert _wait(proc) == 130
    finally:
        proc.kill()
        proc.communicate()
    _assert_gone(pid)


def test_headless_hangup_kills_the_tool_processes(env: Env, children: list[int], sandboxed: bool) -> None:
    proc = _headless(env, _script(env))
    try:
        pid = _child_pid(env, _pause, children)
        proc.send_signal(signal.SIGHUP)
        assert _wait(proc) == 129
    finally:
        proc.kill()
        proc.communicate()
    _assert_gone(pid)


def test_headless_under_nohup_a_hangup_is_ignored(env: Env, children: list[int]) -> None:
    # SIGHUP is ignored from the start (nohup): ketch leaves it so, and the SIGINT sent
    # after it aborts the run (130); a handled hangup would have exited with 129 first.
    proc = env.popen("run", "--permission-mode", "bypass", "--model", f"scripted:{_script(env)}", "go", nohup=True)
    try:
        pid = _child_pid(env, _pause, children)
        proc.send_signal(signal.SIGHUP)
        proc.send_signal(signal.SIGINT)
        assert _wait(proc) == 130
    finally:
        proc.kill()
        proc.communicate()
    _assert_gone(pid)


def test_headless_normal_exit_kills_processes_left_in_the_background(
    env: Env, children: list[int], sandboxed: bool
) -> None:
    token = env.work.parent.name
    command = f"(trap '' TERM; exec -a {_MARKER}-{token} sleep 1000) > /dev/null 2>&1 & echo $! > pid.tmp && mv pid.tmp pid"
    script = env.script([call_reply(("c1", "bash", {"command": command})), text_reply("started it")])
    proc = env.run("run", "--permission-mode", "bypass", "--model", f"scripted:{script}", "go")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "started it\n"
    assert (env.work / "pid").exists()
    assert _marked(token) == []


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
        if b"_grep_worker.py" in cmdline and running(int(entry)):
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
    assert not any(running(pid) for pid in workers)


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
    env: Env, terminals: list[Terminal], children: list[int], sandboxed: bool
) -> None:
    term, pid = _interactive(env, terminals, children)
    term.ctrl("c")
    if not sandboxed:  # in the sandbox the tool's shell dies with the sandbox, no trap runs
        assert _poll((env.work / "term").exists, _drain(term)), "Ctrl-C did not reach the tool"
    term.ctrl("c")
    assert term.wait_exit() == 0
    _assert_gone(pid)


def test_interactive_hangup_kills_the_tool_processes(
    env: Env, terminals: list[Terminal], children: list[int], sandboxed: bool
) -> None:
    term, pid = _interactive(env, terminals, children)
    term.child.kill(signal.SIGHUP)
    assert term.wait_exit() == 129
    _assert_gone(pid)


def test_interactive_sigterm_ends_the_session_and_the_tool_processes(
    env: Env, terminals: list[Terminal], children: list[int], sandboxed: bool
) -> None:
    term, pid = _interactive(env, terminals, children)
    term.child.kill(signal.SIGTERM)
    assert term.wait_exit() == 143
    _assert_gone(pid)


