"""White-box test: imports ketch implementation modules (private) directly.

grep (ripgrep and the Python fallback give the same output), find and ls."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import pytest

from ketch.llm import AbortSignal
from ketch.loop import Tool
from ketch.loop import ToolContext
from ketch.loop import ToolResult
from ketch.tools import LsTool
from ketch.tools import Workspace
from ketch.tools._search import FindTool
from ketch.tools._search import GrepTool
from ketch.tools._search import glob_to_regex

RG = shutil.which("rg")


def _rg() -> str:
    """The ripgrep program; the suite needs it (``bash scripts/test.sh`` installs it), so a
    missing ``rg`` fails the test instead of skipping it."""
    if RG is None:
        pytest.fail("ripgrep (rg) is not on PATH: run `bash scripts/test.sh`, which installs it", pytrace=False)
    return RG


async def _run(tool: Tool, **args: Any) -> ToolResult:
    result = await tool.execute(args, ToolContext(call_id="c", tool_name=tool.name, signal=AbortSignal()))
    assert isinstance(result, ToolResult)
    return result


def _put(root: Path, name: str, data: str | bytes) -> Path:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    return path


@pytest.fixture
def root(tmp_path: Path) -> Path:
    root = (tmp_path / "proj").resolve()
    _put(root, "src/app.py", "import os\n\ndef main():\n    return run()\n\ndef run():\n    return 0\n")
    _put(root, "src/util.py", "def helper():\n    return 'Main'\n")
    _put(root, "README.md", "# Project\nRun main to start.\n")
    _put(root, ".github/ci.yml", "run: main\n")
    _put(root, "node_modules/dep/index.js", "main()\n")
    _put(root, ".venv/lib/site.py", "main = 1\n")
    _put(root, ".git/config", "main\n")
    _put(root, "data.bin", b"main\x00\x01\x02")
    return root


def _backends() -> list[Any]:
    return [
        pytest.param(False, id="python"),
        pytest.param("rg", id="rg"),
    ]


@pytest.fixture(params=_backends())
def grep(request: pytest.FixtureRequest, root: Path) -> GrepTool:
    return GrepTool(Workspace(root), ripgrep=_rg() if request.param == "rg" else False)


# --- grep ----------------------------------------------------------------------------


async def test_grep_prints_path_line_text_in_path_order(grep: GrepTool) -> None:
    result = await _run(grep, pattern="main")
    assert not result.is_error
    assert result.text == (
        ".github/ci.yml:1:run: main\n"
        "README.md:2:Run main to start.\n"
        "src/app.py:3:def main():"
    )
    assert result.details["matches"] == 3
    assert result.details["truncated"] is False


async def test_grep_regex_and_ignore_case(grep: GrepTool) -> None:
    result = await _run(grep, pattern=r"^def \w+\(\):", ignore_case=False)
    assert result.text == "src/app.py:3:def main():\nsrc/app.py:6:def run():\nsrc/util.py:1:def helper():"
    folded = await _run(grep, pattern="'main'", ignore_case=True)
    assert folded.text == "src/util.py:2:    return 'Main'"


async def test_grep_literal_pattern(grep: GrepTool) -> None:
    result = await _run(grep, pattern="main()", literal=True)
    assert result.text == "src/app.py:3:def main():"
    unbalanced = await _run(grep, pattern="run(", literal=True)
    assert unbalanced.text == "src/app.py:4:    return run()\nsrc/app.py:6:def run():"


async def test_grep_glob_filter(grep: GrepTool) -> None:
    assert (await _run(grep, pattern="main", glob="*.md")).text == "README.md:2:Run main to start."
    nested = await _run(grep, pattern="return", glob="src/u*.py")
    assert nested.text == "src/util.py:2:    return 'Main'"


async def test_grep_in_a_folder_or_a_single_file(grep: GrepTool) -> None:
    assert (await _run(grep, pattern="return", path="src")).text == (
        "src/app.py:4:    return run()\nsrc/app.py:7:    return 0\nsrc/util.py:2:    return 'Main'"
    )
    assert (await _run(grep, pattern="return", path="src/util.py")).text == "src/util.py:2:    return 'Main'"


async def test_grep_context_lines_and_group_separators(grep: GrepTool) -> None:
    result = await _run(grep, pattern="^def", path="src", context=1)
    assert result.text == (
        "src/app.py-2-\n"
        "src/app.py:3:def main():\n"
        "src/app.py-4-    return run()\n"
        "src/app.py-5-\n"
        "src/app.py:6:def run():\n"
        "src/app.py-7-    return 0\n"
        "--\n"
        "src/util.py:1:def helper():\n"
        "src/util.py-2-    return 'Main'"
    )
    assert result.details["matches"] == 3


async def test_grep_max_results_with_a_note(grep: GrepTool) -> None:
    result = await _run(grep, pattern="return", max_results=2)
    assert result.text == (
        "src/app.py:4:    return run()\n"
        "src/app.py:7:    return 0\n\n"
        "[Showing the first 2 matching lines; there are more. Use a more specific pattern, path or glob, "
        "or raise max_results.]"
    )
    assert result.details["truncated"] is True


async def test_grep_no_match_is_not_an_error(grep: GrepTool) -> None:
    result = await _run(grep, pattern="nowhere_to_be_found")
    assert not result.is_error
    assert result.text == "No matches for 'nowhere_to_be_found' in .."
    scoped = await _run(grep, pattern="zzz", path="src", glob="*.py")
    assert scoped.text == "No matches for 'zzz' in src (files matching '*.py')."


async def test_grep_cuts_long_lines(grep: GrepTool, root: Path) -> None:
    _put(root, "wide/long.txt", "needle " + "x" * 600 + "\n")
    result = await _run(grep, pattern="needle", path="wide")
    assert result.text == "wide/long.txt:1:needle " + "x" * 493 + " [... line cut]"


async def test_grep_crlf_lines_are_shown_without_cr(grep: GrepTool, root: Path) -> None:
    _put(root, "win/w.txt", "alpha\r\nbeta\r\n")
    result = await _run(grep, pattern="beta$", path="win")
    assert result.text == "win/w.txt:2:beta"


async def test_grep_skips_ignored_folders_and_binary_files(grep: GrepTool) -> None:
    text = (await _run(grep, pattern="main")).text
    for skipped in ("node_modules", ".venv", ".git/", "data.bin"):
        assert skipped not in text


async def test_grep_errors(grep: GrepTool) -> None:
    assert (await _run(grep, pattern="")).text == "pattern is empty. Give a regular expression to search for."
    assert (await _run(grep, pattern="x", path="missing")).text == "Path not found: missing"
    bad = await _run(grep, pattern="(unclosed")
    assert bad.is_error


async def test_python_fallback_regex_error_message(root: Path) -> None:
    result = await _run(GrepTool(Workspace(root), ripgrep=False), pattern="(unclosed")
    assert result.is_error
    assert result.text == "Invalid regular expression '(unclosed': missing ), unterminated subpattern at position 0."
    assert result.details is None


async def test_ripgrep_is_used_from_path_when_present(root: Path) -> None:
    _rg()
    result = await _run(GrepTool(Workspace(root)), pattern="helper")
    assert result.details["backend"] == "rg"


async def test_fallback_is_used_when_rg_is_not_on_path(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(root))
    result = await _run(GrepTool(Workspace(root)), pattern="helper")
    assert result.details["backend"] == "python"
    assert result.text == "src/util.py:1:def helper():"


# --- find ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("*.py", "a.py", True),
        ("*.py", "src/a.py", False),
        ("**/*.py", "a.py", True),
        ("**/*.py", "src/deep/a.py", True),
        ("src/**", "src/x/y.txt", True),
        ("src/*.py", "src/x/y.py", False),
        ("*.{js,ts}", "app.ts", True),
        ("*.{js,ts}", "app.py", False),
        ("test_[ab].py", "test_a.py", True),
        ("test_[!ab].py", "test_a.py", False),
        ("?.txt", "a.txt", True),
        ("*", ".hidden", True),
    ],
)
def test_glob_to_regex(pattern: str, path: str, matches: bool) -> None:
    assert bool(glob_to_regex(pattern).match(path)) is matches


async def test_find_recursive_pattern_sorted_by_path(root: Path) -> None:
    find = FindTool(Workspace(root))
    result = await _run(find, pattern="**/*.py")
    assert result.text == "src/app.py\nsrc/util.py"
    assert result.details == {"total": 2, "truncated": False}


async def test_find_plain_star_stays_in_the_folder(root: Path) -> None:
    find = FindTool(Workspace(root))
    assert (await _run(find, pattern="*.md")).text == "README.md"
    assert (await _run(find, pattern="*.py", path="src")).text == "src/app.py\nsrc/util.py"
    assert (await _run(find, pattern="*.py")).text == "No files match '*.py' in .."


async def test_find_skips_ignored_folders_unless_named(root: Path) -> None:
    find = FindTool(Workspace(root))
    assert (await _run(find, pattern="**/*.js")).text == "No files match '**/*.js' in .."
    assert (await _run(find, pattern="node_modules/**/*.js")).text == "node_modules/dep/index.js"
    assert (await _run(find, pattern="**/*.yml")).text == ".github/ci.yml"


async def test_find_sorted_by_mtime_newest_first(root: Path) -> None:
    for age, name in enumerate(["README.md", "src/util.py", "src/app.py"]):
        os.utime(root / name, (1_000_000 - age * 100, 1_000_000 - age * 100))
    find = FindTool(Workspace(root))
    result = await _run(find, pattern="**/*.{py,md}", sort="mtime")
    assert result.text == "README.md\nsrc/util.py\nsrc/app.py"


async def test_find_limit_with_a_note(root: Path) -> None:
    find = FindTool(Workspace(root))
    result = await _run(find, pattern="**/*", limit=2)
    assert result.text == (
        ".github/ci.yml\nREADME.md\n\n"
        "[Showing 2 of 5 files (sorted by path). Use a more specific pattern or path, or raise limit.]"
    )
    assert result.details == {"total": 5, "truncated": True}


async def test_find_errors(root: Path) -> None:
    find = FindTool(Workspace(root))
    assert (await _run(find, pattern="")).text == "pattern is empty. Give a glob such as '**/*.py'."
    assert (await _run(find, pattern="*", path="README.md")).text == "README.md is not a folder; give a folder to search."
    assert (await _run(find, pattern="*", path="nope")).text == "nope does not exist; give a folder to search."
    assert (await _run(find, pattern="*", sort="size")).text == "sort must be 'path' or 'mtime', got 'size'."


# --- ls ------------------------------------------------------------------------------


async def test_ls_lists_hidden_entries_and_marks_folders(root: Path) -> None:
    _put(root, "Zeta.txt", "z")
    ls = LsTool(Workspace(root))
    result = await _run(ls)
    assert result.text == ".git/\n.github/\n.venv/\ndata.bin\nnode_modules/\nREADME.md\nsrc/\nZeta.txt"
    assert result.details == {"path": str(root), "total": 8, "truncated": False}
    assert (await _run(ls, path="src")).text == "app.py\nutil.py"


async def test_ls_limit_with_a_note(root: Path) -> None:
    result = await _run(LsTool(Workspace(root)), limit=3)
    assert result.text == ".git/\n.github/\n.venv/\n\n[Showing 3 of 7 entries. Raise limit to see more.]"


async def test_ls_symlinked_folder_is_marked(root: Path) -> None:
    (root / "srclink").symlink_to(root / "src")
    assert "srclink/" in (await _run(LsTool(Workspace(root)))).text.split("\n")


async def test_ls_errors_and_empty_folder(root: Path) -> None:
    ls = LsTool(Workspace(root))
    (root / "empty").mkdir()
    assert (await _run(ls, path="empty")).text == "(empty folder)"
    missing = await _run(ls, path="nope")
    assert missing.is_error and missing.text == "Folder not found: nope"
    file = await _run(ls, path="README.md")
    assert file.is_error and file.text == "README.md is a file, not a folder. Use the read tool to read it."
