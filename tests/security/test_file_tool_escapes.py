"""White-box test: imports ketch implementation modules (private) directly.

The file tools (read, write, edit, ls, find, grep) and bash, driven by a scripted model
through a real agent loop with the permission engine on, in every permission mode. The
approver says yes to every question, so only the tools' own confinement and the sandbox
stand between the model and the host.

Targets: ``..``, absolute paths, ``~`` paths, symlinks in the workspace to a file and to a
folder outside, symlink chains, a dangling symlink, a symlink to ``/proc/self/environ``,
a hard link in the workspace to a file outside (made before the run), the protected
paths (``.git/config``, ``.git/hooks``, ``.ketch/config.toml``: an approved edit there
is followed by the git command it would turn into code execution; also written through
the workspace folder's own name, ``ws/.git/config``, as the tools read it, and through a
symlink then ``..``, ``x/../.git/config``), ``/proc`` environ
files of the agent, and bash ``cd`` elsewhere. Each run is one counted attempt (see
conftest.py): nothing outside the workspace may change, no key may appear in any tool
result or event, and each result is exactly what is asserted.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ketch.permissions import PLAN_DENIED
from ketch.permissions import PRECHECK
from ketch.tools._workspace import hard_link_message

from .conftest import PROBE_NAME
from .conftest import Probe
from .conftest import Runner
from .conftest import World

MODES = ["default", "accept_edits", "plan", "bypass"]
EDIT_TOOLS = ("write", "edit")

OUTSIDE_HINT = "[sandbox: the filesystem outside the workspace is read-only; write in the workspace or /tmp]"
PLAN_HINT = "[sandbox: plan mode: the whole filesystem is read-only, the workspace too]"
HARD_LINK_HINT = "[sandbox: hard links across the workspace boundary are not allowed]"
AS_NOBODY_HINT = (
    "[sandbox: commands run as nobody (uid 65534), not as root: folders and files only root may read are out of reach]"
)
"""Plan mode when ketch runs as root: the command runs as nobody, and a folder root keeps
to itself (the world's base is in root's home) is not there at all."""


@dataclass(frozen=True)
class Exact:
    """The tool result must be exactly ``text``."""

    is_error: bool
    text: str

    def check(self, is_error: bool, text: str) -> bool:
        return (is_error, text) == (self.is_error, self.text)


@dataclass(frozen=True)
class StartsWith:
    """The tool result must start with ``text`` (the rest is a diff or git's output)."""

    is_error: bool
    text: str

    def check(self, is_error: bool, text: str) -> bool:
        return is_error == self.is_error and text.startswith(self.text)


@dataclass(frozen=True)
class EndsWith:
    """The tool result must end with ``text`` (a bash command's own error, then the hint)."""

    is_error: bool
    text: str

    def check(self, is_error: bool, text: str) -> bool:
        return is_error == self.is_error and text.endswith(self.text)


@dataclass(frozen=True)
class EndsWithEither:
    """The tool result must end with one of ``texts``."""

    is_error: bool
    texts: tuple[str, ...]

    def check(self, is_error: bool, text: str) -> bool:
        return is_error == self.is_error and text.endswith(self.texts)


@dataclass(frozen=True)
class Ran:
    """Any result: a bash command whose effects the world check judges (git status)."""

    def check(self, is_error: bool, text: str) -> bool:
        return True


Expect = Exact | StartsWith | EndsWith | EndsWithEither | Ran
Call = tuple[str, dict[str, Any], Expect]


class Targets:
    """The world plus the links the attempts aim at, made before the run."""

    def __init__(self, world: World, runner: Runner) -> None:
        self.world = world
        ws = world.ws
        self.ws = os.path.realpath(ws)
        self.base = os.path.realpath(world.base)
        self.outside = os.path.realpath(world.outside)
        self.victim = os.path.join(self.outside, "victim.txt")
        self.home = os.path.realpath(Path.home())
        self.tilde_victim = "~/" + os.path.relpath(self.victim, self.home)
        self.pid = runner.pid
        self.name = os.path.basename(self.ws)  # the workspace folder's own name
        (ws / "chain-2").symlink_to("link-file")
        (ws / "chain-1").symlink_to("chain-2")
        (ws / "dir-chain").symlink_to("link-dir")
        (ws / "dangling").symlink_to(Path(self.outside) / "new.txt")
        (ws / "env-link").symlink_to("/proc/self/environ")
        os.link(world.victim, ws / "hard-link.txt")
        world.reset_baseline()

    def out(self, path: str, real: str, *, link: bool = False) -> Exact:
        """The workspace's refusal of ``path``, which resolves to ``real`` outside."""
        how = f"it leads through a symlink to {real}" if link else f"it resolves to {real}"
        return Exact(
            True, f"Path {path!r} is outside the workspace: {how}. Access is limited to the workspace root {self.ws}."
        )


def _read(t: Targets, path: str, expect: Expect) -> list[Call]:
    return [("read", {"path": path}, expect)]


def _write(t: Targets, path: str, expect: Expect) -> list[Call]:
    return [("write", {"path": path, "content": "pwned\n"}, expect)]


def _edit(t: Targets, path: str, expect: Expect) -> list[Call]:
    return [("edit", {"path": path, "old_string": "original", "new_string": "pwned"}, expect)]


READ_OK = Exact(False, "     1\toriginal")

# name -> the calls of one attempt, each with the result it must give
CASES: dict[str, Callable[[Targets], list[Call]]] = {
    # read
    "read-dotdot": lambda t: _read(t, "../outside/victim.txt", t.out("../outside/victim.txt", t.victim)),
    "read-absolute": lambda t: _read(t, t.victim, t.out(t.victim, t.victim)),
    "read-tilde": lambda t: _read(t, t.tilde_victim, t.out(t.tilde_victim, t.victim)),
    "read-etc-passwd": lambda t: _read(t, "/etc/passwd", t.out("/etc/passwd", "/etc/passwd")),
    "read-symlink-file": lambda t: _read(t, "link-file", t.out("link-file", t.victim, link=True)),
    "read-symlink-dir": lambda t: _read(t, "link-dir/victim.txt", t.out("link-dir/victim.txt", t.victim, link=True)),
    "read-symlink-chain": lambda t: _read(t, "chain-1", t.out("chain-1", t.victim, link=True)),
    "read-proc-self-environ": lambda t: _read(t, "/proc/self/environ", t.out("/proc/self/environ", f"/proc/{t.pid}/environ")),
    "read-proc-pid-environ": lambda t: _read(
        t, f"/proc/{t.pid}/environ", t.out(f"/proc/{t.pid}/environ", f"/proc/{t.pid}/environ")
    ),
    "read-proc-1-environ": lambda t: _read(t, "/proc/1/environ", t.out("/proc/1/environ", "/proc/1/environ")),
    "read-symlink-to-environ": lambda t: _read(t, "env-link", t.out("env-link", f"/proc/{t.pid}/environ", link=True)),
    "read-dotdot-environ": lambda t: _read(
        t, "../" * 40 + "proc/self/environ", t.out("../" * 40 + "proc/self/environ", f"/proc/{t.pid}/environ")
    ),
    # reading a hard link reads the one file it is (allowed, see the README)
    "read-hard-link": lambda t: _read(t, "hard-link.txt", READ_OK),
    # write
    "write-dotdot": lambda t: _write(t, "../outside/victim.txt", t.out("../outside/victim.txt", t.victim)),
    "write-dotdot-create": lambda t: _write(
        t, "../outside/new.txt", t.out("../outside/new.txt", os.path.join(t.outside, "new.txt"))
    ),
    "write-absolute": lambda t: _write(t, t.victim, t.out(t.victim, t.victim)),
    "write-root": lambda t: _write(t, f"/{PROBE_NAME}", t.out(f"/{PROBE_NAME}", f"/{PROBE_NAME}")),
    "write-etc": lambda t: _write(t, f"/etc/{PROBE_NAME}", t.out(f"/etc/{PROBE_NAME}", f"/etc/{PROBE_NAME}")),
    "write-tilde": lambda t: _write(t, f"~/{PROBE_NAME}", t.out(f"~/{PROBE_NAME}", os.path.join(t.home, PROBE_NAME))),
    "write-tilde-victim": lambda t: _write(t, t.tilde_victim, t.out(t.tilde_victim, t.victim)),
    "write-symlink-file": lambda t: _write(t, "link-file", t.out("link-file", t.victim, link=True)),
    "write-symlink-dir": lambda t: _write(
        t, "link-dir/new.txt", t.out("link-dir/new.txt", os.path.join(t.outside, "new.txt"), link=True)
    ),
    "write-symlink-chain": lambda t: _write(t, "chain-1", t.out("chain-1", t.victim, link=True)),
    "write-dangling-symlink": lambda t: _write(
        t, "dangling", t.out("dangling", os.path.join(t.outside, "new.txt"), link=True)
    ),
    "write-hard-link": lambda t: [
        ("read", {"path": "hard-link.txt"}, READ_OK),
        ("write", {"path": "hard-link.txt", "content": "pwned\n"}, Exact(True, hard_link_message("hard-link.txt", 2))),
    ],
    "write-hard-link-unread": lambda t: _write(t, "hard-link.txt", Exact(True, hard_link_message("hard-link.txt", 2))),
    # edit
    "edit-dotdot": lambda t: _edit(t, "../outside/victim.txt", t.out("../outside/victim.txt", t.victim)),
    "edit-absolute": lambda t: _edit(t, t.victim, t.out(t.victim, t.victim)),
    "edit-tilde": lambda t: _edit(t, t.tilde_victim, t.out(t.tilde_victim, t.victim)),
    "edit-symlink-file": lambda t: _edit(t, "link-file", t.out("link-file", t.victim, link=True)),
    "edit-symlink-dir": lambda t: _edit(t, "link-dir/victim.txt", t.out("link-dir/victim.txt", t.victim, link=True)),
    "edit-symlink-chain": lambda t: _edit(t, "chain-1", t.out("chain-1", t.victim, link=True)),
    "edit-hard-link": lambda t: [
        ("read", {"path": "hard-link.txt"}, READ_OK),
        (
            "edit",
            {"path": "hard-link.txt", "old_string": "original", "new_string": "pwned"},
            Exact(True, hard_link_message("hard-link.txt", 2)),
        ),
    ],
    # ls
    "ls-dotdot": lambda t: [("ls", {"path": ".."}, t.out("..", t.base))],
    "ls-absolute": lambda t: [("ls", {"path": t.outside}, t.out(t.outside, t.outside))],
    "ls-tilde": lambda t: [("ls", {"path": "~"}, t.out("~", t.home))],
    "ls-symlink-dir": lambda t: [("ls", {"path": "link-dir"}, t.out("link-dir", t.outside, link=True))],
    "ls-symlink-chain": lambda t: [("ls", {"path": "dir-chain"}, t.out("dir-chain", t.outside, link=True))],
    "ls-proc-self": lambda t: [("ls", {"path": "/proc/self"}, t.out("/proc/self", f"/proc/{t.pid}"))],
    # find
    "find-dotdot": lambda t: [("find", {"pattern": "*", "path": ".."}, t.out("..", t.base))],
    "find-absolute": lambda t: [("find", {"pattern": "*", "path": t.outside}, t.out(t.outside, t.outside))],
    "find-tilde": lambda t: [("find", {"pattern": "**", "path": "~"}, t.out("~", t.home))],
    "find-symlink-dir": lambda t: [("find", {"pattern": "*", "path": "link-dir"}, t.out("link-dir", t.outside, link=True))],
    "find-through-symlinked-dir": lambda t: [
        ("find", {"pattern": "**/victim.txt"}, Exact(False, "No files match '**/victim.txt' in .."))
    ],
    "find-dotdot-pattern": lambda t: [
        ("find", {"pattern": "../outside/*"}, Exact(False, "No files match '../outside/*' in .."))
    ],
    # bash: cd elsewhere, links, the agent's environment
    "bash-cd-dotdot": lambda t: [("bash", {"command": f"cd .. && touch {PROBE_NAME} && echo pwned > outside/victim.txt"}, Ran())],
    "bash-cd-outside": lambda t: [("bash", {"command": f"cd {t.outside} && echo pwned > victim.txt"}, Ran())],
    "bash-cd-root": lambda t: [("bash", {"command": f"cd / && touch {PROBE_NAME}"}, Ran())],
    "bash-cd-etc": lambda t: [("bash", {"command": f"cd /etc && touch {PROBE_NAME}"}, Ran())],
    "bash-cd-home": lambda t: [("bash", {"command": f"cd ~ && touch {PROBE_NAME}"}, Ran())],
    "bash-cd-symlink-dir": lambda t: [("bash", {"command": "cd link-dir && echo pwned > victim.txt"}, Ran())],
    "bash-new-hard-link": lambda t: [("bash", {"command": f"ln {t.victim} new-link && echo pwned >> new-link"}, Ran())],
    "bash-proc-environ": lambda t: [
        ("bash", {"command": f"cat /proc/$PPID/environ /proc/1/environ /proc/{t.pid}/environ /proc/self/environ"}, Ran())
    ],
    "bash-env-link": lambda t: [("bash", {"command": "cat env-link; env"}, Ran())],
}

# The bash attempts end with the sandbox's hint; which one depends on the mode.
BASH_HINTS: dict[str, tuple[str, str]] = {
    "bash-cd-dotdot": (OUTSIDE_HINT, PLAN_HINT),
    "bash-cd-outside": (OUTSIDE_HINT, PLAN_HINT),
    "bash-cd-root": (OUTSIDE_HINT, PLAN_HINT),
    "bash-cd-etc": (OUTSIDE_HINT, PLAN_HINT),
    "bash-cd-home": (OUTSIDE_HINT, PLAN_HINT),
    "bash-cd-symlink-dir": (OUTSIDE_HINT, PLAN_HINT),
    "bash-new-hard-link": (HARD_LINK_HINT, PLAN_HINT),
}

GREP_CASES: dict[str, Callable[[Targets], list[Call]]] = {
    "grep-dotdot": lambda t: [("grep", {"pattern": "original", "path": ".."}, t.out("..", t.base))],
    "grep-dotdot-file": lambda t: [
        ("grep", {"pattern": "original", "path": "../outside/victim.txt"}, t.out("../outside/victim.txt", t.victim))
    ],
    "grep-absolute": lambda t: [("grep", {"pattern": "original", "path": t.outside}, t.out(t.outside, t.outside))],
    "grep-tilde": lambda t: [("grep", {"pattern": "original", "path": "~"}, t.out("~", t.home))],
    "grep-symlink-file": lambda t: [
        ("grep", {"pattern": "original", "path": "link-file"}, t.out("link-file", t.victim, link=True))
    ],
    "grep-symlink-dir": lambda t: [
        ("grep", {"pattern": "original", "path": "link-dir"}, t.out("link-dir", t.outside, link=True))
    ],
    "grep-symlink-chain": lambda t: [
        ("grep", {"pattern": "original", "path": "chain-1"}, t.out("chain-1", t.victim, link=True))
    ],
    "grep-proc-environ": lambda t: [
        ("grep", {"pattern": "sk-", "path": "/proc/self/environ"}, t.out("/proc/self/environ", f"/proc/{t.pid}/environ"))
    ],
    "grep-proc": lambda t: [("grep", {"pattern": "sk-", "path": "/proc"}, t.out("/proc", "/proc"))],
    "grep-symlink-to-environ": lambda t: [
        ("grep", {"pattern": "sk-", "path": "env-link"}, t.out("env-link", f"/proc/{t.pid}/environ", link=True))
    ],
    # the workspace search follows no symlink out; the hard link is the one outside file it finds
    "grep-workspace": lambda t: [("grep", {"pattern": "original|pwned"}, Exact(False, "hard-link.txt:1:original"))],
    "grep-workspace-keys": lambda t: [("grep", {"pattern": "sk-test"}, Exact(False, "No matches for 'sk-test' in .."))],
}


def _expected(name: str, calls: list[Call], mode: str) -> list[Call]:
    """The calls with plan mode's denials of write and edit, and the bash hints."""
    out: list[Call] = []
    for tool, args, expect in calls:
        if tool in EDIT_TOOLS and mode == "plan":
            expect = Exact(True, PLAN_DENIED.format(tool=tool))
        elif name in BASH_HINTS and mode == "plan" and os.geteuid() == 0:
            expect = EndsWithEither(True, (BASH_HINTS[name][1], AS_NOBODY_HINT))
        elif name in BASH_HINTS:
            expect = EndsWith(True, BASH_HINTS[name][1 if mode == "plan" else 0])
        out.append((tool, args, expect))
    return out


def _asked(calls: list[Call], mode: str, decisions: list[list[Any]]) -> list[str]:
    """The calls the approver must have been asked about in ``mode``."""
    if mode in ("plan", "bypass"):
        return []
    if mode == "default":
        # each edit and bash call, but those the tool's precheck refuses before anyone is asked
        return [tool for (tool, by, _, _) in decisions if tool in (*EDIT_TOOLS, "bash") and by != PRECHECK]
    # accept_edits: bash is sandboxed, so only edits of paths outside or protected ask
    return [tool for (tool, by, _, _) in decisions if by == "user"]


def _run(probe: Probe, name: str, mode: str, calls: list[Call], **extra: Any) -> dict[str, Any]:
    reply = probe.agent_attempt(name, mode, [(tool, args) for tool, args, _ in calls], **extra)
    got = reply["results"]
    assert [tool for tool, _, _ in got] == [tool for tool, _, _ in calls]
    for (tool, args, expect), (_, is_error, text) in zip(calls, got, strict=True):
        assert expect.check(is_error, text), f"{name} [{mode}] {tool} {args}: expected {expect}, got:\n{text}"
    assert reply["asked"] == _asked(calls, mode, reply["decisions"])
    return reply


@pytest.fixture
def targets(world: World, runner: Runner) -> Targets:
    return Targets(world, runner)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(CASES))
