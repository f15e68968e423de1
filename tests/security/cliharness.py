"""Running the real ``ketch`` command against a hostile project, as root or as an
unprivileged user, with the user's model on a loopback endpoint that records what it
received (canaries in the requests) or a scripted model the test chooses (never the
project), and counting each attempt in the security suite's tally.

The folders live outside ``/tmp`` (which the sandbox hides, so a home there would hide
the user's key from bash whatever the rules), in a folder an unprivileged user can reach;
for the unprivileged runs the tree is handed to uid 65534 before each command and the
command runs under ``setpriv`` with a Python that user can execute.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import sys
import sysconfig
import tempfile
import threading
from dataclasses import dataclass
from dataclasses import field
from pathlib import Path
from typing import Any

import pytest

from .conftest import TALLY

REPO = Path(__file__).resolve().parents[2]
SRC = REPO / "src"
NOBODY = 65534
USERS = [pytest.param("root", id="root"), pytest.param("nobody", id="nobody")]

SSH_KEY = "-----BEGIN OPENSSH PRIVATE KEY----- canary-sshkey-4e1f9a -----END OPENSSH PRIVATE KEY-----"
ENV_KEY = "sk-canary-envkey-7c3d51b0e2"  # in ketch's own environment (what /proc/self/environ shows)
LITERAL_KEY = "sk-canary-literal-0a9f83c6d1"  # a literal api_key in the user's config
FAKE_KEY = "sk-canary-fakekey-5b2e77d4aa"  # the user's key for the loopback provider
CANARIES = (SSH_KEY.split()[4], ENV_KEY, LITERAL_KEY)


def _reachable(path: Path) -> bool:
    """Whether every folder above ``path`` (and it) may be searched by anybody."""
    for folder in (path, *path.parents):
        try:
            if not os.stat(folder).st_mode & stat.S_IXOTH:
                return False
        except OSError:
            return False
    return True


def _base() -> Path:
    """A new folder outside /tmp that an unprivileged user can reach."""
    for parent in (REPO / ".cache", Path("/home"), Path("/var/lib")):
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if _reachable(parent):
            base = Path(tempfile.mkdtemp(prefix="ketch-cli-", dir=parent))
            base.chmod(0o755)
            return base
    pytest.fail("no folder outside /tmp that an unprivileged user can reach")


def _python_for_nobody() -> str:
    """A Python of this version that uid 65534 can run (the virtualenv's may live in /root)."""
    v = sys.version_info
    for candidate in (sys.executable, os.path.realpath(sys.executable), f"/usr/bin/python{v.major}.{v.minor}"):
        if not os.path.isfile(candidate) or not _reachable(Path(candidate).parent):
            continue
        probe = subprocess.run(
            ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--", candidate, "-c",
             "import sys; print(sys.version_info[:2])"],
            capture_output=True, text=True, check=False,
        )
        if probe.returncode == 0 and probe.stdout.strip() == str((v.major, v.minor)):
            return candidate
    pytest.fail(f"no Python {v.major}.{v.minor} that uid {NOBODY} can run")


@dataclass
class Ketch:
    """A home (with ``~/.ssh/id_rsa``), a user config dir, a workspace (a git repository)
    and a folder outside it, under a base outside /tmp; ``user`` runs the command."""

    user: str
    base: Path = field(default_factory=_base)

    def __post_init__(self) -> None:
        self.home = self.base / "home"
        self.xdg = self.home / ".config"
        self.work = self.base / "work"
        self.outside = self.base / "outside"
        for d in (self.home, self.xdg / "ketch", self.work / ".git", self.outside):
            d.mkdir(parents=True)
        ssh = self.home / ".ssh"
        ssh.mkdir(mode=0o700)
        (ssh / "id_rsa").write_text(SSH_KEY + "\n")
        (ssh / "id_rsa").chmod(0o600)
        self.vars = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.xdg),
            "LANG": "C.UTF-8",
            "PYTHONIOENCODING": "utf-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "OPENAI_API_KEY": ENV_KEY,
            "FAKE_KEY": FAKE_KEY,
        }
        paths = [str(SRC)]
        if self.user == "root":
            self.argv = [sys.executable, "-m", "ketch"]
        else:
            python = _python_for_nobody()
            paths += dict.fromkeys(sysconfig.get_paths()[k] for k in ("purelib", "platlib"))
            self.argv = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--",
                         python, "-m", "ketch"]  # fmt: skip
        self.vars["PYTHONPATH"] = os.pathsep.join(paths)

    def user_config(self, text: str) -> Path:
        path = self.xdg / "ketch" / "config.toml"
        path.write_text(text)
        return path

    def use_fake(self, server: Any, extra: str = "") -> Path:
        """The user's model is ``fake:m`` on ``server`` (its key from ``FAKE_KEY``)."""
        server.good_key = FAKE_KEY
        return self.user_config(
            f'model = "fake:m"\n{extra}[providers.fake]\nbase_url = "{server.base_url}"\napi_key_env = "FAKE_KEY"\n'
        )

    def script(self, replies: list[Any]) -> str:
        """A model script the test chooses (in the home, outside the project)."""
        path = self.home / f"script-{len(list(self.home.glob('script-*')))}.json"
        path.write_text(json.dumps(replies))
        return str(path)

    def write(self, rel: str, text: str, root: Path | None = None) -> Path:
        path = (root or self.work) / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        return path

    def run(self, *args: str, cwd: Path | None = None, extra: dict[str, str] | None = None,
            timeout: float = 60) -> subprocess.CompletedProcess[str]:  # fmt: skip
        if self.user != "root":
            for dirpath, dirnames, filenames in os.walk(self.base):
                for name in (dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)):
                    os.lchown(name, NOBODY, NOBODY)
        return subprocess.run(
            [*self.argv, *args],
            cwd=cwd or self.work,
            env=dict(self.vars, **(extra or {})),
            input="",
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def cleanup(self) -> None:
        shutil.rmtree(self.base, ignore_errors=True)


def tool_results(stdout: str) -> list[tuple[str, bool, str]]:
    """``(tool name, is_error, text)`` of each tool call of a stream-json output."""
    out = []
    for line in stdout.splitlines():
        event = json.loads(line)
        if event.get("type") == "tool_execution_end":
            content = event["result"]["content"]
            out.append((event["tool_name"], event["is_error"], content[0]["text"] if content else ""))
    return out


def tally(label: str, *, escaped: list[str] = (), leaked: list[str] = ()) -> None:  # type: ignore[assignment]
    """Count one attempt of the suite; an escape or a leak is recorded (the test asserts too)."""
    TALLY.attempts += 1
    if escaped:
        TALLY.escapes.append(f"{label}: {', '.join(escaped)}")
    if leaked:
        TALLY.leaks.append(label)


class Listener:
    """A loopback TCP listener that counts the connections reaching it (and answers none)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.connections = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            self.connections += 1
            conn.close()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def close(self) -> int:
        """Stop listening; the number of connections that reached it (the backlog too)."""
        self._stop.set()
        self._thread.join()
        self.sock.setblocking(False)
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                break
            self.connections += 1
            conn.close()
        self.sock.close()
        return self.connections


def fake_server() -> Any:
    """The command tests' loopback OpenAI-compatible endpoint (tests/cli/clihelp.py)."""
    module = sys.modules.get("clihelp")
    if module is None:
        import importlib.util

        spec = importlib.util.spec_from_file_location("clihelp", REPO / "tests" / "cli" / "clihelp.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["clihelp"] = module
        spec.loader.exec_module(module)
    return module.FakeServer()
