"""Hostile commands through the bash tool with the real sandbox on, in plan mode (nothing
writable) and in write mode (the workspace writable): none may change anything outside
the workspace, the protected paths inside it (or, in plan mode, the workspace), or print
an API key of the ketch process. Each attempt is counted (see conftest.py)."""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

from .conftest import FAKE_KEYS
from .conftest import PROBE_NAME
from .conftest import Probe
from .conftest import Runner
from .conftest import World

MODES = [pytest.param(False, id="plan"), pytest.param(True, id="write")]

# The classes that got past the old read-only classifier, aimed outside the workspace.
HIDDEN_FLAGS_AND_SUBSTITUTIONS = {
    "flag-in-variable": "f=-delete; find {outside} -name victim.txt $f",
    "flag-ansi-c-quoted": "find {outside} -name victim.txt $'\\x2ddelete'",
    "flag-brace-expansion": "find {outside} -name victim.txt -{delete,print}",
    "arithmetic-substitution": "x='a[$(echo pwned > {victim})]'; echo $((x))",
    "test-v-substitution": "test -v 'a[$(echo pwned > {victim})]'; echo done",
    "printf-v-substitution": "printf -v 'a[$(echo pwned > {victim})]' %s x; echo done",
    "prompt-expansion": "x='$(echo pwned > {victim})'; echo \"${x@P}\"",
    "output-option-in-variable": "o=--output={victim}; sort $o /etc/hostname",
    "git-output-option-in-variable": "o=--output={victim}; git diff $o",
}

PATH_ESCAPES = {
    "dotdot-overwrite": "echo pwned > ../outside/victim.txt",
    "dotdot-create": "touch ../outside/new.txt",
    "absolute-overwrite": "echo pwned > {victim}",
    "absolute-delete": "rm -f {victim}",
    "absolute-create": "touch {outside}/new.txt",
    "hidden-tmp-overwrite": "echo pwned > {hidden}/victim.txt",
    "symlink-to-file": "echo pwned > link-file",
    "symlink-to-dir-create": "touch link-dir/new.txt",
    "symlink-to-dir-delete": "rm -f link-dir/victim.txt",
    "new-symlink-out": "ln -s {victim} out-link && echo pwned > out-link",
    "hard-link-out": "ln {victim} hard-link && echo pwned >> hard-link",
    "cd-outside": "cd {outside} && touch {probe} && echo pwned > victim.txt",
    "cd-root": "cd / && touch {probe}",
    "cd-etc": "cd /etc && touch {probe}",
    "cd-home": "cd ~ && touch {probe}",
    "python-write": "python3 -c \"open('{victim}', 'w').write('pwned')\"",
    "move-out": "mv src/a.txt {outside}/moved.txt",
    "copy-out": "cp src/a.txt {outside}/",
    "proc-root-of-ketch": "echo pwned > /proc/{pid}/root{victim}",
    "proc-root-of-pid-1": "echo pwned > /proc/1/root{victim}",
    "remount-read-write": "mount -o remount,rw /; mount -o remount,rw,bind {outside}; echo pwned > {victim}",
    "new-user-namespace": "unshare -Urm sh -c 'mount -o remount,rw,bind {outside}; echo pwned > {victim}'",
    "kill-ketch": "kill -9 {pid}; kill -9 $PPID; kill -9 -1",
}

PROTECTED_WRITES = {
    "git-config-append": "printf '[core]\\n\\tfsmonitor = touch {outside}/ran\\n' >> .git/config",
    "git-config-command": "git config core.fsmonitor 'touch {outside}/ran'; git status",
    "git-config-replace": "cp .git/config c && echo '[core] fsmonitor = x' >> c && mv c .git/config",
    "git-diff-driver": "git config diff.evil.textconv 'touch {outside}/ran'; echo '* diff=evil' > .gitattributes",
    "git-hook": "echo 'touch {outside}/ran' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit",
    "git-hooks-replace": "rm -rf .git/hooks; mkdir .git/hooks && echo x > .git/hooks/post-checkout",
    "git-commondir": "mkdir -p evil/objects evil/refs && "
    "printf '[core]\\n\\tfsmonitor = touch {outside}/ran\\n' > evil/config && echo ../evil > .git/commondir",
    "git-commondir-rename": "echo ../evil > c && mv c .git/commondir",
    "git-dir-rename": "mv .git .git-old && mkdir .git && cp -r .git-old/. .git/ && echo x >> .git/config",
    "git-dir-delete": "rm -rf .git && git init -q . && git config core.fsmonitor x",
    "submodule-config": "echo '[core] fsmonitor = x' >> .git/modules/lib/config",
    "nested-submodule-config": "git --git-dir=.git/modules/lib/modules/inner config core.fsmonitor x",
    "submodule-hook": "echo x > .git/modules/lib/hooks/post-checkout",
    "submodule-dir-rename": "mv .git/modules .git/m2 && mkdir -p .git/modules/lib && echo x > .git/modules/lib/config",
    "ketch-config": "echo 'mode = \"bypass\"' > .ketch/config.toml",
    "ketch-config-new-file": "echo 'mode = \"bypass\"' > .ketch/settings.toml",
    "ketch-dir-rename": "mv .ketch .ketch-old && mkdir .ketch && echo x > .ketch/config.toml",
    "ketch-dir-delete": "rm -rf .ketch && mkdir .ketch && echo x > .ketch/config.toml",
}

