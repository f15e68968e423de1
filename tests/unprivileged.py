"""Running test programs as an unprivileged user (import as ``from unprivileged import ...``).

CI runs the suite as root, where the sandbox behaves differently (root's commands run as
nobody or as the workspace's owner, cgroups are writable): the tests that must also hold
for an ordinary user run ketch as one. When the suite runs as root, that user is
``ketch-test`` (made with ``useradd`` when missing) and programs are started through
``setpriv``; otherwise it is the user running the suite. The user needs a Python it can
run with ketch's dependencies: this one, or the system's Python of the same version with
this environment's ``site-packages`` on ``PYTHONPATH``.
"""

from __future__ import annotations

import functools
import os
import pwd
import shutil
import site
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = str(Path(__file__).resolve().parents[1] / "src")
NAME = "ketch-test"


@dataclass(frozen=True)
class User:
    """An unprivileged user: its ids, and how to start a Python program as it."""

    uid: int
    gid: int
    python: str
    pythonpath: str

    def argv(self, *argv: str) -> list[str]:
        """``argv`` run as this user (through ``setpriv`` when this process is root)."""
        if os.geteuid() != 0:
            return list(argv)
        setpriv = shutil.which("setpriv") or "setpriv"
        return [setpriv, f"--reuid={self.uid}", f"--regid={self.gid}", "--clear-groups", "--", *argv]

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """An environment for its Python programs: ketch and its dependencies importable."""
        env = dict(os.environ if base is None else base)
        env["PYTHONPATH"] = self.pythonpath + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        return env

    def folder(self, prefix: str) -> Path:
        """A new folder it owns, outside any folder it could not search (remove it after)."""
        path = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp")).resolve()
        os.chown(path, self.uid, self.gid)
        return path

    def own(self, path: Path) -> None:
        """Give it ``path`` and everything below."""
        for folder, dirs, files in os.walk(path):
            for name in [*dirs, *files]:
                os.lchown(os.path.join(folder, name), self.uid, self.gid)
        os.lchown(path, self.uid, self.gid)


def _ensure_user() -> tuple[int, int]:
    try:
        entry = pwd.getpwnam(NAME)
    except KeyError:
        useradd = shutil.which("useradd") or "/usr/sbin/useradd"
        done = subprocess.run(
            [useradd, "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", NAME],
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0 and "already exists" not in done.stderr:
            pytest.fail(f"could not make the test user {NAME}: {done.stderr.strip()}")
        entry = pwd.getpwnam(NAME)
    return entry.pw_uid, entry.pw_gid


@functools.cache
def unprivileged_user() -> User:
    """The unprivileged user of the tests (see the module docstring); fails the test
    when there is none that can run ketch."""
    uid, gid = (os.getuid(), os.getgid()) if os.geteuid() != 0 else _ensure_user()
    paths = [SRC, *site.getsitepackages()]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    candidates = [os.path.realpath(sys.executable), f"/usr/bin/python{version}", f"/usr/local/bin/python{version}"]
    # it must also find itself (a program it starts may start it again: the grep worker)
    probe = "import os, sys, msgspec, aiohttp, ketch.sandbox; os.stat(sys.executable); print('ok')"
    tried: list[str] = []
    for python in dict.fromkeys(candidates):
        if not os.path.isfile(python):
            continue
        user = User(uid, gid, python, os.pathsep.join(paths))
        done = subprocess.run(
            user.argv(python, "-c", probe), capture_output=True, text=True, env=user.env(), cwd="/", check=False
        )
        if done.stdout.strip() == "ok":
            return user
        tried.append(f"{python}: {(done.stderr.strip().splitlines() or ['?'])[-1]}")
    pytest.fail(f"no Python the user {uid} can run with ketch's dependencies: {'; '.join(tried)}")
