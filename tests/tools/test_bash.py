"""White-box test: imports ketch implementation modules (private) directly.

The bash tool: output and exit codes, working directory, truncation with a log file,
progress, timeouts and cancellation killing the whole process group, environment
scrubbing, and the read-only command classifier."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.tools import ReadTool
from ketch.tools import Workspace
from ketch.tools._bash import BashTool
from ketch.tools._bash import is_read_only_command
from ketch.tools._bash import scrub_environment
from support import running

needs_proc = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="checks processes through /proc")


def _read_text(path: str) -> str:
    with open(path) as f:
        return f.read()


pytestmark = pytest.mark.usefixtures("scratch_in_tmp_path")


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    return root.resolve()


@pytest.fixture
def workspace(root: Path) -> Workspace:
    return Workspace(root)


@pytest.fixture
def bash(workspace: Workspace) -> BashTool:
    return BashTool(workspace, kill_grace=0.5)


async def _run(
    tool: BashTool,
    signal: AbortSignal | None = None,
    report: Callable[[Any], Any] | None = None,
    **args: Any,
) -> ToolResult:
    ctx = ToolContext(call_id="c", tool_name="bash", signal=signal or AbortSignal(), report=report)
    return await tool.execute(args, ctx)


async def test_output_and_success(bash: BashTool, root: Path) -> None:
    result = await _run(bash, command="echo hello; echo world")
    assert not result.is_error
    assert result.text == "hello\nworld"
    assert result.details == {
        "command": "echo hello; echo world",
        "cwd": str(root),
        "exit_code": 0,
        "timed_out": False,
        "aborted": False,
        "truncated": False,
        "total_lines": 2,
        "total_bytes": 12,
        "output_file": None,
    }


async def test_stdout_and_stderr_are_interleaved(bash: BashTool) -> None:
    result = await _run(bash, command="echo a; echo b >&2; echo c")
    assert result.text == "a\nb\nc"


async def test_non_zero_exit_is_an_error_with_the_output(bash: BashTool) -> None:
    result = await _run(bash, command="echo oops; exit 3")
    assert result.is_error
    assert result.text == "oops\n\n[Command exited with code 3.]"
    assert result.details["exit_code"] == 3


async def test_no_output(bash: BashTool) -> None:
    assert (await _run(bash, command="true")).text == "(no output)"
    failed = await _run(bash, command="false")
    assert failed.is_error
    assert failed.text == "(no output)\n\n[Command exited with code 1.]"


async def test_death_by_signal_is_reported(bash: BashTool) -> None:
    result = await _run(bash, command="kill -KILL $$")
    assert result.is_error
    assert result.text == "(no output)\n\n[Command was killed by SIGKILL.]"
    assert result.details["exit_code"] == -9


async def test_stdin_is_closed(bash: BashTool) -> None:
    result = await _run(bash, command="cat; echo done")
    assert result.text == "done"


async def test_runs_in_the_root_or_a_confined_cwd(bash: BashTool, root: Path) -> None:
    (root / "sub").mkdir()
    assert (await _run(bash, command="pwd")).text == str(root)
    assert (await _run(bash, command="pwd", cwd="sub")).text == str(root / "sub")
    missing = await _run(bash, command="pwd", cwd="nope")
    assert missing.is_error
    assert missing.text == "Working directory nope does not exist."
    (root / "file.txt").write_text("x")
    not_dir = await _run(bash, command="pwd", cwd="file.txt")
    assert not_dir.text == "Working directory file.txt is not a directory."


async def test_invalid_arguments(bash: BashTool) -> None:
    assert (await _run(bash, command="  ")).text == "command is empty. Give a shell command to run."
    assert (await _run(bash, command="ls", timeout=0)).text == "timeout must be a positive number of seconds, got 0."


async def test_falls_back_to_sh_without_bash(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "")
    tool = BashTool(workspace)
    assert tool.shell == "/bin/sh"
    assert (await _run(tool, command="echo $0")).text == "/bin/sh"


async def test_long_output_keeps_the_tail_and_saves_everything(bash: BashTool, workspace: Workspace) -> None:
    result = await _run(bash, command="seq 1 5400")
    assert not result.is_error
    log = result.details["output_file"]
    assert log is not None
    expected_tail = "\n".join(str(i) for i in range(3401, 5401))
    assert result.text == (
        f"{expected_tail}\n\n[Output truncated: showing lines 3401-5400 of 5400. Full output saved to {log}]"
    )
    assert _read_text(log) == "".join(f"{i}\n" for i in range(1, 5401))
    assert result.details["truncated"] is True
    assert result.details["total_lines"] == 5400
    read = await ReadTool(workspace).execute(
        {"path": log, "offset": 5400}, ToolContext(call_id="r", tool_name="read", signal=AbortSignal())
    )
    assert read.text == "  5400\t5400"


async def test_output_over_50_kb_keeps_whole_lines_that_fit(bash: BashTool) -> None:
    # 1000 lines of 100 characters: the last 506 lines (101 bytes each) fit in 50 KB.
    result = await _run(bash, command="for i in $(seq 1 1000); do printf '%0100d\\n' $i; done")
    shown, note = result.text.split("\n\n")
    lines = shown.split("\n")
    assert len(lines) == 506
    assert lines[0] == f"{495:0100d}"
    assert lines[-1] == f"{1000:0100d}"
    assert note == f"[Output truncated: showing lines 495-1000 of 1000. Full output saved to {result.details['output_file']}]"


async def test_a_single_huge_line_is_cut_to_its_last_50_kb(bash: BashTool) -> None:
    result = await _run(bash, command="head -c 60000 /dev/zero | tr '\\0' x; echo END")
    shown, note = result.text.split("\n\n")
    assert shown == "x" * (51200 - 4) + "END"
    assert note == (
        "[Output truncated: showing the last 50 KB of line 1 of 1. "
        f"Full output saved to {result.details['output_file']}]"
    )


async def test_progress_is_reported_as_text_chunks(bash: BashTool) -> None:
    chunks: list[str] = []

    async def report(chunk: Any) -> None:
        chunks.append(chunk)

    result = await _run(bash, report=report, command="echo one; echo two >&2; echo three")
    assert "".join(chunks) == "one\ntwo\nthree\n"
    assert all(isinstance(c, str) and c for c in chunks)
    assert result.text == "one\ntwo\nthree"


async def test_a_failing_progress_callback_surfaces_after_the_command_ends(bash: BashTool, root: Path) -> None:
    async def report(chunk: Any) -> None:
        raise RuntimeError("listener broke")

    with pytest.raises(RuntimeError, match="listener broke"):
        await _run(bash, report=report, command="echo hi; touch finished")
    assert (root / "finished").exists()


@needs_proc
async def test_timeout_kills_the_whole_process_group(bash: BashTool, root: Path) -> None:
    result = await _run(bash, command="sleep 30 & echo $! > child.pid; echo started; wait", timeout=1)
    assert result.is_error
    assert result.text == (
        "started\n\n[Command timed out after 1 second and was killed with all its processes.]"
    )
    assert result.details["timed_out"] is True
    assert not running(int((root / "child.pid").read_text()))


@needs_proc
async def test_processes_ignoring_sigterm_get_sigkill(workspace: Workspace, root: Path) -> None:
    tool = BashTool(workspace, kill_grace=0.2)
    result = await _run(tool, command="trap '' TERM; sleep 30 & echo $! > child.pid; wait", timeout=1)
    assert result.details["timed_out"] is True
    assert not running(int((root / "child.pid").read_text()))


@needs_proc
async def test_abort_signal_kills_the_process_group(bash: BashTool, root: Path) -> None:
    signal = AbortSignal()
    pids: list[int] = []

    async def report(chunk: Any) -> None:
        if "started" in chunk and not signal.aborted:
            pids.append(int((root / "child.pid").read_text()))
            assert running(pids[0])
            signal.abort()

    result = await _run(
        bash, signal=signal, report=report, command="sleep 30 & echo $! > child.pid; echo started; wait"
    )
    assert result.is_error
    assert result.text == "started\n\n[Command aborted; it was killed with all its processes.]"
    assert result.details["aborted"] is True
    assert pids and not running(pids[0])


@needs_proc
async def test_task_cancellation_kills_the_process_group(bash: BashTool, root: Path) -> None:
    started = asyncio.Event()

    async def report(chunk: Any) -> None:
        if "started" in chunk:
            started.set()

    task = asyncio.ensure_future(
        _run(bash, report=report, command="sleep 30 & echo $! > child.pid; echo started; wait")
    )
    await started.wait()
    pid = int((root / "child.pid").read_text())
    assert running(pid)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not running(pid)


async def test_an_already_aborted_signal_does_not_start_the_command(bash: BashTool, root: Path) -> None:
    signal = AbortSignal()
    signal.abort()
    result = await _run(bash, signal=signal, command="touch made")
    assert result.is_error
    assert result.text == "Command not started: the run was aborted."
    assert not (root / "made").exists()


@needs_proc
async def test_background_process_holding_the_output_is_left_running(workspace: Workspace, root: Path) -> None:
    tool = BashTool(workspace, drain_timeout=0.2)
    result = await _run(tool, command="sleep 30 & echo $! > bg.pid; echo ok")
    pid = int((root / "bg.pid").read_text())
    try:
        assert not result.is_error
        assert result.text == (
            "ok\n\n[Background processes still held the output open when the shell exited; their later "
            "output is lost. Redirect background output to a file: cmd > log 2>&1 &]"
        )
        assert running(pid)
    finally:
        import os
        import signal as signals

        os.kill(pid, signals.SIGKILL)


@needs_proc
async def test_background_process_with_redirected_output_returns_cleanly(bash: BashTool, root: Path) -> None:
    result = await _run(bash, command="sleep 30 > /dev/null 2>&1 & echo $! > bg.pid; echo ok")
    pid = int((root / "bg.pid").read_text())
    try:
        assert result.text == "ok"
    finally:
        import os
        import signal as signals

        os.kill(pid, signals.SIGKILL)


# --- environment ---------------------------------------------------------------------


def test_scrub_environment_drops_secret_looking_names() -> None:
    env = {
        "PATH": "/usr/bin",
        "HOME": "/home/me",
        "LANG": "C.UTF-8",
        "OPENAI_API_KEY": "sk-1",
        "GITHUB_TOKEN": "gh",
        "MY_SECRET_THING": "s",
        "DB_PASSWORD": "p",
        "AWS_REGION": "eu",
        "aws_secret_access_key": "a",
        "API_KEY": "k",
        "DATABASE_URL": "postgres://u:p@h/db",
        "TOKENIZERS_PARALLELISM": "false",
        "CUSTOM_THING": "c",
    }
    assert scrub_environment(env) == {
        "PATH": "/usr/bin",
        "HOME": "/home/me",
        "LANG": "C.UTF-8",
        "TOKENIZERS_PARALLELISM": "false",
        "CUSTOM_THING": "c",
    }
    assert scrub_environment(env, extra_names=["custom_thing"], extra_patterns=["LAN*"]) == {
        "PATH": "/usr/bin",
        "HOME": "/home/me",
        "TOKENIZERS_PARALLELISM": "false",
    }


async def test_commands_do_not_see_secrets(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-secret")
    monkeypatch.setenv("HF_TOKEN", "hf-secret")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIA")
    monkeypatch.setenv("KETCH_VISIBLE", "yes")
    tool = BashTool(
        workspace, env={"EXTRA_VAR": "given"}, secret_names=["KETCH_HIDDEN"], env_allow=["KETCH_*"]
    )
    monkeypatch.setenv("KETCH_HIDDEN", "later")
    result = await _run(
        tool,
        command='echo "${ANTHROPIC_API_KEY:-none} ${HF_TOKEN:-none} ${AWS_ACCESS_KEY_ID:-none} '
        '$KETCH_VISIBLE $EXTRA_VAR ${KETCH_HIDDEN:-none}"; test -n "$PATH" && test -n "$HOME" && echo base',
    )
    assert result.text == "none none none yes given none\nbase"


def test_scrubbing_can_be_turned_off(workspace: Workspace, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SOME_API_KEY", "x")
    assert BashTool(workspace, scrub_env=False).env["SOME_API_KEY"] == "x"
    assert "SOME_API_KEY" not in BashTool(workspace).env
    assert BashTool(workspace, inherit_env=False, env={"A": "1"}).env == {"A": "1"}


# --- read-only classification --------------------------------------------------------

READ_ONLY = [
    "ls -la",
    "cat README.md",
    "head -n 20 src/a.py | tail -5",
    "wc -l *.py",
    "grep -rn 'def main' src",
    "rg TODO --glob '*.py'",
    "find . -name '*.py' -type f",
    "git status",
    "git log --oneline -10",
    "git diff HEAD~1 -- src/",
    "git show HEAD:README.md",
    "git --no-pager log -p",
    "git -C sub status",
    "git branch",
    "git branch -a",
    "pwd",
    "echo hello",
    "which python",
    "file x.bin",
    "stat a.txt",
    "du -sh .",
    "df -h",
    "tree src",
    "cd src && ls",
    "ls; pwd",
    "ls || echo none",
    "cat a.txt | sort | uniq -c",
    "echo $(git rev-parse HEAD)",
    "echo `pwd`",
    'echo "$(ls) and `date`"',
    "diff <(git show HEAD:a.py) a.py",
    "grep foo a.txt 2>/dev/null",
    "ls > /dev/null 2>&1",
    "ls 2>&1 | head",
    "ls &> /dev/null",
    "LC_ALL=C sort a.txt",
    "echo 'rm -rf / > x'",
    'echo "a > b"',
    "cat < input.txt",
    "echo $((1 + 2))",
    "echo $((1 + 2)) done; ls",
    "echo ${HOME}",
    "ls # > not a redirect",
    "/usr/bin/ls -l",
    "for f in a b; do wc -l $f; done",
    "if test -f a; then cat a; fi",
    "sort -n data.txt",
    "date +%Y",
]

MUTATING = [
    "",
    "rm -rf build",
    "ls > files.txt",
    "echo hi >> log.txt",
    "cat a | tee b",
    "echo $(rm -rf x)",
    "echo `touch x`",
    'echo "$(touch x)"',
    "ls; rm x",
    "ls && touch x",
    "ls | xargs rm",
    "find . -name '*.pyc' -delete",
    "find . -exec rm {} \\;",
    "find . -execdir touch {} +",
    "git commit -m x",
    "git checkout main",
    "git push",
    "git branch new-feature",
    "git branch -D old",
    "git -c core.pager=evil log",
    "git diff --output=patch.txt",
    "git grep -O foo",
    "sed -i s/a/b/ f",
    "python script.py",
    "npm install",
    "make",
    "./ls",
    "$CMD arg",
    "l* -la",
    "sleep 10 &",
    "cat <<EOF\nhi\nEOF",
    "sort -o out.txt in.txt",
    "sort --output=out.txt in.txt",
    "uniq in.txt out.txt",
    "tree -o out.txt",
    "date -s '2020-01-01'",
    "rg --pre ./evil foo",
    "env rm -rf x",
    "hostname newname",
    "PAGER=evil git log",
    "ls >| file",
    "echo hi > >(cat)",
    "echo 'unterminated",
    'echo "unterminated',
    "echo $(unterminated",
    "ls 1>out.txt",
    "ls &>out.txt",
    "cd x; chmod +x y",
    "bash -c 'ls'",
    "eval ls",
    "{ rm x; }",
    "(rm x)",
    "echo ${x:-$(rm y)}",
    "echo $(( $(rm y) + 1 ))",
    "echo $((1)) ; rm x",
    "awk '{print > \"f\"}' a",
]


@pytest.mark.parametrize("command", READ_ONLY)
def test_read_only_commands(command: str) -> None:
    assert is_read_only_command(command) is True


@pytest.mark.parametrize("command", MUTATING)
def test_mutating_commands(command: str) -> None:
    assert is_read_only_command(command) is False


def test_the_tool_is_sequential_exactly_when_the_command_is_not_read_only(bash: BashTool) -> None:
    assert bash.is_sequential({"command": "git status && git diff"}) is False
    assert bash.is_sequential({"command": "git stash"}) is True
    assert bash.is_sequential({}) is True
