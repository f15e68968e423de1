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


class _Killed(BaseException):
    """The worker died here (raised by the fault hook, never caught by the tool)."""


def _die_before_the_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fault hook: the attempt dies after the file changed, before its result is recorded."""
    from ketch.tools import _idempotency

    def killed(ctx: object, result: object) -> None:
        raise _Killed

    monkeypatch.setattr(_idempotency, "remember", killed)


@pytest.mark.parametrize("existing", [False, True], ids=["new file", "overwrite"])
async def test_a_write_killed_between_the_change_and_its_record_answers_as_the_first_would_have(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, existing: bool
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    if existing:
        (work / "out.txt").write_text("old\n")
    args = {"path": "out.txt", "content": "new content\n"}
    first = _tools(work)
    if existing:
        await first["read"].execute({"path": "out.txt"}, _ctx(None, "read"))  # type: ignore[attr-defined]
    with monkeypatch.context() as m:
        _die_before_the_record(m)
        with pytest.raises(_Killed):
            await first["write"].execute(args, _ctx("wf/tok/1", "write"))  # type: ignore[attr-defined]
    assert (work / "out.txt").read_text() == "new content\n"  # the write happened
    # the retry runs in another process: a workspace that read nothing
    again = await _tools(work)["write"].execute(args, _ctx("wf/tok/1", "write"))  # type: ignore[attr-defined]
    verb = "Overwrote" if existing else "Created"
    assert (again.text, again.is_error) == (f"{verb} out.txt (12 bytes, 1 line).", False)
    assert (work / "out.txt").read_text() == "new content\n"
    # and the answer is now recorded: a third attempt gives it too, even after a later change
    (work / "out.txt").write_text("changed later\n")
    third = await _tools(work)["write"].execute(args, _ctx("wf/tok/1", "write"))  # type: ignore[attr-defined]
    assert third.text == again.text
    assert (work / "out.txt").read_text() == "changed later\n"


async def test_an_edit_killed_between_the_change_and_its_record_answers_as_the_first_would_have(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    (work / "a.py").write_text("x = 1\ny = 2\n")
    args = {"path": "a.py", "old_string": "x = 1", "new_string": "x = 3"}
    first = _tools(work)
    await first["read"].execute({"path": "a.py"}, _ctx(None, "read"))  # type: ignore[attr-defined]
    # what an uninterrupted edit answers (on a copy)
    (tmp_path / "copy").mkdir()
    (tmp_path / "copy" / "a.py").write_text("x = 1\ny = 2\n")
    twin = _tools(tmp_path / "copy")
    await twin["read"].execute({"path": "a.py"}, _ctx(None, "read"))  # type: ignore[attr-defined]
    expected = await twin["edit"].execute(args, _ctx(None, "edit"))  # type: ignore[attr-defined]
    with monkeypatch.context() as m:
        _die_before_the_record(m)
        with pytest.raises(_Killed):
            await first["edit"].execute(args, _ctx("wf/tok/2", "edit"))  # type: ignore[attr-defined]
    again = await _tools(work)["edit"].execute(args, _ctx("wf/tok/2", "edit"))  # type: ignore[attr-defined]
    assert (again.text, again.is_error) == (expected.text, False)
    assert (work / "a.py").read_text() == "x = 3\ny = 2\n"


async def test_a_write_killed_before_the_change_runs_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ketch.tools._write as write_module

    work = tmp_path / "work"
    work.mkdir()
    args = {"path": "late.txt", "content": "finally\n"}

    def dying(f: object, data: bytes) -> None:
        raise _Killed  # the worker dies after recording its intent, before writing

    with monkeypatch.context() as m:
        m.setattr(write_module, "_write", dying)
        with pytest.raises(_Killed):
            await _tools(work)["write"].execute(args, _ctx("wf/tok/3", "write"))  # type: ignore[attr-defined]
    assert (work / "late.txt").read_text() == ""  # created, never written: the intent does not match it
    (work / "late.txt").unlink()
    again = await _tools(work)["write"].execute(args, _ctx("wf/tok/3", "write"))  # type: ignore[attr-defined]
    assert again.text == "Created late.txt (8 bytes, 1 line)."
    assert (work / "late.txt").read_text() == "finally\n"


async def test_the_journal_can_live_in_a_session_store(tmp_path: Path) -> None:
    from ketch.sessions import JsonlStore
    from ketch.tools import StoreJournal
    from ketch.tools import use_journal

    store = JsonlStore(tmp_path / "sessions")
    use_journal(StoreJournal(store))
    try:
        work = tmp_path / "work"
        work.mkdir()
        args = {"path": "s.txt", "content": "stored\n"}
        first = await _tools(work)["write"].execute(args, _ctx("wf/tok/4", "write"))  # type: ignore[attr-defined]
        (work / "s.txt").write_text("changed later\n")
        again = await _tools(work)["write"].execute(args, _ctx("wf/tok/4", "write"))  # type: ignore[attr-defined]
        assert again.text == first.text == "Created s.txt (7 bytes, 1 line)."
        assert (work / "s.txt").read_text() == "changed later\n"
        assert not (tmp_path / "journal").exists()  # nothing went to the folder journal
    finally:
        use_journal(None)


def test_the_journal_warning_names_the_machine_local_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    import tempfile

    from ketch.tools import journal_warning

    monkeypatch.delenv("KETCH_IDEMPOTENCY_DIR")
    warning = journal_warning()
    assert warning is not None and warning.startswith(
        f"the write and edit tools keep their exactly-once records in {tempfile.gettempdir()}/ketch-idempotency, "
        "on this machine only"
    )
    monkeypatch.setenv("KETCH_IDEMPOTENCY_DIR", "/shared/journal")
    assert journal_warning() is None