KEY_READS = {
    "proc-ppid-environ": "cat /proc/$PPID/environ",
    "proc-1-environ": "cat /proc/1/environ",
    "proc-ketch-pid-environ": "cat /proc/{pid}/environ",
    "proc-every-environ": "cat /proc/*/environ /proc/*/task/*/environ",
    "proc-self-environ": "cat /proc/self/environ",
    "proc-grep": "grep -a -r sk- /proc/*/environ /proc/*/cmdline",
    "ppid-of-ppid": "p=$(awk '{print $4}' /proc/$PPID/stat); cat /proc/$p/environ",
    "own-environment": "env; set",
    "python-environment": "python3 -c 'import os; print(dict(os.environ))'",
}


@pytest.mark.parametrize("write", MODES)
@pytest.mark.parametrize("name", list(HIDDEN_FLAGS_AND_SUBSTITUTIONS))
def test_hidden_flags_and_substitutions_cannot_write_outside(probe: Probe, name: str, write: bool) -> None:
    probe.attempt(name, HIDDEN_FLAGS_AND_SUBSTITUTIONS[name], write=write)


@pytest.mark.parametrize("write", MODES)
@pytest.mark.parametrize("name", list(PATH_ESCAPES))
def test_paths_cannot_lead_outside(probe: Probe, name: str, write: bool) -> None:
    probe.attempt(name, PATH_ESCAPES[name], write=write)


@pytest.mark.parametrize("write", MODES)
@pytest.mark.parametrize("name", list(PROTECTED_WRITES))
def test_protected_paths_stay_read_only(probe: Probe, name: str, write: bool) -> None:
    probe.attempt(name, PROTECTED_WRITES[name], write=write)


@pytest.mark.parametrize("write", MODES)
def test_protected_paths_cannot_be_created_when_absent(probe: Probe, world: World, write: bool) -> None:
    (world.ws / ".ketch" / "config.toml").unlink()
    (world.ws / ".ketch").rmdir()
    world.reset_baseline()
    reply = probe.attempt(
        "ketch-dir-create", "mkdir -p .ketch && echo 'mode = \"bypass\"' > .ketch/config.toml", write=write
    )
    assert reply["is_error"]
    assert not (world.ws / ".ketch").exists()


@pytest.mark.parametrize("write", MODES)
@pytest.mark.parametrize("name", list(KEY_READS))
def test_keys_of_the_ketch_process_cannot_be_read(probe: Probe, name: str, write: bool) -> None:
    probe.attempt(name, KEY_READS[name], write=write)


@pytest.mark.parametrize("write", MODES)
def test_allowing_every_name_still_passes_no_secret(probe: Probe, write: bool) -> None:
    reply = probe.attempt("env-allow-everything", "env", write=write, env_allow=["*"])
    assert "HOME=" in reply["text"]


def test_the_keys_really_are_in_the_ketch_process(runner: Runner) -> None:
    """The key-read attempts are meaningful: the stand-in's environment holds the keys."""
    environ = Path(f"/proc/{runner.pid}/environ").read_bytes().decode()
    assert all(f"{k}={v}" in environ for k, v in FAKE_KEYS.items())


@pytest.mark.parametrize("write", MODES)
def test_plan_mode_leaves_the_workspace_unchanged_and_write_mode_writes_it(
    probe: Probe, world: World, write: bool
) -> None:
    reply = probe.attempt("workspace-write", "echo new > src/new.txt && rm src/a.txt", write=write)
    assert (world.ws / "src" / "new.txt").exists() is write
    assert (world.ws / "src" / "a.txt").exists() is not write
    if not write:
        assert reply["text"].endswith("[sandbox: plan mode: the whole filesystem is read-only, the workspace too]")