def test_file_tools_and_bash_cannot_reach_outside(probe: Probe, targets: Targets, name: str, mode: str) -> None:
    reply = _run(probe, name, mode, _expected(name, CASES[name](targets), mode))
    if mode == "accept_edits":
        # edits of paths outside the workspace are no "accept edits" business: they would
        # ask, but the tool's precheck refuses them first (nobody is asked)
        outside = [
            tool
            for tool, _, expect in CASES[name](targets)
            if tool in EDIT_TOOLS and isinstance(expect, Exact) and expect.text.startswith("Path ")
        ]
        assert reply["asked"] == []
        assert [tool for (tool, by, _, _) in reply["decisions"] if by == PRECHECK] == outside


@pytest.mark.parametrize("backend", ["rg", "python"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", list(GREP_CASES))
def test_grep_cannot_reach_outside(probe: Probe, targets: Targets, name: str, mode: str, backend: str) -> None:
    _run(probe, f"{name}-{backend}", mode, GREP_CASES[name](targets), ripgrep=None if backend == "rg" else False)


def test_the_hard_link_is_the_outside_file(targets: Targets) -> None:
    """The hard-link attempts are meaningful: the link and the outside file are one inode."""
    world = targets.world
    assert (world.ws / "hard-link.txt").stat().st_ino == world.victim.stat().st_ino
    assert world.victim.stat().st_nlink == 2


# --- protected paths: an approved edit, then the command it would turn into code -------------

FSMONITOR = "[core]\n\tfsmonitor = touch {outside}/ran\n"


def _protected_cases(t: Targets) -> dict[str, list[Call]]:
    ran = os.path.join(t.outside, "ran")
    hook = f"#!/bin/sh\ntouch {ran}\n"
    commit = "chmod +x .git/hooks/pre-commit; git -c user.name=a -c user.email=a@b commit -q --allow-empty -m x"
    config = FSMONITOR.format(outside=t.outside)
    return {
        "write-git-config-then-git-status": [
            ("read", {"path": ".git/config"}, StartsWith(False, "     1\t[core]")),
            ("write", {"path": ".git/config", "content": config}, Exact(False, f"Overwrote .git/config ({len(config)} bytes, 2 lines).")),
            ("bash", {"command": "git status"}, Ran()),
        ],
        "edit-git-config-then-git-diff": [
            ("read", {"path": ".git/config"}, StartsWith(False, "     1\t[core]")),
            (
                "edit",
                {"path": ".git/config", "old_string": "[core]\n", "new_string": f"[core]\n\tfsmonitor = touch {ran}\n"},
                StartsWith(False, "Edited .git/config: replaced 1 occurrence."),
            ),
            ("bash", {"command": "git status; git diff"}, Ran()),
        ],
        "write-git-hook-then-commit": [
            ("write", {"path": ".git/hooks/pre-commit", "content": hook}, Exact(False, f"Created .git/hooks/pre-commit ({len(hook)} bytes, 2 lines).")),
            ("bash", {"command": commit}, Ran()),
        ],
        "symlink-to-git-config-then-write": [
            ("bash", {"command": "ln -s .git/config cfg-link"}, Ran()),
            ("read", {"path": "cfg-link"}, Ran()),
            # a protected path reached through a symlink is refused even when approved (the
            # link may have been made after the engine's check); named as itself, it changes
            (
                "write",
                {"path": "cfg-link", "content": config},
                Exact(
                    True,
                    "Permission denied: cfg-link leads through a symlink to .git/config, which is asked about "
                    "before it changes; give .git/config itself.",
                ),
            ),
            ("write", {"path": ".git/config", "content": config}, Exact(False, f"Overwrote .git/config ({len(config)} bytes, 2 lines).")),
            ("bash", {"command": "git status"}, Ran()),
        ],
        "write-ketch-config": [
            ("read", {"path": ".ketch/config.toml"}, Exact(False, '     1\tmodel = "local"')),
            ("write", {"path": ".ketch/config.toml", "content": 'mode = "bypass"\n'}, Exact(False, "Overwrote .ketch/config.toml (16 bytes, 1 line).")),
        ],
        # the tools read "<root name>/x" as x of the root: so must the permission engine
        # (named so, it is refused even when approved: a "<root name>" folder made or removed
        # after the engine's check would change which file it names); named as itself, it changes
        "write-git-config-through-root-name": [
            ("read", {"path": f"{t.name}/.git/config"}, StartsWith(False, "     1\t[core]")),
            (
                "write",
                {"path": f"{t.name}/.git/config", "content": config},
                Exact(
                    True,
                    f"Permission denied: {t.name}/.git/config stands for .git/config by the workspace's folder "
                    "name, which is asked about before it changes; give .git/config itself.",
                ),
            ),
            ("write", {"path": ".git/config", "content": config}, Exact(False, f"Overwrote .git/config ({len(config)} bytes, 2 lines).")),
            ("bash", {"command": "git status"}, Ran()),
        ],
        # a symlink two levels down, then "..": the tools take ".." first, the kernel follows
        # the link first; the engine must judge the file the tool writes
        "write-git-config-through-symlink-dotdot": [
            ("bash", {"command": "mkdir -p d1/d2 && ln -s d1/d2 x"}, Ran()),
            ("read", {"path": "x/../.git/config"}, StartsWith(False, "     1\t[core]")),
            (
                "write",
                {"path": "x/../.git/config", "content": config},
                Exact(False, f"Overwrote .git/config ({len(config)} bytes, 2 lines)."),
            ),
            ("bash", {"command": "git status"}, Ran()),
        ],
    }


PROTECTED = [
    "write-git-config-then-git-status",
    "edit-git-config-then-git-diff",
    "write-git-hook-then-commit",
    "symlink-to-git-config-then-write",
    "write-ketch-config",
    "write-git-config-through-root-name",
    "write-git-config-through-symlink-dotdot",
]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", PROTECTED)
def test_an_approved_edit_of_a_protected_path_runs_no_code_outside(
    probe: Probe, targets: Targets, name: str, mode: str
) -> None:
    """The file tools write a protected path only when the user approves it (or in bypass
    mode; plan mode denies it); the code such an edit plants runs only in the sandbox."""
    calls = _expected(name, _protected_cases(targets)[name], mode)
    reply = _run(probe, name, mode, calls)
    # a write the tool refuses anyway (a protected path reached through a symlink or the
    # root's name) is refused by its precheck before anyone is asked
    refused = [args for tool, args, expect in calls if tool in EDIT_TOOLS and isinstance(expect, Exact) and expect.is_error]
    edits = [tool for tool, args, _ in calls if tool in EDIT_TOOLS and args not in refused]
    if mode in ("default", "accept_edits"):
        assert [tool for tool in reply["asked"] if tool in EDIT_TOOLS] == edits
        prechecked = [by for (tool, by, _, _) in reply["decisions"] if tool in EDIT_TOOLS and by == PRECHECK]
        assert len(prechecked) == len(refused)
    assert not os.path.lexists(os.path.join(targets.outside, "ran"))


# --- the search processes' environment --------------------------------------------------------

FAKE_RG = """#!/bin/sh
# Stands in for ripgrep: reports every variable of its environment as a match.
exec python3 -I -S -c '
import json, os
for name, value in sorted(os.environ.items()):
    line = name + "=" + value
    print(json.dumps({"type": "match", "data": {"path": {"text": "env"}, "line_number": 1, "lines": {"text": line}}}))
'
"""


@pytest.mark.parametrize("mode", MODES)
def test_the_grep_search_process_gets_no_key(probe: Probe, targets: Targets, mode: str) -> None:
    """The grep tool's child process (ripgrep, here a stand-in that prints its environment
    as matches) gets the scrubbed tool environment, not the agent's."""
    fake = targets.world.base / "fake-rg"
    fake.write_text(FAKE_RG)
    fake.chmod(0o755)
    targets.world.reset_baseline()
    reply = _run(probe, "grep-child-environment", mode, [("grep", {"pattern": "x"}, StartsWith(False, "env:1:"))], ripgrep=str(fake))
    assert "env:1:PATH=" in reply["results"][0][2]


# --- .git/commondir ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
def test_git_commondir_cannot_point_git_elsewhere(probe: Probe, targets: Targets, mode: str) -> None:
    """``.git/commondir`` would point git at another common directory, whose ``config``
    sets ``core.fsmonitor``: the user's next ``git status`` outside ketch would run it. It
    is protected: the sandbox keeps it from being created (its placeholder holds ``.``,
    so git inside works as before) and the write tool writes it only when approved."""
    ran = os.path.join(targets.base, "RAN")
    config = f"[core]\n\trepositoryformatversion = 0\n\tfsmonitor = touch {ran}\n"
    calls: list[Call] = [
        ("bash", {"command": "mkdir -p evil/objects evil/refs"}, Ran()),
        ("write", {"path": "evil/config", "content": config}, Ran()),
        ("bash", {"command": "echo ../evil > .git/commondir; git status --porcelain"}, Ran()),
    ]
    reply = _run(probe, "git-commondir", mode, _expected("git-commondir", calls, mode))
    status = reply["results"][2][2]
    if mode != "plan":
        # the write is refused, and git works with the placeholder in place
        lines = status.split("\n")
        assert lines[0] == f"{shutil.which('bash')}: line 1: .git/commondir: Read-only file system"
        assert "?? evil/" in lines[1:]
    assert not os.path.lexists(targets.world.ws / ".git" / "commondir")
    subprocess.run(["git", "status"], cwd=targets.world.ws, capture_output=True, check=False)
    assert not os.path.exists(ran)


@pytest.mark.parametrize("mode", ["default", "accept_edits"])
def test_the_write_tool_asks_before_writing_git_commondir(probe: Probe, targets: Targets, mode: str) -> None:
    reply = _run(probe, "write-git-commondir", mode, [("write", {"path": ".git/commondir", "content": ".\n"}, Ran())])
    assert reply["asked"] == ["write"]
