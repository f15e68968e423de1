"""Fixtures of the security suite: a ketch stand-in process holding fake keys (running
bash calls, or whole agent runs with the file tools and the permission engine), a
workspace with a git repository and protected files, targets outside it, and a tally of
attempts, escapes and leaked keys printed at the end of the run."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Callable
from collections.abc import Iterator
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import pytest

from ketch.sandbox import protected_path
from unprivileged import User

RUNNER = Path(__file__).with_name("runner.py")

FAKE_KEYS = {
    "OPENAI_API_KEY": "sk-test-openai-5f1c0e9a7b",
    "ANTHROPIC_API_KEY": "sk-ant-test-0b7d33c1e2",
    "GITHUB_PAT": "sk-test-ghpat-41aa9c",
    "HF_TOKEN": "sk-test-hftoken-93d1",
    "APP_SECRET": "sk-test-appsecret-77e0",
    "DB_PASSWORD": "sk-test-dbpassword-1f2e",
    "MYLAB_CRED": "sk-test-mylab-custom-8c4d",
    "DATABASE_URL": "postgres://admin:sk-test-dburlpw-5a6b@db.example/app",
}
"""Put in the stand-in process's initial environment. ``MYLAB_CRED`` plays a configured
provider's ``api_key_env``: its name looks like no secret, so only ``secret_names`` hides it."""

SECRET_VALUES = [v for k, v in FAKE_KEYS.items() if k != "DATABASE_URL"] + ["sk-test-dburlpw-5a6b"]
PROVIDER_KEY_NAMES = ["MYLAB_CRED"]
PROBE_NAME = "ketch-escape-probe"


CLASSES = ("escape", "kernel", "dos")
"""The classes of attempts: getting out of the workspace or at the keys (``escape``),
reaching the kernel (its settings, keyrings, modules, namespaces: ``kernel``), and
taking the host's processes, memory, CPU or disk (``dos``)."""


@dataclass
class Tally:
    attempts: int = 0
    escapes: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    dos: list[str] = field(default_factory=list)
    by_class: dict[str, list[int]] = field(default_factory=lambda: {c: [0, 0, 0, 0] for c in CLASSES})

    def count(self, kind: str, *, escaped: bool = False, leaked: bool = False, denied_service: bool = False) -> None:
        """One attempt of class ``kind`` and what it achieved."""
        self.attempts += 1
        row = self.by_class[kind]
        row[0] += 1
        row[1] += escaped
        row[2] += leaked
        row[3] += denied_service


TALLY = Tally()


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if TALLY.attempts:
        terminalreporter.write_line(
            f"security suite: {TALLY.attempts} attempts, {len(TALLY.escapes)} escapes, "
            f"{len(TALLY.leaks)} keys leaked, {len(TALLY.dos)} denials of service"
        )
        for kind, (attempts, escapes, leaks, dos) in TALLY.by_class.items():
            if attempts:
                terminalreporter.write_line(
                    f"  {kind}: {attempts} attempts, {escapes} escapes, {leaks} leaks, {dos} denials of service"
                )
        for name in TALLY.escapes:
            terminalreporter.write_line(f"  ESCAPE: {name}")
        for name in TALLY.leaks:
            terminalreporter.write_line(f"  KEY LEAKED: {name}")
        for name in TALLY.dos:
            terminalreporter.write_line(f"  DENIAL OF SERVICE: {name}")


