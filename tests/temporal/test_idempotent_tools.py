"""The built-in write and edit tools skip a call repeated with the same idempotency key."""

from __future__ import annotations

from pathlib import Path

import pytest

from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.tools import coding_tools


@pytest.fixture(autouse=True)
def journal(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("KETCH_IDEMPOTENCY_DIR", str(tmp_path / "journal"))
    return tmp_path / "journal"


def _ctx(key: str | None, name: str) -> ToolContext[None]:
    return ToolContext(call_id="c1", tool_name=name, signal=AbortSignal(), idempotency_key=key)


def _tools(root: Path) -> dict[str, object]:
    return {t.name: t for t in coding_tools(root)}


async def test_edit_repeated_with_the_same_key_returns_the_first_result_and_edits_once(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.txt").write_text("x = 1\n")
    tools = _tools(work)
    await tools["read"].execute({"path": "a.txt"}, _ctx(None, "read"))  # type: ignore[attr-defined]
    args = {"path": "a.txt", "old_string": "x = 1", "new_string": "x = 2"}
    first = await tools["edit"].execute(args, _ctx("wf/call_1", "edit"))  # type: ignore[attr-defined]
    # the same call again (its worker died before the result was recorded)
    again = await tools["edit"].execute(args, _ctx("wf/call_1", "edit"))  # type: ignore[attr-defined]
    assert not first.is_error
    assert (again.text, again.is_error) == (first.text, False)
    assert (work / "a.txt").read_text() == "x = 2\n"
    # without a key (in-process) a repeat is an ordinary second call
    plain = await tools["edit"].execute(args, _ctx(None, "edit"))  # type: ignore[attr-defined]
    assert plain.is_error
    assert plain.text.startswith("Could not find old_string in a.txt.")


async def test_write_repeated_with_the_same_key_does_not_overwrite_a_later_change(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    tools = _tools(work)
    args = {"path": "b.txt", "content": "first\n"}
    first = await tools["write"].execute(args, _ctx("wf/call_2", "write"))  # type: ignore[attr-defined]
    (work / "b.txt").write_text("changed later\n")
    again = await tools["write"].execute(args, _ctx("wf/call_2", "write"))  # type: ignore[attr-defined]
    assert again.text == first.text == "Created b.txt (6 bytes, 1 line)."
    assert (work / "b.txt").read_text() == "changed later\n"


async def test_a_failed_call_is_not_recorded(tmp_path: Path) -> None:
    work = tmp_path / "work"
    work.mkdir()
    args = {"path": "missing.txt", "old_string": "a", "new_string": "b"}
    tools = _tools(work)
    failed = await tools["edit"].execute(args, _ctx("wf/call_4", "edit"))  # type: ignore[attr-defined]
    assert failed.is_error
    (work / "missing.txt").write_text("a\n")
    await tools["read"].execute({"path": "missing.txt"}, _ctx(None, "read"))  # type: ignore[attr-defined]
    retried = await tools["edit"].execute(args, _ctx("wf/call_4", "edit"))  # type: ignore[attr-defined]
    assert not retried.is_error
    assert (work / "missing.txt").read_text() == "b\n"


def test_importing_ketch_does_not_import_temporalio() -> None:
    import subprocess
    import sys

    code = "import sys, ketch, ketch.loop, ketch.tools; print('temporalio' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
