"""White-box test: imports ketch implementation modules (private) directly.

The bubblewrap sandbox through the bash tool: availability and the reason when it is
missing, the policy per call, placeholders for absent protected paths, process cleanup,
denial hints, and ``coding_tools`` wiring (including the path without a sandbox)."""

from __future__ import annotations

import asyncio
import itertools
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import ketch.sandbox as sandbox_module
from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.sandbox import BubblewrapSandbox
from ketch.sandbox import Sandbox
from ketch.sandbox import SandboxPolicy
from ketch.sandbox import default_sandbox
from ketch.sandbox import denial_hint
from ketch.tools import BashTool
from ketch.tools import Workspace
from ketch.tools import coding_tools


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    found = default_sandbox()
    if found is None:
        pytest.fail(f"these tests need a working sandbox: {sandbox_module.sandbox_unavailable_reason()}")
    return found


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    return root.resolve()


async def _run(tool: BashTool, command: str, signal: AbortSignal | None = None, **args: Any) -> ToolResult:
    ctx = ToolContext(call_id="c", tool_name="bash", signal=signal or AbortSignal())
    return await tool.execute({"command": command, **args}, ctx)


def _host_processes_running(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker in cmdline and state not in ("Z", "X") and "bwrap" not in cmdline:
            found.append(int(entry))
    return found


async def _gone(marker: str) -> bool:
    """Whether no process running ``marker`` is left (the kernel kills a PID namespace's
    processes after its init dies; give it up to ten seconds)."""
    for _ in range(500):
        if not _host_processes_running(marker):
            return True
        await asyncio.sleep(0.02)
    return False


# --- availability ----------------------------------------------------------------------


def test_the_default_sandbox_is_bubblewrap_and_probed_once(sandbox: Sandbox) -> None:
    assert isinstance(sandbox, BubblewrapSandbox)
    assert sandbox.name == "bubblewrap"
    assert sandbox.unavailable_reason() is None
    assert default_sandbox() is sandbox
    assert sandbox_module.sandbox_unavailable_reason() is None


def test_importing_does_no_work() -> None:
    code = "import ketch.sandbox as s, ketch.tools._builtins; print(s._probed)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout == "None\n"


def test_a_missing_bwrap_is_reported(tmp_path: Path) -> None:
    missing = str(tmp_path / "no-bwrap")
    assert BubblewrapSandbox(missing).unavailable_reason() == (
        f"bubblewrap ({missing}) is not installed; install the 'bubblewrap' package"
    )


def test_a_bwrap_that_cannot_create_namespaces_is_reported(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    assert BubblewrapSandbox(str(fake)).unavailable_reason() == (
        "bubblewrap cannot create its namespaces here: bwrap: No permissions to create new namespace"
    )


async def test_an_unusable_sandbox_leaves_bash_unsandboxed_with_a_warning(tmp_path: Path, ws: Path) -> None:
    broken = BubblewrapSandbox(str(tmp_path / "no-bwrap"))
    tool = BashTool(Workspace(ws), sandbox=broken)
    assert tool.sandboxed is False
    assert tool.sandbox_warning == (
        f"bash commands run without a sandbox (bubblewrap ({tmp_path / 'no-bwrap'}) is not installed; "
        "install the 'bubblewrap' package); every bash command needs approval"
    )
    result = await _run(tool, "touch made && echo ran")
    assert result.text == "ran"
    assert (ws / "made").exists()


async def test_without_a_sandbox_on_this_platform_commands_still_run(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sandbox_module, "_probed", None)
    monkeypatch.setattr(sys, "platform", "darwin")
    assert default_sandbox() is None
    assert sandbox_module.sandbox_unavailable_reason() == "no sandbox is available on darwin yet"
    bash = next(t for t in coding_tools(ws) if isinstance(t, BashTool))
    assert bash.sandboxed is False
    assert bash.sandbox_warning == (
        "bash commands run without a sandbox (no sandbox is available on darwin yet); "
        "every bash command needs approval"
    )
    monkeypatch.setattr(sys, "platform", "linux")
    assert (await _run(bash, "echo ran")).text == "ran"


# --- coding_tools and the policy -----------------------------------------------------------


def test_coding_tools_sandbox_bash_by_default_and_pass_the_settings(sandbox: Sandbox, ws: Path) -> None:
    bash = next(t for t in coding_tools(ws) if isinstance(t, BashTool))
    assert bash.sandboxed is True
    assert bash.sandbox is sandbox
    assert bash.policy() == SandboxPolicy(workspace=ws, write=True)
    writable = [False]
    bash = next(
        t
        for t in coding_tools(
            ws, write_allowed=lambda: writable[0], network=True, protected=[".env"], env_allow=["EDITOR"]
        )
        if isinstance(t, BashTool)
    )
    assert bash.policy() == SandboxPolicy(
        workspace=ws, write=False, network=True, protected=(".env",), env_allow=("EDITOR",)
    )
    writable[0] = True
    assert bash.policy().write is True
    unsandboxed = next(t for t in coding_tools(ws, sandbox=None) if isinstance(t, BashTool))
    assert unsandboxed.sandboxed is False
    assert unsandboxed.sandbox_warning is None


async def test_write_allowed_is_asked_at_every_call(sandbox: Sandbox, ws: Path) -> None:
    writable = [False]
    tool = BashTool(Workspace(ws), sandbox=sandbox, write_allowed=lambda: writable[0])
    denied = await _run(tool, "echo x > file")
    assert denied.is_error
    assert not (ws / "file").exists()
    writable[0] = True
    assert not (await _run(tool, "echo x > file")).is_error
    assert (ws / "file").read_text() == "x\n"


async def test_the_working_directory_and_private_tmp(sandbox: Sandbox, ws: Path) -> None:
    (ws / "sub").mkdir()
    tool = BashTool(Workspace(ws), sandbox=sandbox)
    assert (await _run(tool, "pwd", cwd="sub")).text == str(ws / "sub")
    assert (await _run(tool, 'echo $TMPDIR; echo t > "$TMPDIR/x" && cat /tmp/x')).text == "/tmp\nt"
    plan = BashTool(Workspace(ws), sandbox=sandbox, write_allowed=lambda: False)
    assert (await _run(plan, "touch /tmp/x 2>/dev/null || echo denied")).text == "denied"


async def test_other_workspace_roots_are_writable_in_write_mode_only(sandbox: Sandbox, ws: Path, tmp_path: Path) -> None:
    extra = tmp_path / "extra"
    extra.mkdir()
    workspace = Workspace(ws)
    workspace.allow_root(extra)
    writable = [True]
    tool = BashTool(workspace, sandbox=sandbox, write_allowed=lambda: writable[0])
    assert not (await _run(tool, f"echo a > {extra}/a")).is_error
    writable[0] = False
    assert (await _run(tool, f"cat {extra}/a; echo b > {extra}/b")).is_error
    assert sorted(os.listdir(extra)) == ["a"]


# --- protected paths -----------------------------------------------------------------------


async def test_an_absent_protected_path_gets_a_placeholder_only_while_a_command_runs(
    sandbox: Sandbox, ws: Path
) -> None:
    tool = BashTool(Workspace(ws), sandbox=sandbox)
    result = await _run(tool, "ls -a .ketch && mkdir -p .ketch/x 2>/dev/null || echo denied")
    assert result.text == ".\n..\ndenied"
    assert not (ws / ".ketch").exists()


async def test_placeholders_shared_by_concurrent_commands_outlive_the_first(sandbox: Sandbox, ws: Path) -> None:
    tool = BashTool(Workspace(ws), sandbox=sandbox)
    fifo = ws / "gate"
    os.mkfifo(fifo)
    slow = asyncio.ensure_future(_run(tool, "cat gate; mkdir .ketch/late 2>/dev/null || echo denied"))
    await asyncio.sleep(0)  # let it start (and make the placeholder) first
    first = await _run(tool, "ls -d .ketch")
    assert first.text == ".ketch"
    assert (ws / ".ketch").is_dir()
    fifo.write_text("go\n")
    late = await slow
    assert late.text == "go\ndenied"
    assert not (ws / ".ketch").exists()


def test_protected_paths_outside_the_workspace_are_ignored(sandbox: Sandbox, ws: Path) -> None:
    assert isinstance(sandbox, BubblewrapSandbox)
    policy = SandboxPolicy(workspace=ws, write=True, protected=("../elsewhere", "/etc"))
    argv, env = sandbox.wrap(["true"], policy, {"PATH": "/usr/bin"})
    try:
        assert str(ws.parent / "elsewhere") not in argv
        assert env == {"PATH": "/usr/bin", "TMPDIR": "/tmp"}
        assert argv[-2:] == ["--", "true"]
    finally:
        sandbox.release(argv)


# --- processes ---------------------------------------------------------------------------


async def test_a_timeout_kills_every_process_in_the_sandbox(sandbox: Sandbox, ws: Path) -> None:
    tool = BashTool(Workspace(ws), sandbox=sandbox, kill_grace=0.5)
    result = await _run(tool, "sleep 987.25 & echo started; wait", timeout=1)
    assert result.text == "started\n\n[Command timed out after 1 second and was killed with all its processes.]"
    assert await _gone("sleep 987.25")


async def test_an_abort_kills_every_process_in_the_sandbox(sandbox: Sandbox, ws: Path) -> None:
    tool = BashTool(Workspace(ws), sandbox=sandbox, kill_grace=0.5)
    signal = AbortSignal()

    async def report(chunk: Any) -> None:
        if "started" in chunk:
            signal.abort()

    ctx = ToolContext(call_id="c", tool_name="bash", signal=signal, report=report)
    result = await tool.execute({"command": "sleep 986.25 & echo started; wait"}, ctx)
    assert result.text == "started\n\n[Command aborted; it was killed with all its processes.]"
    assert await _gone("sleep 986.25")


async def test_background_processes_end_with_the_command(sandbox: Sandbox, ws: Path) -> None:
    tool = BashTool(Workspace(ws), sandbox=sandbox)
    result = await _run(tool, "sleep 985.25 > /dev/null 2>&1 & echo ok")
    assert result.text == "ok"
    assert await _gone("sleep 985.25")


# --- denial hints --------------------------------------------------------------------------


async def test_a_failure_that_is_no_denial_gets_no_hint(sandbox: Sandbox, ws: Path) -> None:
    tool = BashTool(Workspace(ws), sandbox=sandbox)
    assert (await _run(tool, "echo nope; exit 3")).text == "nope\n\n[Command exited with code 3.]"


@pytest.mark.parametrize(
    ("output", "write", "hint"),
    [
        ("touch: cannot touch '/x': Read-only file system", True,
         "[sandbox: the filesystem outside the workspace is read-only; write in the workspace or /tmp]"),
        ("touch: cannot touch 'x': Read-only file system", False,
         "[sandbox: plan mode: the whole filesystem is read-only, the workspace too]"),
        ("bash: .git/config: Read-only file system", True,
         "[sandbox: .git/config, .git/hooks, .git/commondir, .ketch, .mcp.json, .claude, .agents, … are read-only, even inside the workspace]"),
        ("mv: cannot move '.git' to 'g': Device or resource busy", True,
         "[sandbox: .git/config, .git/hooks, .git/commondir, .ketch, .mcp.json, .claude, .agents, … are read-only, even inside the workspace]"),
        ("ln: failed to create hard link 'h' => '/etc/passwd': Invalid cross-device link", True,
         "[sandbox: hard links across the workspace boundary are not allowed]"),
        ("curl: (6) Could not resolve host: example.com", True, "[sandbox: network access is disabled]"),
        ("bash: connect: Network is unreachable", False, "[sandbox: network access is disabled]"),
        ("mount: /: permission denied.\nunshare: Operation not permitted", True,
         "[sandbox: commands run without privileges (all capabilities dropped)]"),
        ("error: 1 test failed", True, None),
    ],
)
def test_denial_hints(output: str, write: bool, hint: str | None) -> None:
    assert denial_hint(output, SandboxPolicy(workspace=Path("/w"), write=write)) == hint


def test_no_network_hint_when_the_network_is_allowed() -> None:
    policy = SandboxPolicy(workspace=Path("/w"), write=True, network=True)
    assert denial_hint("curl: (6) Could not resolve host: example.com", policy) is None


def test_the_model_is_told_about_the_sandbox(sandbox: Sandbox, ws: Path) -> None:
    note = (
        "\n\nCommands run in a sandbox: only the workspace and /tmp are writable (nothing is in plan "
        "mode), .git/config, .git/hooks, .git/commondir, .ketch, .mcp.json, .claude, .agents, … stay read-only, there is no network access, and "
        "background processes end with the command. A denied action fails like any other error, "
        "with a [sandbox: ...] note."
    )
    assert BashTool(Workspace(ws), sandbox=sandbox).description.endswith(note)
    assert "sandbox" not in BashTool(Workspace(ws)).description
    networked = BashTool(Workspace(ws), sandbox=sandbox, network=True).description
    assert "there is network access" in networked


@pytest.mark.parametrize("write", [True, False])
async def test_hidden_paths_cannot_be_read(sandbox: Sandbox, ws: Path, tmp_path: Path, write: bool) -> None:
    # inside the workspace, which the sandbox shows (the private /tmp would hide them anyway)
    config = ws / "home" / ".config" / "ketch"
    config.mkdir(parents=True)
    (config / "config.toml").write_text('[providers.x]\napi_key = "sk-hidden-0123456789"\n')
    netrc = ws / "home" / ".netrc"
    netrc.write_text("machine x password sk-netrc-0123456789\n")
    tool = BashTool(Workspace(ws), sandbox=sandbox, write_allowed=lambda: write, hidden=[config, netrc])
    assert tool.policy().hidden == (config, netrc)
    listing = await _run(tool, f"ls -A {config}; wc -c < {netrc}; cat {config}/config.toml 2>/dev/null || echo gone")
    assert listing.text == "0\ngone"
    assert (config / "config.toml").read_text().startswith("[providers.x]")  # untouched outside
    unhidden = BashTool(Workspace(ws), sandbox=sandbox, write_allowed=lambda: write)
    assert "sk-hidden" in (await _run(unhidden, f"cat {config}/config.toml")).text  # the test can fail


def _pairs(args: list[str]) -> list[tuple[str, str]]:
    return list(itertools.pairwise(args))


def test_a_folder_that_cannot_be_searched_stays_unsearchable(
    sandbox: Sandbox, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After ``chmod 000 src private`` by one command, the next must not let a command
    make them searchable again: ketch cannot see what is inside, so it keeps them as they
    are (read-only, or hidden) instead of protecting or hiding nothing. Simulated: a root
    test process could search them anyway."""
    for rel in ("src/a.py", "private/.env", "deep/x/k.pem"):
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text("x\n")
    locked = {str(ws / "src"), str(ws / "private"), str(ws / "deep" / "x")}
    real_lstat, real_scandir = os.lstat, os.scandir

    def lstat(path: Any, *a: Any, **kw: Any) -> os.stat_result:
        if os.path.dirname(os.fspath(path)) in locked:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_lstat(path, *a, **kw)

    def scandir(path: Any = ".") -> Any:
        if os.fspath(path) in locked:
            raise PermissionError(13, "Permission denied", os.fspath(path))
        return real_scandir(path)

    monkeypatch.setattr(os, "lstat", lstat)
    monkeypatch.setattr(os, "scandir", scandir)
    policy = SandboxPolicy(
        workspace=ws,
        write=True,
        protected=(".git/config", "src/a.py"),
        hidden=(ws / "private" / ".env", ws / "**" / "*.pem"),
    )
    args, _ = sandbox.wrap(["true"], policy, {})
    sandbox.release(args)
    pairs = _pairs(args)
    assert ("--ro-bind", str(ws / "src")) in pairs  # chmod there now fails: read-only
    assert ("--tmpfs", str(ws / "private")) in pairs  # the folder stands for its file
    assert ("--tmpfs", str(ws / "deep" / "x")) in pairs  # a pattern could match inside


async def test_a_rename_cannot_carry_a_hidden_file_away(sandbox: Sandbox, ws: Path) -> None:
    secret = ws / "config" / "secrets" / "key.txt"
    secret.parent.mkdir(parents=True)
    secret.write_text("sk-moved-0123456789\n")
    tool = BashTool(Workspace(ws), sandbox=sandbox, hidden=[ws / "config" / "secrets" / "**"])
    moved = await _run(tool, "mv config cfg 2>/dev/null; mv config/secrets s 2>/dev/null; ls -A config/secrets; echo end")
    assert moved.text == "end"  # still in place, still empty inside
    assert not (ws / "cfg").exists()
    assert not (ws / "s" / "key.txt").exists()  # mv may copy the (empty) mount, never the file
    assert secret.read_text() == "sk-moved-0123456789\n"


def test_a_hidden_private_folder_hides_the_workspace_inside_it(sandbox: Sandbox) -> None:
    """/tmp is the sandbox's own, empty but for the workspace bound back into it."""
    shown = ["/tmp/somewhere/ws", "/srv/ws2"]
    assert BubblewrapSandbox._hidden_targets([Path("/tmp/**")], shown) == ["/tmp/somewhere/ws"]
    absent = Path("/tmp") / f"ketch-absent-{os.getpid()}-{id(shown)}"  # nothing there: nothing to hide
    assert BubblewrapSandbox._hidden_targets([absent], shown) == []


def test_placeholders_are_removed_when_wrapping_fails(
    sandbox: Sandbox, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(real: str, *, write: bool) -> list[str]:
        raise RuntimeError("mount planning failed")

    monkeypatch.setattr(BubblewrapSandbox, "_hide", staticmethod(broken))
    (ws / "secret").write_text("x\n")
    policy = SandboxPolicy(workspace=ws, write=True, hidden=(ws / "secret",))
    with pytest.raises(RuntimeError, match="mount planning failed"):
        sandbox.wrap(["true"], policy, {})
    assert not (ws / ".ketch").exists()  # its placeholder was made, then removed
