"""Project instructions (AGENTS.md) for the ketch command: where they are read from,
their order, @path imports (depth, cycles, confinement), trust, and the system prompt."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from clihelp import Env
from clihelp import Terminal

from ketch.cli._config import Settings
from ketch.cli._factory import build_agent
from ketch.cli._instructions import HEADER
from ketch.cli._instructions import MAX_FILE_BYTES
from ketch.cli._instructions import MAX_IMPORT_DEPTH
from ketch.cli._instructions import load_instructions
from ketch.testing import ScriptedModel


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path, dict[str, str]]:
    """A home with a user config dir, and a git project with a nested working directory."""
    home = tmp_path / "home"
    (home / ".config" / "ketch").mkdir(parents=True)
    project = tmp_path / "project"
    (project / ".git").mkdir(parents=True)
    cwd = project / "pkg" / "sub"
    cwd.mkdir(parents=True)
    return project, cwd, {"HOME": str(home), "XDG_CONFIG_HOME": str(home / ".config")}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def labels(cwd: Path, env: dict[str, str]) -> list[tuple[str, str]]:
    return [(f.label, f.origin) for f in load_instructions(cwd, environ=env).files]


def test_user_then_root_then_each_directory_down_to_the_cwd(layout: tuple[Path, Path, dict[str, str]]) -> None:
    project, cwd, env = layout
    home = Path(env["HOME"])
    write(home / ".config" / "ketch" / "AGENTS.md", "user rules")
    write(project / "AGENTS.md", "root rules")
    write(project / "CLAUDE.md", "not read: AGENTS.md wins in its directory")
    write(project / "pkg" / "CLAUDE.md", "pkg rules (fallback name)")
    write(cwd / "AGENTS.md", "sub rules")
    write(project.parent / "AGENTS.md", "above the project root: not read")
    found = load_instructions(cwd, environ=env)
    assert [(f.label, f.origin) for f in found.files] == [
        ("~/.config/ketch/AGENTS.md", "user"),
        ("AGENTS.md", "project"),
        ("pkg/CLAUDE.md", "project"),
        ("pkg/sub/AGENTS.md", "project"),
    ]
    assert found.text == "\n\n".join([
        HEADER,
        "## ~/.config/ketch/AGENTS.md\n\nuser rules",
        "## AGENTS.md\n\nroot rules",
        "## pkg/CLAUDE.md\n\npkg rules (fallback name)",
        "## pkg/sub/AGENTS.md\n\nsub rules",
    ])
    assert found.notes == []
    # The same files give the same text: the system prompt is stable from run to run.
    assert load_instructions(cwd, environ=env).text == found.text


def test_imports_follow_the_importing_file_in_order_once_each(layout: tuple[Path, Path, dict[str, str]]) -> None:
    project, cwd, env = layout
    write(project / "AGENTS.md", "See @docs/style.md and @docs/testing.md.\nMail me@example.com, ping @alice.\n"
          "`@docs/ignored.md` in code\n```\n@docs/ignored.md\n```\n")
    write(project / "docs" / "style.md", "style: @testing.md")
    write(project / "docs" / "testing.md", "testing rules")
    write(project / "docs" / "ignored.md", "never")
    assert labels(cwd, env) == [
        ("AGENTS.md", "project"), ("docs/style.md", "import"), ("docs/testing.md", "import"),
    ]


def test_an_import_cycle_is_reported_and_each_file_included_once(layout: tuple[Path, Path, dict[str, str]]) -> None:
    project, cwd, env = layout
    write(project / "AGENTS.md", "@a.md")
    write(project / "a.md", "a imports @b.md")
    write(project / "b.md", "b imports @a.md")
    found = load_instructions(cwd, environ=env)
    assert [f.label for f in found.files] == ["AGENTS.md", "a.md", "b.md"]
    assert found.notes == [
        f"import cycle: {project / 'a.md'} imports itself (through {project / 'AGENTS.md'} -> {project / 'a.md'} -> "
        f"{project / 'b.md'})"
    ]


def test_imports_nest_only_so_deep(layout: tuple[Path, Path, dict[str, str]]) -> None:
    project, cwd, env = layout
    write(project / "AGENTS.md", "@d1.md")
    for i in range(1, MAX_IMPORT_DEPTH + 2):
        write(project / f"d{i}.md", f"@d{i + 1}.md")
    found = load_instructions(cwd, environ=env)
    assert [f.label for f in found.files] == ["AGENTS.md", *[f"d{i}.md" for i in range(1, MAX_IMPORT_DEPTH + 1)]]
    assert found.notes == [
        f"{project / f'd{MAX_IMPORT_DEPTH}.md'}: import @d{MAX_IMPORT_DEPTH + 1}.md skipped: imports nest deeper than "
        f"{MAX_IMPORT_DEPTH}"
    ]


def test_a_projects_imports_stay_inside_it(layout: tuple[Path, Path, dict[str, str]]) -> None:
    project, cwd, env = layout
    home = Path(env["HOME"])
    secret = write(home / ".ssh" / "id_rsa", "PRIVATE KEY")
    write(project / "escape.md", "x")
    os.symlink(secret, project / "link.md")
    write(project / "AGENTS.md", "@~/.ssh/id_rsa @../home/.ssh/id_rsa @link.md @escape.md")
    found = load_instructions(cwd, environ=env)
    assert [f.label for f in found.files] == ["AGENTS.md", "escape.md"]
    assert "PRIVATE KEY" not in found.text
    why = "it is outside the project (a project's instructions may import only its own files)"
    assert found.notes == [
        f"{project / 'AGENTS.md'}: import @{target} skipped: {why}"
        for target in ("~/.ssh/id_rsa", "../home/.ssh/id_rsa", "link.md")
    ]


def test_the_users_file_may_import_from_anywhere(layout: tuple[Path, Path, dict[str, str]]) -> None:
    _, cwd, env = layout
    home = Path(env["HOME"])
    write(home / "notes" / "shared.md", "shared")
    write(home / ".config" / "ketch" / "AGENTS.md", "@~/notes/shared.md")
    assert labels(cwd, env) == [("~/.config/ketch/AGENTS.md", "user"), ("~/notes/shared.md", "import")]


def test_a_long_file_is_cut_and_reported(layout: tuple[Path, Path, dict[str, str]]) -> None:
    project, cwd, env = layout
    path = write(project / "AGENTS.md", "x" * (MAX_FILE_BYTES + 10))
    found = load_instructions(cwd, environ=env)
    assert len(found.files[0].text) == MAX_FILE_BYTES
    assert found.notes == [f"{path} is longer than {MAX_FILE_BYTES} bytes; the rest was left out"]


def test_no_files_no_change_to_the_system_prompt(layout: tuple[Path, Path, dict[str, str]]) -> None:
    _, cwd, env = layout
    found = load_instructions(cwd, environ=env)
    assert found.files == [] and found.system_prompt("base") == "base"
    assert found.describe()[0].startswith("no instruction files")


async def test_the_agent_sends_the_instructions_as_the_last_system_block(layout: tuple[Path, Path, dict[str, str]]) -> None:
    project, cwd, env = layout
    write(project / "AGENTS.md", "Run make test before committing.")
    model = ScriptedModel(["ok"])
    built = build_agent(Settings(tools=["read"]), cwd, approver=None, model=model, environ=env)
    # the instructions are a capability: the agent's own prompt stays the base, every
    # request carries the instructions as its last block
    assert built.agent.system_prompt.startswith("You are ketch") and "AGENTS.md" not in built.agent.system_prompt
    await built.agent.prompt("hi")
    sent = model.requests[0].system_prompt
    assert sent == f"{built.agent.system_prompt}\n\n{built.instructions.text}"
    assert sent.endswith("## AGENTS.md\n\nRun make test before committing.")
    assert built.instructions.describe() == [
        f"AGENTS.md (project, 32 bytes) {project / 'AGENTS.md'}",
    ]


def test_memory_shows_the_files(env: Env, terminals: list[Terminal]) -> None:
    write(env.work / "AGENTS.md", "Use tabs.")
    term = Terminal(env, "--model", f"scripted:{env.script(['hi'])}")
    terminals.append(term)
    term.expect("/help for commands")
    term.sendline("/memory")
    term.expect(r"AGENTS\.md \(project, 9 bytes\)")
    term.sendline("/exit")
    assert term.wait_exit() == 0
