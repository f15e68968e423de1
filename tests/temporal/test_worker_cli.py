"""``ketch worker``: bad input is a one-line error with exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SRC = str(Path(__file__).resolve().parents[2] / "src")


def _worker(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=SRC)
    return subprocess.run(
        [sys.executable, "-m", "ketch", "worker", *args], env=env, capture_output=True, text=True, timeout=60
    )


def test_app_must_be_module_colon_attr() -> None:
    out = _worker("--task-queue", "q", "--app", "nope")
    assert (out.returncode, out.stderr) == (2, "ketch worker: --app must be module:attr, got 'nope'\n")


def test_an_app_module_that_does_not_exist() -> None:
    out = _worker("--task-queue", "q", "--app", "no_such_module_xyz:app")
    assert out.returncode == 2
    assert out.stderr.startswith("ketch worker: --app 'no_such_module_xyz:app': cannot import 'no_such_module_xyz'")
    assert out.stderr.count("\n") == 1


def test_the_default_agent_needs_a_model() -> None:
    out = _worker("--task-queue", "q")
    assert (out.returncode, out.stderr) == (
        2, "ketch worker: --model is required without --app (e.g. -m anthropic:claude-sonnet-4-5)\n"
    )


def test_the_task_queue_is_required() -> None:
    out = _worker()
    assert out.returncode == 2
    assert "--task-queue" in out.stderr
