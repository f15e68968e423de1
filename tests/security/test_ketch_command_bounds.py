"""The kernel and the host's resources through the ``ketch`` command itself: ``ketch run``
on a scripted model making bash calls, run as the suite's user (root in CI) and as an
unprivileged user, each in a workspace and a home it owns. The ``[sandbox.limits]`` of
the user's config bound the commands; an untrusted project may only make them stricter;
a long output's log is capped and gone once ketch has exited."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from unprivileged import SRC
from unprivileged import User
from unprivileged import unprivileged_user

FORK_BOMB = textwrap.dedent(
    """
    import os
    read, write = os.pipe()
    count = 0
    try:
        while count < 5000:
            if os.fork() == 0:
                os.close(write)
                os.read(read, 1)
                os._exit(0)
            count += 1
    except OSError as exc:
        print("refused:", exc.strerror)
    print("forked", count)
    os.close(write)
    raise SystemExit(1 if count < 5000 else 0)
    """
)


@dataclass
class Ketch:
    """``ketch`` run as ``user`` (None: the suite's user) in a home and workspace it owns."""

    user: User | None
    base: Path

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def work(self) -> Path:
        return self.base / "work"

    def user_config(self, text: str) -> None:
        path = self.home / ".config" / "ketch" / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self._own()

    def project_config(self, text: str) -> None:
        path = self.work / ".ketch" / "config.toml"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        self._own()

    def file(self, name: str, text: str) -> None:
        (self.work / name).write_text(text)
        self._own()

    def _own(self) -> None:
        if self.user is not None:
            self.user.own(self.base)

    def run(self, mode: str, *commands: str) -> tuple[list[tuple[str, bool, str]], subprocess.CompletedProcess[str]]:
        """``ketch run`` in permission ``mode`` making one bash call per command; the tool
        results (id, is_error, text) and the finished process."""
        replies: list[Any] = [
            {"blocks": [{"type": "tool_call", "id": f"b{i}", "name": "bash", "args": {"command": c, "timeout": 60}}]}
            for i, c in enumerate(commands, 1)
        ]
        script = self.home / "script.json"
        script.write_text(json.dumps([*replies, "done"]))
        self._own()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self.home),
            "XDG_CONFIG_HOME": str(self.home / ".config"),
            "PYTHONPATH": SRC,
            "LANG": "C.UTF-8",
        }
        argv = [sys.executable, "-m", "ketch", "run", "--no-session", "--permission-mode", mode]
        argv += ["-o", "stream-json", "--model", f"scripted:{script}", "go"]
        if self.user is not None:
            env = self.user.env(env)
            argv = self.user.argv(self.user.python, *argv[1:])
        done = subprocess.run(argv, cwd=self.work, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr
        results = []
        for line in done.stdout.splitlines():
            event = json.loads(line)
            if event.get("type") == "tool_execution_end":
                results.append((event["tool_call_id"], event["is_error"], event["result"]["content"][0]["text"]))
        return results, done


@pytest.fixture(params=["suite-user", "unprivileged"])
def ketch(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ketch]:
    user = None if request.param == "suite-user" else unprivileged_user()
    base = user.folder("ketch-command-") if user is not None else tmp_path.resolve()
    k = Ketch(user, base)
    k.home.mkdir()
    k.work.mkdir()
    subprocess.run(["git", "init", "-q", str(k.work)], check=True)
    k._own()
    yield k
    if user is not None:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("mode", ["plan", "accept_edits"])
def test_kernel_settings_stay_out_of_reach(ketch: Ketch, mode: str) -> None:
    before = Path("/proc/sys/kernel/core_pattern").read_text()
    results, _ = ketch.run(
        mode,
        'v=$(cat /proc/sys/kernel/core_pattern) && printf "%s\\n" "$v" > /proc/sys/kernel/core_pattern && echo WRITTEN',
        "python3 -c \"p = '/proc/sys/kernel/pid_max'; open(p, 'w').write(open(p).read())\" && echo WRITTEN",
        "cat /proc/keys /proc/timer_list 2>/dev/null | wc -c",
    )
    assert [(i, e) for i, e, _ in results] == [("b1", True), ("b2", True), ("b3", False)]
    assert not any("WRITTEN" in text for _, _, text in results)
    assert results[2][2] == "0"
    assert Path("/proc/sys/kernel/core_pattern").read_text() == before


def test_a_plan_mode_command_reads_no_private_file_and_adds_no_key(ketch: Ketch) -> None:
    ketch.file(
        "key.py",
        "import ctypes, platform\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "nr = {'x86_64': 248, 'aarch64': 217}[platform.machine()]\n"
        "print(libc.syscall(nr, b'user', b'ketch-command-key', b'v', 1, -4), ctypes.get_errno())\n",
    )
    results, _ = ketch.run("plan", "cat /etc/shadow", "python3 key.py")
    assert results[0][1] is True
    assert "Permission denied" in results[0][2]
    assert re.search(r"^root:", results[0][2], re.M) is None
    assert results[1][2] == "-1 1"  # EPERM


def test_the_configured_limits_bound_the_commands(ketch: Ketch) -> None:
    ketch.user_config('[sandbox.limits]\nprocesses = 48\nmemory = "256M"\ncpu_seconds = 1\nfile_size = "1M"\n')
    ketch.file("bomb.py", FORK_BOMB)
    results, _ = ketch.run(
        "accept_edits",
        "python3 bomb.py",
        "python3 -c 'x = [bytearray(16 << 20) for _ in range(64)]'",
        "while :; do :; done",
        "head -c 10M /dev/zero > big",
    )
    texts = [text for _, _, text in results]
    assert int(re.findall(r"forked (\d+)", texts[0])[0]) < 48
    assert texts[0].endswith("[stopped: the command reached the process limit (48)]")
    assert texts[1].endswith("[stopped: the command reached the memory limit (256 MiB)]")
    assert texts[2].endswith("[stopped: the command reached the CPU time limit (1 s)]")
    assert texts[3].endswith("[stopped: the command reached the file size limit (1 MiB)]")
    assert (ketch.work / "big").stat().st_size <= 1 << 20


def test_an_untrusted_project_may_only_make_the_limits_stricter(ketch: Ketch) -> None:
    ketch.user_config("[sandbox.limits]\nprocesses = 48\n")
    ketch.project_config("[sandbox.limits]\nprocesses = 0\nfile_size = \"1M\"\n")
    ketch.file("bomb.py", FORK_BOMB)
    results, done = ketch.run("accept_edits", "python3 bomb.py", "head -c 10M /dev/zero > big")
    assert results[0][2].endswith("[stopped: the command reached the process limit (48)]")
    assert results[1][2].endswith("[stopped: the command reached the file size limit (1 MiB)]")
    assert "sandbox.limits.processes = 0" in done.stderr


def test_a_huge_output_is_logged_capped_and_removed_at_exit(ketch: Ketch) -> None:
    results, done = ketch.run("plan", "head -c 200000000 /dev/zero | tr '\\0' x | fold -w 99; echo END")
    text = results[0][2]
    assert text.endswith("[output cut: the command wrote 192.7 MiB; its log keeps the first and the last 8 MiB (log limit 16 MiB)]")
    log = re.findall(r"saved to (\S+\.log)\]", text)
    assert log
    assert not os.path.exists(log[0])
    assert not os.path.exists(os.path.dirname(log[0]))
    assert len(done.stdout) < 40 << 20  # the streamed output stops at 16 MiB too
