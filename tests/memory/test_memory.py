"""Long-term memory: the ``memory`` tool's commands, recall across sessions, and paths that
cannot leave the memory directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ketch import Agent
from ketch.llm import AbortSignal
from ketch.llm import ToolResultMessage
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.memory import MEMORY_INSTRUCTIONS
from ketch.memory import FileMemoryStore
from ketch.memory import Memory
from ketch.memory import MemoryEntry
from ketch.memory import MemoryStore
from ketch.memory import MemoryTool
from ketch.memory import scoped_memory_dir
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


async def run(tool: MemoryTool, **args: Any) -> ToolResult:
    return await tool.execute(args, ToolContext(call_id="m1", tool_name="memory", signal=AbortSignal()))


def tool_results(model: ScriptedModel, request: int) -> list[str]:
    return [
        "".join(b.text for b in m.content if hasattr(b, "text"))
        for m in model.requests[request].messages
        if isinstance(m, ToolResultMessage)
    ]


async def test_a_fact_saved_in_one_session_is_recalled_in_a_later_one(tmp_path: Path) -> None:
    folder = scoped_memory_dir(tmp_path, user="ada", project=tmp_path / "proj")
    first = ScriptedModel(
        [
            reply(tool_call("memory", {"command": "view", "path": "/memories"}, id="v1")),
            reply(
                tool_call(
                    "memory",
                    {"command": "create", "path": "/memories/user.md", "file_text": "Favourite colour: teal\n"},
                    id="c1",
                )
            ),
            "Noted.",
        ]
    )
    result = await Agent(first, system_prompt="Be brief.", capabilities=[Memory(folder)]).prompt("I like teal.")
    assert result.end_reason == "stop"
    assert first.requests[0].system_prompt == "Be brief.\n\n" + MEMORY_INSTRUCTIONS
    assert first.requests[0].tool_names == ["memory"]
    assert tool_results(first, 2) == ["/memories is empty", "File created successfully at /memories/user.md"]

    # a later session: a new agent, a new store object on the same directory
    second = ScriptedModel(
        [
            reply(tool_call("memory", {"command": "view", "path": "/memories"}, id="v2")),
            reply(tool_call("memory", {"command": "view", "path": "/memories/user.md"}, id="v3")),
            "Teal.",
        ]
    )
    result = await Agent(second, capabilities=[Memory(folder)]).prompt("What colour do I like?")
    assert result.end_reason == "stop"
    assert tool_results(second, 2) == [
        "/memories:\n/memories/user.md (23 bytes)",
        "/memories/user.md:\n     1\tFavourite colour: teal",
    ]
    # another project of the same user does not see it
    assert scoped_memory_dir(tmp_path, user="ada", project=tmp_path / "other") != folder
    assert scoped_memory_dir(tmp_path, user="bob", project=tmp_path / "proj") != folder


async def test_each_command_does_what_the_contract_says(tmp_path: Path) -> None:
    tool = MemoryTool(FileMemoryStore(tmp_path / "m"))
    assert (await run(tool, command="create", path="/memories/a/notes.md", file_text="one\ntwo\nthree\n")).text == (
        "File created successfully at /memories/a/notes.md"
    )
    assert (await run(tool, command="view", path="/memories/a/notes.md", view_range=[2, -1])).text == (
        "/memories/a/notes.md:\n     2\ttwo\n     3\tthree"
    )
    assert (await run(tool, command="str_replace", path="/memories/a/notes.md", old_str="two", new_str="2")).text == (
        "Edited /memories/a/notes.md"
    )
    r = await run(tool, command="str_replace", path="/memories/a/notes.md", old_str="zzz", new_str="y")
    assert (r.is_error, r.text) == (True, "Error: old_str does not occur in /memories/a/notes.md; nothing was replaced")
    assert (await run(tool, command="insert", path="/memories/a/notes.md", insert_line=0, insert_text="zero")).text == (
        "Inserted text after line 0 of /memories/a/notes.md"
    )
    r = await run(tool, command="insert", path="/memories/a/notes.md", insert_line=9, insert_text="x")
    assert r.text == "Error: insert_line 9 is outside /memories/a/notes.md; allowed: 0 to 4"
    assert (tmp_path / "m/a/notes.md").read_text() == "zero\none\n2\nthree\n"
    assert (await run(tool, command="rename", old_path="/memories/a", new_path="/memories/b/c")).text == (
        "Renamed /memories/a to /memories/b/c"
    )
    assert (await run(tool, command="view", path="/memories/")).text == "/memories:\n/memories/b/"
    r = await run(tool, command="rename", old_path="/memories/b", new_path="/memories/b/c/d")
    assert r.text == "Error: cannot move /memories/b into itself"
    assert (await run(tool, command="delete", path="/memories/b")).text == "Deleted /memories/b"
    assert (await run(tool, command="view", path="/memories")).text == "/memories is empty"
    r = await run(tool, command="view", path="/memories/gone.md")
    assert (r.is_error, r.text) == (True, "Error: /memories/gone.md does not exist")
    r = await run(tool, command="delete", path="/memories")
    assert r.text == "Error: /memories itself cannot be deleted"
    r = await run(tool, command="create", path="/memories/x")
    assert r.text == "Error: file_text is required (a string) for the create command"


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("/memories/../secret", "invalid memory path '/memories/../secret': empty, '.' and '..' components are not allowed"),
        ("/memories/a/../../x", "invalid memory path '/memories/a/../../x': empty, '.' and '..' components are not allowed"),
        ("/etc/passwd", "invalid memory path '/etc/passwd': memory paths start with /memories/"),
        ("/memoriesX/a", "invalid memory path '/memoriesX/a': memory paths start with /memories/"),
        ("memories/a", "invalid memory path 'memories/a': memory paths start with /memories/"),
        ("/memories//a", "invalid memory path '/memories//a': empty, '.' and '..' components are not allowed"),
        ("/memories/a\\..\\b", "invalid memory path '/memories/a\\\\..\\\\b': NUL and backslash are not allowed"),
    ],
)
async def test_a_path_outside_the_memory_directory_is_refused(tmp_path: Path, path: str, message: str) -> None:
    (tmp_path / "secret").write_text("s3cret")
    tool = MemoryTool(FileMemoryStore(tmp_path / "m"))
    for args in (
        {"command": "view", "path": path},
        {"command": "create", "path": path, "file_text": "x"},
        {"command": "delete", "path": path},
        {"command": "rename", "old_path": "/memories/ok", "new_path": path},
    ):
        r = await run(tool, **args)
        assert (r.is_error, r.text) == (True, f"Error: {message}")
    assert sorted(os.listdir(tmp_path)) == ["secret"]  # nothing written, not even the folder
    assert (tmp_path / "secret").read_text() == "s3cret"


async def test_a_symbolic_link_in_the_memory_directory_is_never_followed(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("s3cret")
    root = tmp_path / "m"
    root.mkdir()
    os.symlink(outside, root / "dir")
    os.symlink(outside / "secret.md", root / "file.md")
    tool = MemoryTool(FileMemoryStore(root))
    results = [
        await run(tool, command="view", path="/memories/file.md"),
        await run(tool, command="view", path="/memories/dir/secret.md"),
        await run(tool, command="view", path="/memories/dir"),
        await run(tool, command="create", path="/memories/dir/new.md", file_text="x"),
        await run(tool, command="str_replace", path="/memories/file.md", old_str="s3cret", new_str="gone"),
        await run(tool, command="rename", old_path="/memories/dir/secret.md", new_path="/memories/stolen.md"),
    ]
    assert [r.text for r in results] == [
        "Error: /memories/file.md is a symbolic link, not a memory file",
        "Error: /memories/dir is a symbolic link; /memories/dir/secret.md cannot be used",
        "Error: /memories/dir is a symbolic link, not a memory file",
        "Error: /memories/dir is a symbolic link; /memories/dir/new.md cannot be used",
        "Error: /memories/file.md is a symbolic link, not a memory file",
        "Error: /memories/dir is a symbolic link; /memories/dir/secret.md cannot be used",
    ]
    # the listing leaves links out; writing over a link replaces the link, not its target
    assert (await run(tool, command="view", path="/memories")).text == "/memories is empty"
    assert (await run(tool, command="create", path="/memories/file.md", file_text="mine")).text.startswith("File created")
    assert (await run(tool, command="delete", path="/memories/dir")).text == "Deleted /memories/dir"
    assert sorted(os.listdir(outside)) == ["secret.md"]
    assert (outside / "secret.md").read_text() == "s3cret"
    assert (root / "file.md").read_text() == "mine" and not (root / "file.md").is_symlink()


async def test_a_store_of_your_own_plugs_in() -> None:
    class DictStore:
        def __init__(self) -> None:
            self.files: dict[str, str] = {}

        async def kind(self, path: str) -> str | None:
            if path in self.files:
                return "file"
            return "dir" if not path or any(p.startswith(path + "/") for p in self.files) else None

        async def entries(self, path: str) -> list[MemoryEntry]:
            return [MemoryEntry(p, False, len(t)) for p, t in sorted(self.files.items())]

        async def read(self, path: str) -> str:
            return self.files[path]

        async def write(self, path: str, text: str) -> None:
            self.files[path] = text

        async def delete(self, path: str) -> None:
            del self.files[path]

        async def rename(self, old: str, new: str) -> None:
            self.files[new] = self.files.pop(old)

    store = DictStore()
    assert isinstance(store, MemoryStore)
    model = ScriptedModel(
        [reply(tool_call("memory", {"command": "create", "path": "/memories/k", "file_text": "v"})), "ok"]
    )
    await Agent(model, capabilities=[Memory(store, instructions=None)]).prompt("remember")
    assert store.files == {"k": "v"}
    assert model.requests[0].system_prompt == ""


def test_a_user_name_that_is_not_a_plain_name_is_refused(tmp_path: Path) -> None:
    for user in ("..", "a/b", "", ".hidden"):
        with pytest.raises(ValueError, match=r"^memory user .*: use 1-64 letters, digits"):
            scoped_memory_dir(tmp_path, user=user)
    assert scoped_memory_dir(tmp_path, user="ada") == tmp_path / "ada" / "global"
