"""White-box test: imports ketch implementation modules (private) directly.

Workspace paths however a model writes them: ``.``, ``./``, the root's own folder name,
the root's absolute path and absolute paths inside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ketch.llm import AbortSignal
from ketch.loop import ToolContext
from ketch.tools import coding_tools
from ketch.tools._workspace import Workspace
from ketch.tools._workspace import WorkspaceError


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = tmp_path / "x" / "myproj"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "a.txt").write_text("a\n")
    (root / "notes.txt").write_text("n\n")
    return root.resolve()


@pytest.mark.parametrize("path", [".", "./", "myproj", "myproj/", "./myproj", "/myproj", "ROOT", "ROOT/"])
def test_spellings_of_the_root_resolve_to_it(root: Path, path: str) -> None:
    assert Workspace(root).resolve(path.replace("ROOT", str(root))) == root


@pytest.mark.parametrize(
    "path", ["sub", "./sub", "myproj/sub", "myproj/sub/", "/myproj/sub", "ROOT/sub", "myproj/./sub"]
)
def test_spellings_of_a_folder_inside_resolve_to_it(root: Path, path: str) -> None:
    assert Workspace(root).resolve(path.replace("ROOT", str(root))) == root / "sub"


def test_files_named_through_the_root_name_resolve_inside(root: Path) -> None:
    ws = Workspace(root)
    assert ws.resolve("myproj/sub/a.txt") == root / "sub" / "a.txt"
    assert ws.resolve("myproj/new.txt") == root / "new.txt"  # a file to be written


def test_a_real_entry_named_like_the_root_wins(root: Path) -> None:
    (root / "myproj").mkdir()
    ws = Workspace(root)
    assert ws.resolve("myproj") == root / "myproj"
    assert ws.resolve("myproj/sub") == root / "myproj" / "sub"


def test_the_root_name_does_not_open_a_way_out(root: Path) -> None:
    ws = Workspace(root)
    for path in ("myproj/../../escape", "/myproj/../../etc", "../myproj-other", "/x/elsewhere"):
        with pytest.raises(WorkspaceError, match="is outside the workspace"):
            ws.resolve(path)
    # An absolute path whose first folder exists is taken literally.
    with pytest.raises(WorkspaceError, match="is outside the workspace"):
        ws.resolve("/tmp")


async def test_ls_lists_the_root_for_every_spelling(root: Path) -> None:
    [ls] = [t for t in coding_tools(root) if t.name == "ls"]
    ctx = ToolContext(call_id="c1", tool_name="ls", signal=AbortSignal())
    for path in (".", "./", "myproj", str(root), "/myproj"):
        args: dict[str, Any] = {"path": path}
        result = await ls.execute(args, ctx)
        assert result.content[0].text == "notes.txt\nsub/", path  # type: ignore[union-attr]