def test_a_denied_write_tells_the_model_why(probe: Probe) -> None:
    reply = probe.attempt("denial-hint", "echo pwned > {victim}", write=True)
    assert reply["is_error"]
    assert reply["text"] == (
        f"{shutil.which('bash')}: line 1: {probe.world.victim}: Read-only file system\n\n"
        "[Command exited with code 1.]\n\n"
        "[sandbox: the filesystem outside the workspace is read-only; write in the workspace or /tmp]"
    )


def test_a_protected_path_denial_names_the_protected_paths(probe: Probe) -> None:
    reply = probe.attempt("protected-hint", "echo x >> .git/config", write=True)
    assert reply["text"].endswith("[sandbox: .git/config, .git/hooks, .git/commondir, .ketch, .mcp.json, .claude, .agents, … are read-only, even inside the workspace]")


def test_a_hard_link_made_before_the_sandbox_is_not_contained(runner: Runner, world: World) -> None:
    """Known limit, not counted as an attempt: a hard link that already exists in the
    workspace is the outside file itself, so writing it in write mode changes the outside
    file. A sandboxed command cannot make one (``hard-link-out`` above gets EXDEV)."""
    os.link(world.victim, world.ws / "pre-existing-hard-link")
    runner.run("echo changed > pre-existing-hard-link", world.ws, write=True)
    assert world.victim.read_text() == "changed\n"
    runner.run("echo again > pre-existing-hard-link", world.ws, write=False)
    assert world.victim.read_text() == "changed\n"


# --- network and sockets ---------------------------------------------------------------


@pytest.fixture
def server() -> socket.socket:
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.bind(("127.0.0.1", 0))
    srv.listen(8)
    return srv


@pytest.mark.parametrize("write", MODES)
def test_no_network_by_default(probe: Probe, server: socket.socket, write: bool) -> None:
    port = server.getsockname()[1]
    try:
        reply = probe.attempt(
            "loopback-connect", f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo hello >&3 && echo sent", write=write
        )
        assert "sent" not in reply["text"]
        assert reply["text"].endswith("[sandbox: network access is disabled]")
        server.setblocking(False)
        with pytest.raises(BlockingIOError):
            server.accept()
    finally:
        server.close()


def test_network_when_allowed(runner: Runner, world: World, server: socket.socket) -> None:
    port = server.getsockname()[1]
    try:
        reply = runner.run(
            f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo hello >&3 && echo sent", world.ws, write=False, network=True
        )
        assert reply["text"] == "sent"
        server.settimeout(10)
        conn, _ = server.accept()
        with conn:
            assert conn.recv(100) == b"hello\n"
    finally:
        server.close()


@pytest.mark.parametrize("write", MODES)
def test_host_sockets_in_tmp_are_out_of_reach(probe: Probe, world: World, write: bool) -> None:
    path = world.hidden / "agent.sock"
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(1)
    world.reset_baseline()
    try:
        reply = probe.attempt(
            "tmp-unix-socket",
            f"python3 -c \"import socket; s = socket.socket(socket.AF_UNIX); s.connect('{path}'); print('connected')\"",
            write=write,
        )
        assert "connected" not in reply["text"]
        srv.setblocking(False)
        with pytest.raises(BlockingIOError):
            srv.accept()
    finally:
        srv.close()


CONTROLS = [*list(HIDDEN_FLAGS_AND_SUBSTITUTIONS)[:-1], "dotdot-overwrite", "symlink-to-file"]


@pytest.mark.parametrize("name", CONTROLS)
def test_the_checks_catch_these_escapes_without_the_sandbox(runner: Runner, world: World, name: str) -> None:
    """Control, not counted: run unsandboxed, the same commands do change the outside file,
    so the attempts above test something."""
    command = {**HIDDEN_FLAGS_AND_SUBSTITUTIONS, **PATH_ESCAPES}[name].replace("{victim}", str(world.victim))
    command = command.replace("{outside}", str(world.outside))
    reply = runner.run(command, world.ws, write=True, sandbox=False)
    assert reply["sandboxed"] is False
    assert world.changes(write=True) == ["outside"]


def test_the_key_check_catches_a_leak_without_the_sandbox(runner: Runner, world: World) -> None:
    """Control, not counted: unsandboxed, the parent's environment is readable through
    /proc (which is why unsandboxed bash always needs approval)."""
    reply = runner.run("cat /proc/$PPID/environ", world.ws, write=True, sandbox=False)
    assert FAKE_KEYS["OPENAI_API_KEY"] in reply["text"]


def test_probe_name_is_not_left_anywhere(world: World) -> None:
    assert not any(os.path.lexists(p) for p in world.elsewhere)
    assert PROBE_NAME not in os.listdir(world.outside)
