"""Markdown agent files (Claude Code's shape): good files load, bad ones give one line
naming the file and the value."""

from __future__ import annotations

from pathlib import Path

import pytest

from ketch.subagents import SubagentFileError
from ketch.subagents import SubagentSpec
from ketch.subagents import load_agent_file
from ketch.subagents import load_agents
from ketch.subagents import parse_agent_file

GOOD = """---
name: reviewer
description: Reviews a diff for bugs
tools: read, grep, ls
model: inherit
max_turns: 8
thinking: low
permissionMode: acceptEdits
color: blue
---
You review diffs.

Be terse.
"""


def test_a_claude_code_agent_file_loads() -> None:
    spec = parse_agent_file(GOOD, source="reviewer.md")
    assert spec == SubagentSpec(
        name="reviewer",
        description="Reviews a diff for bugs",
        system_prompt="You review diffs.\n\nBe terse.",
        model=None,
        tools=["read", "grep", "ls"],
        max_turns=8,
        thinking="low",
        permission_mode="accept_edits",
        source="reviewer.md",
    )


def test_lists_quotes_and_defaults() -> None:
    text = '---\nname: "scout"\ndescription: \'Looks around: fast\'\ntools:\n  - read\n  - ls\nmodel: openai:gpt-5-mini\n---\nGo.'
    spec = parse_agent_file(text)
    assert (spec.name, spec.description, spec.tools, spec.model) == ("scout", "Looks around: fast", ["read", "ls"], "openai:gpt-5-mini")
    spec = parse_agent_file("---\nname: a\ndescription: b\ntools: [read, grep]\n---\n")
    assert (spec.tools, spec.system_prompt, spec.max_turns, spec.thinking) == (["read", "grep"], "", None, None)
    assert parse_agent_file("---\nname: a\ndescription: b\n---\n").tools is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("no front matter", "x.md: an agent file must start with '---' front matter (name, description)"),
        ("---\nname: a\n", "x.md: the front matter has no closing '---'"),
        ("---\ndescription: d\n---\n", "x.md: 'name' is missing from the front matter"),
        ("---\nname: a\n---\n", "x.md: 'description' is missing from the front matter"),
        ("---\nname: a b\ndescription: d\n---\n", "x.md: subagent name must be letters, digits, '-' or '_' (starting with a letter or digit), got 'a b'"),
        ("---\nname: a\ndescription: d\nmax_turns: lots\n---\n", "x.md: max_turns must be a positive integer, got 'lots'"),
        ("---\nname: a\ndescription: d\nmax_turns: 0\n---\n", "x.md: max_turns must be a positive integer, got 0"),
        ("---\nname: a\ndescription: d\nthinking: huge\n---\n", "x.md: thinking must be one of off, minimal, low, medium, high, xhigh, got 'huge'"),
        ("---\nname: a\ndescription: d\njust words\n---\n", "x.md:4: expected 'key: value', got 'just words'"),
    ],
)
def test_bad_files_give_one_line_naming_the_value(text: str, message: str) -> None:
    with pytest.raises(SubagentFileError) as info:
        parse_agent_file(text, source="x.md")
    assert str(info.value) == message
    assert "\n" not in str(info.value)


def test_a_bad_permission_mode_names_the_value() -> None:
    with pytest.raises(SubagentFileError) as info:
        parse_agent_file("---\nname: a\ndescription: d\npermission_mode: yolo\n---\n", source="x.md")
    assert str(info.value).startswith("x.md: ") and "'yolo'" in str(info.value)
    assert "\n" not in str(info.value)


def test_load_agents_reads_directories_in_order_and_keeps_the_errors(tmp_path: Path) -> None:
    user = tmp_path / "user"
    project = tmp_path / "project"
    user.mkdir()
    project.mkdir()
    (user / "reviewer.md").write_text(GOOD)
    (user / "scout.md").write_text("---\nname: scout\ndescription: user scout\n---\nA")
    (project / "scout.md").write_text("---\nname: scout\ndescription: project scout\n---\nB")
    (project / "broken.md").write_text("---\nname: broken\n---\n")
    (project / "notes.txt").write_text("ignored")
    specs, errors = load_agents([user, project, tmp_path / "missing"])
    assert [(s.name, s.description) for s in specs] == [("reviewer", "Reviews a diff for bugs"), ("scout", "project scout")]
    assert errors == [f"{project / 'broken.md'}: 'description' is missing from the front matter"]
    assert load_agent_file(user / "scout.md").source == str(user / "scout.md")
    with pytest.raises(SubagentFileError, match=r"missing\.md: cannot read the agent file \(FileNotFoundError\)"):
        load_agent_file(tmp_path / "missing.md")
