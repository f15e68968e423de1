"""The local provider's tests without llama-cpp-python: the module skips, quickly."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MODULE = Path(__file__).with_name("test_local.py")


def test_local_provider_tests_skip_without_llama_cpp(tmp_path: Path) -> None:
    # A llama_cpp package that cannot be imported hides the installed one.
    fake = tmp_path / "llama_cpp"
    fake.mkdir()
    (fake / "__init__.py").write_text('raise ImportError("llama-cpp-python is not installed")\n')
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(tmp_path), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "-p", "no:randomly", str(MODULE)],
        cwd=MODULE.parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # The whole module is skipped at collection: pytest reports no test run, none failed.
    assert proc.returncode == pytest.ExitCode.NO_TESTS_COLLECTED, proc.stdout + proc.stderr
    assert "SKIPPED [1] tests/providers/test_local.py:" in proc.stdout
    assert proc.stdout.rstrip().endswith(": needs llama-cpp-python")
    assert "FAILED" not in proc.stdout and "ERROR" not in proc.stdout