class Runner:
    """The ketch stand-in: a process with the fake keys in its environment running bash calls."""

    def __init__(self, user: User | None = None) -> None:
        env = {k: v for k, v in os.environ.items() if k not in FAKE_KEYS}
        env.update(FAKE_KEYS)
        src = str(Path(__file__).resolve().parents[2] / "src")
        env["PYTHONPATH"] = src + os.pathsep + env.get("PYTHONPATH", "")
        argv = [sys.executable, str(RUNNER)]
        if user is not None:  # the stand-in as an unprivileged user
            env = user.env(env)
            argv = user.argv(user.python, str(RUNNER))
        self.user = user
        self.proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
            cwd="/",
        )
        hello = self._read()
        self.pid: int = hello["pid"]
        self.reason: str | None = hello["reason"]

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the runner died (exit status {self.proc.wait()})")
        result: dict[str, Any] = json.loads(line)
        return result

    def run(self, command: str, workspace: Path, *, write: bool, network: bool = False, **extra: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        request = {
            "command": command,
            "workspace": str(workspace),
            "write": write,
            "network": network,
            "secret_names": PROVIDER_KEY_NAMES,
            **extra,
        }
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def run_agent(
        self, workspace: Path, mode: str, calls: list[tuple[str, dict[str, Any]]], **extra: Any
    ) -> dict[str, Any]:
        """One agent run in the stand-in (see runner.py): ``calls`` made one per turn in
        permission ``mode``, every question answered yes."""
        assert self.proc.stdin is not None
        request = {
            "agent": {"mode": mode, "calls": calls, **extra},
            "workspace": str(workspace),
            "secret_names": PROVIDER_KEY_NAMES,
        }
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def alive(self) -> bool:
        return self.proc.poll() is None

    def close(self) -> None:
        if self.proc.stdin is not None:
            self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture(scope="session")
def runner() -> Iterator[Runner]:
    r = Runner()
    if r.reason is not None:
        r.close()
        pytest.fail(f"the security suite needs a working sandbox: {r.reason}")
    yield r
    r.close()


def _snapshot(root: Path) -> dict[str, Any]:
    """Every entry under ``root`` (symlinks not followed): kind, content or target, mode."""
    if not root.exists() and not root.is_symlink():
        return {}
    state: dict[str, Any] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath, name)
            rel = str(path.relative_to(root))
            st = path.lstat()
            if path.is_symlink():
                state[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                state[rel] = ("dir", st.st_mode)
            elif stat.S_ISREG(st.st_mode):
                state[rel] = ("file", path.read_bytes(), st.st_mode, st.st_ino)
            else:
                state[rel] = ("other", st.st_mode, st.st_ino)
    return state


def _visible_base() -> Path:
    """A directory outside /tmp (which the sandbox hides), so targets stay visible inside."""
    for candidate in (os.environ.get("XDG_CACHE_HOME"), str(Path.home() / ".cache"), os.getcwd()):
        if not candidate:
            continue
        try:
            Path(candidate).mkdir(parents=True, exist_ok=True)
            return Path(tempfile.mkdtemp(prefix="ketch-security-", dir=candidate))
        except OSError:
            continue
    raise RuntimeError("no writable directory outside /tmp for the security suite")


class World:
    """A workspace (a git repository with ``.ketch/config.toml``) and targets outside it."""

    def __init__(self, base: Path, hidden: Path) -> None:
        self.base = base
        self.ws = base / "ws"
        self.outside = base / "outside"
        self.hidden = hidden
        self.ws.mkdir()
        self.outside.mkdir()
        self.hidden.mkdir()
        (self.outside / "victim.txt").write_text("original\n")
        (self.hidden / "victim.txt").write_text("original\n")
        subprocess.run(["git", "init", "-q", str(self.ws)], check=True)
        for sub in (".git/modules/lib", ".git/modules/lib/modules/inner"):
            (self.ws / sub / "hooks").mkdir(parents=True)
            (self.ws / sub / "config").write_text("[core]\n\tbare = false\n")
        (self.ws / ".ketch").mkdir()
        (self.ws / ".ketch" / "config.toml").write_text('model = "local"\n')
        (self.ws / "src").mkdir()
        (self.ws / "src" / "a.txt").write_text("workspace file\n")
        (self.ws / "link-file").symlink_to(self.outside / "victim.txt")
        (self.ws / "link-dir").symlink_to(self.outside)
        self.elsewhere = [
            Path("/") / PROBE_NAME,
            Path("/etc") / PROBE_NAME,
            Path.home() / PROBE_NAME,
            self.base / PROBE_NAME,
        ]
        self.before = self.state()

    @property
    def victim(self) -> Path:
        return self.outside / "victim.txt"

    def protected_state(self) -> dict[str, Any]:
        git = _snapshot(self.ws / ".git")
        return {
            "config": git.get("config"),
            "commondir": git.get("commondir"),
            "hooks": {k: v for k, v in git.items() if k.startswith("hooks")},
            "modules": {k: v for k, v in git.items() if k.startswith("modules") and ("config" in k or "hooks" in k)},
            "ketch": _snapshot(self.ws / ".ketch") if (self.ws / ".ketch").is_dir() else None,
            "ketch_exists": (self.ws / ".ketch").exists() or (self.ws / ".ketch").is_symlink(),
            "git_is_dir": (self.ws / ".git").is_dir(),
        }

    def state(self) -> dict[str, Any]:
        return {
            "outside": _snapshot(self.outside),
            "hidden": _snapshot(self.hidden),
            "elsewhere": [p for p in self.elsewhere if os.path.lexists(p)],
            "protected": self.protected_state(),
            "workspace": _snapshot(self.ws),
        }

    def reset_baseline(self) -> None:
        self.before = self.state()

    def changes(self, write: bool) -> list[str]:
        """What changed that no command may change (the workspace counts in plan mode)."""
        after = self.state()
        keys = ["outside", "hidden", "elsewhere", "protected"] + ([] if write else ["workspace"])
        return [k for k in keys if after[k] != self.before[k]]

    def cleanup(self) -> None:
        for p in self.elsewhere:
            if os.path.lexists(p):
                os.unlink(p)
        shutil.rmtree(self.base, ignore_errors=True)


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(_visible_base(), tmp_path / "hidden-outside")
    yield w
    w.cleanup()


@dataclass
class Probe:
    runner: Runner
    world: World

    def attempt(
        self, name: str, command: str, *, write: bool, network: bool = False, kind: str = "escape", **extra: Any
    ) -> dict[str, Any]:
        """Run one attempt of class ``kind``; record and assert that nothing escaped or leaked."""
        w = self.world
        command = (
            command.replace("{victim}", str(w.victim))
            .replace("{outside}", str(w.outside))
            .replace("{hidden}", str(w.hidden))
            .replace("{pid}", str(self.runner.pid))
            .replace("{probe}", PROBE_NAME)
        )
        reply = self.runner.run(command, w.ws, write=write, network=network, **extra)
        label = f"{name} [{'write' if write else 'plan'}]"
        changed = w.changes(write)
        if not self.runner.alive():
            changed.append("the ketch process was killed")
        leaked = [v for v in SECRET_VALUES if v in reply["text"]]
        TALLY.count(kind, escaped=bool(changed), leaked=bool(leaked))
        if changed:
            TALLY.escapes.append(f"{label}: {', '.join(changed)}")
        if leaked:
            TALLY.leaks.append(label)
        assert reply["sandboxed"] is True
        assert not changed, f"{label} changed {changed}; output:\n{reply['text']}"
        assert not leaked, f"{label} leaked a key; output:\n{reply['text']}"
        return reply


    def agent_attempt(self, name: str, mode: str, calls: list[tuple[str, dict[str, Any]]], **extra: Any) -> dict[str, Any]:
        """Run one escape attempt as an agent run in permission ``mode``; record and assert
        that nothing escaped or leaked.

        An escape is a change outside the workspace, of the workspace in ``plan`` mode, or
        of a protected path (``.git/config``, ``.git/hooks``, ``.ketch``, …) unless a
        ``write`` or ``edit`` of a protected path was approved: by the user (the
        approver), or by ``bypass`` mode, which allows everything by design. A leak is a
        key in any tool result or event."""
        w = self.world
        reply = self.runner.run_agent(w.ws, mode, calls, **extra)
        label = f"{name} [{mode}]"
        changed = w.changes(mode != "plan")
        approved = any(
            tool in ("write", "edit")
            and protected_path(w.ws, os.path.expanduser(str(args.get("path", "")))) is not None
            and outcome == "allow"
            and by in ("user", "mode bypass")
            for (tool, args), (_, by, outcome, _) in zip(calls, reply["decisions"], strict=True)
        )
        if approved and "protected" in changed:
            changed.remove("protected")
        if not self.runner.alive():
            changed.append("the ketch process was killed")
        seen = reply["events"] + "".join(text for _, _, text in reply["results"])
        leaked = [v for v in SECRET_VALUES if v in seen]
        TALLY.count("escape", escaped=bool(changed), leaked=bool(leaked))
        if changed:
            TALLY.escapes.append(f"{label}: {', '.join(changed)}")
        if leaked:
            TALLY.leaks.append(label)
        assert reply["sandboxed"] is True
        assert not changed, f"{label} changed {changed}; results:\n{reply['results']}"
        assert not leaked, f"{label} leaked a key; results:\n{reply['results']}"
        return reply


    def dos_attempt(
        self, name: str, command: str, held: Callable[[dict[str, Any]], list[str]], *, write: bool, **extra: Any
    ) -> dict[str, Any]:
        """Run one attempt on the host's resources; ``held`` names the bounds the reply
        shows were not held (none: the command was bounded). The ketch process must live
        and still run a command afterwards. Recorded, and asserted."""
        reply = self.runner.run(command, self.world.ws, write=write, **extra)
        label = f"{name} [{'write' if write else 'plan'}]"
        failed = held(reply)
        after = self.runner.run("echo alive", self.world.ws, write=False) if self.runner.alive() else None
        if after is None or after["text"] != "alive":
            failed.append("the ketch process no longer runs commands")
        TALLY.count("dos", denied_service=bool(failed))
        if failed:
            TALLY.dos.append(f"{label}: {', '.join(failed)}")
        assert reply["sandboxed"] is True
        assert not failed, f"{label}: {failed}; output:\n{reply['text'][-3000:]}"
        return reply


@pytest.fixture
def probe(runner: Runner, world: World) -> Probe:
    return Probe(runner, world)
