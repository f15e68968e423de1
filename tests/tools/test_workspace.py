"""White-box test: imports ketch implementation modules (private) directly.

Workspace: path confinement (relative, .., absolute, symlinks, allowed roots), display,
the tool set built by coding_tools and each tool's concurrency declaration."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ketch.llm import AbortSignal
from ketch.llm import ToolResultMessage
from ketch.loop import Conversation
from ketch.loop import LoopConfig
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.loop import run_loop
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call
from ketch.tools import coding_tools
from ketch.tools._workspace import Workspace
from ketch.tools._workspace import WorkspaceError


def _ctx() -> ToolContext:
    return ToolContext(call_id="call-1", tool_name="t", signal=AbortSignal())


async def _run(tool: Tool, **args: Any) -> ToolResult:
    result = await tool.execute(args, _ctx())
    assert isinstance(result, ToolResult)
    return result


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    return root.resolve()


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    out = tmp_path / "outside"
    out.mkdir()
    (out / "secret.txt").write_text("top secret\n")
    return out.resolve()


def test_relative_and_absolute_paths_inside_resolve(root: Path) -> None:
    ws = Workspace(root)
    assert ws.resolve("a/b.txt") == root / "a" / "b.txt"
    assert ws.resolve(str(root / "c.txt")) == root / "c.txt"
    assert ws.resolve("a/../d.txt") == root / "d.txt"
    assert ws.resolve(".") == root


def test_dotdot_escape_is_rejected_naming_path_and_root(root: Path) -> None:
    ws = Workspace(root)
    with pytest.raises(WorkspaceError) as info:
        ws.resolve("../outside/secret.txt")
    assert str(info.value) == (
        f"Path '../outside/secret.txt' is outside the workspace: it resolves to "
        f"{root.parent}/outside/secret.txt. Access is limited to the workspace root {root}."
    )


def test_absolute_path_outside_is_rejected(root: Path) -> None:
    ws = Workspace(root)
    with pytest.raises(WorkspaceError) as info:
        ws.resolve("/etc/passwd")
    assert str(info.value) == (
        f"Path '/etc/passwd' is outside the workspace: it resolves to /etc/passwd. "
        f"Access is limited to the workspace root {root}."
    )


def test_prefix_sibling_is_not_inside(root: Path) -> None:
    sibling = root.parent / (root.name + "2")
    sibling.mkdir()
    with pytest.raises(WorkspaceError):
        Workspace(root).resolve(str(sibling / "x"))


def test_symlink_pointing_outside_is_rejected(root: Path, outside: Path) -> None:
    (root / "link").symlink_to(outside)
    (root / "filelink").symlink_to(outside / "secret.txt")
    ws = Workspace(root)
    with pytest.raises(WorkspaceError) as info:
        ws.resolve("link/secret.txt")
    assert str(info.value) == (
        f"Path 'link/secret.txt' is outside the workspace: it leads through a symlink to "
        f"{outside}/secret.txt. Access is limited to the workspace root {root}."
    )
    with pytest.raises(WorkspaceError, match="leads through a symlink"):
        ws.resolve("filelink")


def test_symlink_inside_the_root_is_followed(root: Path) -> None:
    (root / "real").mkdir()
    (root / "alias").symlink_to(root / "real")
    assert Workspace(root).resolve("alias/x.txt") == root / "real" / "x.txt"


def test_root_given_through_a_symlink_is_resolved(root: Path, tmp_path: Path) -> None:
    (tmp_path / "rootlink").symlink_to(root)
    ws = Workspace(tmp_path / "rootlink")
    assert ws.root == root
    assert ws.resolve("f.txt") == root / "f.txt"


def test_allowed_roots_extend_access_and_appear_in_errors(root: Path, outside: Path) -> None:
    ws = Workspace(root, allowed_roots=(outside,))
    assert ws.resolve(str(outside / "secret.txt")) == outside / "secret.txt"
    assert ws.roots == (root, outside)
    with pytest.raises(WorkspaceError) as info:
        ws.resolve("/etc/hosts")
    assert str(info.value).endswith(
        f"Access is limited to the workspace root {root} and the allowed roots {outside}."
    )


def test_home_is_expanded(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(root))
    assert Workspace(root).resolve("~/notes.md") == root / "notes.md"


def test_empty_and_nul_paths_are_rejected(root: Path) -> None:
    ws = Workspace(root)
    with pytest.raises(WorkspaceError) as info:
        ws.resolve("  ")
    assert str(info.value) == "The path is empty. Give a file or directory path."
    with pytest.raises(WorkspaceError) as info:
        ws.resolve("a\x00b")
    assert str(info.value) == "The path 'a\\x00b' contains a NUL character."


def test_display_is_relative_inside_and_absolute_outside(root: Path, outside: Path) -> None:
    ws = Workspace(root)
    assert ws.display(root / "a" / "b.txt") == "a/b.txt"
    assert ws.display(root) == "."
    assert ws.display(outside / "secret.txt") == f"{outside}/secret.txt"


@pytest.mark.parametrize(
    ("name", "args"),
    [
        ("read", {"path": "../outside/secret.txt"}),
        ("write", {"path": "../outside/new.txt", "content": "x"}),
        ("edit", {"path": "../outside/secret.txt", "old_string": "top", "new_string": "low"}),
        ("ls", {"path": "../outside"}),
        ("grep", {"pattern": "secret", "path": "../outside"}),
        ("find", {"pattern": "*", "path": "../outside"}),
        ("bash", {"command": "pwd", "cwd": "../outside"}),
    ],
)
async def test_every_tool_refuses_paths_outside(root: Path, outside: Path, name: str, args: dict[str, Any]) -> None:
    tools = {t.name: t for t in coding_tools(root)}
    result = await _run(tools[name], **args)
    assert result.is_error
    assert result.text.startswith(f"Path '{args.get('path', args.get('cwd'))}' is outside the workspace: it resolves to ")
    assert not (outside / "new.txt").exists()
    assert (outside / "secret.txt").read_text() == "top secret\n"


async def test_symlink_escape_is_refused_by_read_and_write(root: Path, outside: Path) -> None:
    (root / "link").symlink_to(outside)
    tools = {t.name: t for t in coding_tools(root)}
    read = await _run(tools["read"], path="link/secret.txt")
    assert read.is_error and "leads through a symlink" in read.text
    write = await _run(tools["write"], path="link/planted.txt", content="x")
    assert write.is_error and "leads through a symlink" in write.text
    assert not (outside / "planted.txt").exists()


def test_coding_tools_names_and_concurrency_declarations(root: Path) -> None:
    tools = coding_tools(root)
    assert [t.name for t in tools] == ["read", "write", "edit", "bash", "grep", "find", "ls"]
    by_name = {t.name: t for t in tools}
    for name in ("read", "grep", "find", "ls"):
        assert by_name[name].is_sequential({}) is False
    for name in ("write", "edit"):
        assert by_name[name].is_sequential({}) is True
    assert by_name["bash"].is_sequential({"command": "git status && ls -la"}) is False
    assert by_name["bash"].is_sequential({"command": "rm -rf build"}) is True
    assert by_name["bash"].is_sequential({"command": "cat a > b"}) is True
    # what permissions read: only the file readers declare themselves read-only
    assert [t.name for t in tools if t.is_read_only({})] == ["read", "grep", "find", "ls"]
    assert by_name["bash"].is_read_only({"command": "git status"}) is False


def test_coding_tools_read_only_leaves_out_mutating_tools(root: Path) -> None:
    assert [t.name for t in coding_tools(root, read_only=True)] == ["read", "grep", "find", "ls"]


def test_tool_specs_have_object_schemas_with_required_fields(root: Path) -> None:
    required = {t.name: t.spec.parameters.get("required", []) for t in coding_tools(root)}
    assert required == {
        "read": ["path"],
        "write": ["path", "content"],
        "edit": ["path", "old_string", "new_string"],
        "bash": ["command"],
        "grep": ["pattern"],
        "find": ["pattern"],
        "ls": [],
    }


async def test_tools_share_one_workspace_so_a_read_enables_an_edit(root: Path) -> None:
    (root / "f.txt").write_text("alpha\n")
    tools = {t.name: t for t in coding_tools(str(root), allowed_roots=())}
    assert (await _run(tools["edit"], path="f.txt", old_string="alpha", new_string="beta")).is_error
    assert not (await _run(tools["read"], path="f.txt")).is_error
    assert not (await _run(tools["edit"], path="f.txt", old_string="alpha", new_string="beta")).is_error
    assert (root / "f.txt").read_text() == "beta\n"


def test_coding_tools_accepts_an_existing_workspace(root: Path, outside: Path) -> None:
    ws = Workspace(root)
    coding_tools(ws, allowed_roots=[outside])
    assert ws.roots == (root, outside)


def test_scratch_dir_is_created_once_and_allowed(root: Path) -> None:
    ws = Workspace(root)
    scratch = ws.scratch_dir()
    try:
        assert scratch.is_dir()
        assert ws.scratch_dir() == scratch
        assert ws.resolve(str(scratch / "x.log")) == scratch / "x.log"
    finally:
        os.rmdir(scratch)


async def test_the_tools_work_through_the_loop(root: Path) -> None:
    (root / "f.txt").write_text("hello\n")
    model = ScriptedModel(
        [
            reply(tool_call("read", {"path": "f.txt"}), tool_call("ls", {})),
            # not beside ls: while a sandboxed command runs, absent protected paths
            # (.git, .ketch) exist as empty read-only placeholders (see the README)
            reply(tool_call("bash", {"command": "ls"})),
            reply(tool_call("edit", {"path": "f.txt", "old_string": "hello", "new_string": "bye"})),
            reply(tool_call("bash", {"command": "cat f.txt; exit 4"}), tool_call("read", {"path": "f.txt", "offset": 0})),
            "done",
        ]
    )
    context = Conversation(tools=coding_tools(root))
    await run_loop("go", context, LoopConfig(model=model)).result()
    results = [(m.text, m.is_error) for m in context.messages if isinstance(m, ToolResultMessage)]
    assert results[:3] == [("     1\thello", False), ("f.txt", False), ("f.txt", False)]
    assert results[3] == (
        "Edited f.txt: replaced 1 occurrence.\n\n--- a/f.txt\n+++ b/f.txt\n@@ -1 +1 @@\n-hello\n+bye",
        False,
    )
    assert results[4] == ("bye\n\n[Command exited with code 4.]", True)
    assert results[5][1] is True
    assert results[5][0].startswith('Validation failed for tool "read":\n  - offset: must be >= 1')
    assert (root / "f.txt").read_text() == "bye\n"
