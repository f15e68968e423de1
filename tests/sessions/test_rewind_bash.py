"""Rewind undoes what sandboxed bash commands did to the workspace: ``sed -i``, ``rm``,
``mv``, ``chmod``, new files and folders, binary content, byte for byte, also from a
session opened again (scripted model, the library API)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ketch import Agent
from ketch.sandbox import default_sandbox
from ketch.sandbox import sandbox_unavailable_reason
from ketch.sessions import JsonlStore
from ketch.sessions import RewindReport
from ketch.sessions import Session
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import coding_tools

pytestmark = pytest.mark.usefixtures("scratch_in_tmp_path")

FILES: dict[str, tuple[bytes, int]] = {
    "conf.ini": (b"[main]\r\nname = one\r\nno newline at the end", 0o640),
    "run.sh": (b"#!/bin/sh\necho one\n", 0o755),
    "data/blob.bin": (bytes(range(256)) * 64, 0o600),
    "data/old name.txt": (b"\xef\xbb\xbfmoved away\n", 0o644),
    "gone/only.txt": (b"the only file of its folder\n", 0o644),
    "tool.py": (b"print('only its mode changes')\n", 0o644),
}

COMMANDS = [
    "sed -i 's/one/ONE/g' conf.ini run.sh",
    "rm data/blob.bin && rm -r gone",
    "mv 'data/old name.txt' renamed.txt",
    "chmod 600 run.sh && chmod +x conf.ini tool.py",
    "mkdir -p made/deep && printf 'new\\0bytes' > made/deep/new.bin && head -c 5000 /dev/urandom > data/random.bin",
]


def _state(root: Path) -> dict[str, tuple[bytes, int]]:
    found: dict[str, tuple[bytes, int]] = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d != ".ketch-scratch"]
        for name in files:
            path = Path(folder, name)
            found[path.relative_to(root).as_posix()] = (path.read_bytes(), path.stat().st_mode & 0o7777)
    return found


def _names(root: Path) -> list[str]:
    return sorted(p.name for p in root.iterdir())


@pytest.fixture
def work(tmp_path: Path) -> Path:
    root = (tmp_path / "work").resolve()
    for rel, (data, mode) in FILES.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(mode)
    return root


@pytest.mark.parametrize("reopen", [False, True], ids=["same-session", "reopened"])
async def test_rewind_restores_what_bash_changed_byte_for_byte(work: Path, tmp_path: Path, reopen: bool) -> None:
    sandbox = default_sandbox()
    if sandbox is None:
        pytest.fail(f"this test needs a working sandbox: {sandbox_unavailable_reason()}")
    before = _state(work)
    store = JsonlStore(tmp_path / "sessions")
    session = await Session.create(store, cwd=work)
    script = ["nothing yet", *(reply(tool_call("bash", {"command": c}, id=f"b{i}")) for i, c in enumerate(COMMANDS)), "done"]
    agent = Agent(ScriptedModel(script), tools=coding_tools(work, sandbox=sandbox), session=session)
    await agent.prompt("look")
    mark = session.message_ids[-1]
    await agent.prompt("change things with bash")
    assert [m.is_error for m in agent.messages if m.role == "tool_result"] == [False] * len(COMMANDS)  # type: ignore[attr-defined]
    changed = _state(work)
    assert changed["conf.ini"] == (b"[main]\r\nname = ONE\r\nno newline at the end", 0o751)
    assert changed["run.sh"] == (b"#!/bin/sh\necho ONE\n", 0o600)
    assert changed["tool.py"][1] == 0o755
    assert "data/blob.bin" not in changed and "gone/only.txt" not in changed
    assert changed["renamed.txt"] == FILES["data/old name.txt"]
    if reopen:
        await session.close()
        session = await Session.open(store, session.id)
    report = await session.rewind(mark)
    assert report == RewindReport(
        restored=["conf.ini", "data/blob.bin", "data/old name.txt", "gone/only.txt", "run.sh", "tool.py"],
        deleted=["data/random.bin", "made/deep/new.bin", "renamed.txt"],
    )
    assert _state(work) == before
    assert _names(work) == ["conf.ini", "data", "gone", "made", "run.sh", "tool.py"]  # folders are kept
    await session.close()


async def test_a_file_changed_after_bash_changed_it_is_a_conflict_left_alone(work: Path, tmp_path: Path) -> None:
    store = JsonlStore(tmp_path / "sessions")
    session = await Session.create(store, cwd=work)
    script = ["ok", reply(tool_call("bash", {"command": "sed -i 's/one/TWO/' run.sh && chmod 700 run.sh"}, id="b")), "done"]
    agent = Agent(ScriptedModel(script), tools=coding_tools(work, sandbox=default_sandbox()), session=session)
    await agent.prompt("start")
    mark = session.message_ids[-1]
    await agent.prompt("change")
    (work / "run.sh").write_bytes(b"the user's version\n")
    assert await session.rewind(mark) == RewindReport(conflicts=["run.sh"])
    assert (work / "run.sh").read_bytes() == b"the user's version\n"
    await session.close()
