"""Nothing of a ``ketch`` run is left in the temporary folder once it has exited, also when
a hangup ends it at once (``os._exit``): the bash tool's output logs, their scratch
folder, the sandbox's empty placeholder file, its control groups."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _poll(condition: Callable[[], bool]) -> bool:
    """Wait for ``condition`` (bounded, about a minute; never a fixed wait)."""
    for _ in range(6000):
        if condition():
            return True
        time.sleep(0.01)
    return condition()


def _ketch(tmp_path: Path, command: str) -> tuple[subprocess.Popen[str], Path]:
    tmp, home, work = tmp_path / "tmp", tmp_path / "home", tmp_path / "work"
    for folder in (tmp, home, work):
        folder.mkdir()
    script = home / "script.json"
    call = {"type": "tool_call", "id": "b1", "name": "bash", "args": {"command": command, "timeout": 300}}
    script.write_text(json.dumps([{"blocks": [call]}, "done"]))
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / ".config"),
        "PYTHONPATH": SRC,
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
    }
    argv = [sys.executable, "-m", "ketch", "run", "--no-session", "--permission-mode", "bypass"]
    proc = subprocess.Popen(
        [*argv, "--model", f"scripted:{script}", "go"],
        cwd=work,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    return proc, tmp


def _logs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("ketch-*/bash-*.log"))


def _groups() -> list[str]:
    found = []
    for root in ("/sys/fs/cgroup", "/sys/fs/cgroup/pids", "/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified"):
        for folder, dirs, _ in os.walk(root):
            found += [os.path.join(folder, d) for d in dirs if d.startswith("ketch-")]
    return found


def test_a_hangup_leaves_no_log_behind(tmp_path: Path) -> None:
    proc, tmp = _ketch(tmp_path, "seq 1 200000; touch ready; sleep 300")
    try:
        assert _poll(lambda: (tmp_path / "work" / "ready").exists() and bool(_logs(tmp))), "the log was never written"
        logs = _logs(tmp)
        proc.send_signal(signal.SIGHUP)
        proc.communicate(timeout=60)
        assert proc.returncode == 129
    finally:
        proc.kill()
        proc.communicate()
    assert not any(log.exists() for log in logs)
    assert sorted(p.name for p in tmp.iterdir()) == []
    assert [g for g in _groups() if f"ketch-{proc.pid}-" in g] == []


def test_a_normal_exit_leaves_nothing_behind(tmp_path: Path) -> None:
    proc, tmp = _ketch(tmp_path, "seq 1 200000")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    assert sorted(p.name for p in tmp.iterdir()) == []
    assert [g for g in _groups() if f"ketch-{proc.pid}-" in g] == []
