"""White-box test: imports ketch implementation modules (private) directly.

In-process pieces of the command: ``--tool-choice`` on the first call only, request
options from settings, Markdown block splitting, answers to permission prompts."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from ketch.cli._config import Settings
from ketch.cli._config import load_settings
from ketch.cli._config import redact
from ketch.cli._factory import build_agent
from ketch.cli._headless import parse_answer
from ketch.cli._render import MarkdownStream
from ketch.cli._render import tool_summary
from ketch.permissions import Approval
from ketch.testing import ScriptedModel
from ketch.testing import reply
from ketch.testing import tool_call


async def test_tool_choice_applies_to_the_first_call_of_each_run(tmp_path: Path) -> None:
    model = ScriptedModel([reply(tool_call("ls", {})), "one", reply(tool_call("ls", {})), "two"])
    settings = Settings(max_tokens=77, temperature=0.0)
    built = build_agent(settings, tmp_path, approver=None, tool_choice="ls", model=model, environ={})
    for expected in ("one", "two"):
        built.arm()
        result = await built.agent.prompt("list")
        assert result.text == expected
    choices = [r.options.tool_choice for r in model.requests]
    assert choices == ["ls", None, "ls", None]
    assert {(r.options.max_tokens, r.options.temperature) for r in model.requests} == {(77, 0.0)}
    model.assert_complete()


async def test_tool_choice_auto_sets_nothing(tmp_path: Path) -> None:
    model = ScriptedModel(["x"])
    built = build_agent(Settings(), tmp_path, approver=None, tool_choice="auto", model=model, environ={})
    built.arm()
    await built.agent.prompt("hi")
    assert model.requests[0].options.tool_choice is None
    assert model.requests[0].options.max_tokens is None


async def test_default_system_prompt_names_root_and_tools(tmp_path: Path) -> None:
    model = ScriptedModel(["x"])
    built = build_agent(Settings(tools=["read", "ls"]), tmp_path, approver=None, model=model, environ={})
    await built.agent.prompt("hi")
    prompt = model.requests[0].system_prompt
    assert f"The working directory is {tmp_path}. Your tools: read, ls." in prompt
    assert model.requests[0].tool_names == ["read", "ls"]
    custom = ScriptedModel(["x"])
    built = build_agent(Settings(system_prompt="Be terse."), tmp_path, approver=None, model=custom, environ={})
    await built.agent.prompt("hi")
    assert custom.requests[0].system_prompt == "Be terse."


def test_settings_sources(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    (xdg / "ketch").mkdir(parents=True)
    (xdg / "ketch" / "config.toml").write_text('temperature = 0.5\n[permissions]\nallow = ["edit"]\n')
    project = tmp_path / "p"
    (project / ".ketch").mkdir(parents=True)
    (project / ".ketch" / "config.toml").write_text('max_tokens = 10\n[permissions]\nallow = ["bash(ls*)"]\n')
    environ = {"XDG_CONFIG_HOME": str(xdg), "KETCH_TEMPERATURE": "0.7"}
    settings = load_settings(project, {"max_tokens": 20}, environ, trust=True)
    assert (settings.temperature, settings.max_tokens) == (0.7, 20)
    assert [(str(r), r.source) for r in settings.allow] == [("edit", "user"), ("bash(ls*)", "project")]
    assert settings.sources == {
        "temperature": "environment KETCH_TEMPERATURE",
        "max_tokens": "flag --max-tokens",
        "allow": f"project config {project / '.ketch' / 'config.toml'}",
    }
    # an untrusted project's allow rules widen power: left out and listed
    untrusted = load_settings(project, {}, environ)
    assert [str(r) for r in untrusted.allow] == ["edit"]
    assert untrusted.ignored == [f"permissions.allow ({project / '.ketch' / 'config.toml'})"]


def test_markdown_stream_splits_complete_blocks() -> None:
    md = MarkdownStream()
    assert md.feed("# Title\n") == ""
    assert md.feed("\nPara") == "# Title\n\n"
    assert md.feed("graph one.\n\n```py\nx = 1\n\n") == "Paragraph one.\n\n"
    assert md.feed("y = 2\n```\n") == ""
    assert md.feed("\nTail") == "```py\nx = 1\n\ny = 2\n```\n\n"
    assert md.finish() == "Tail"
    assert md.finish() == ""
    assert md.feed("a\n\n\nb") == "a\n\n\n"


def test_tool_summary() -> None:
    assert tool_summary("bash", {"command": "ls -la", "timeout": 5}) == "bash(ls -la, timeout=5)"
    assert tool_summary("edit", {"path": "a.py", "old_string": "x", "new_string": "y"}) == "edit(a.py)"
    assert tool_summary("grep", {"pattern": "TODO", "path": "src"}) == "grep(src, pattern='TODO')"
    assert tool_summary("other", {"n": 1}) == "other(n=1)"
    assert tool_summary("bash", {"command": "a\nb"}) == "bash(a⏎b)"


def test_parse_answer() -> None:
    assert parse_answer("y") == Approval.once()
    assert parse_answer(" YES ") == Approval.once()
    assert parse_answer("a") == Approval.always()
    assert parse_answer("always") == Approval.always()
    assert parse_answer("n") == Approval.deny()
    assert parse_answer("n use the other file") == Approval.deny("use the other file")
    assert parse_answer("no thanks") == Approval.deny("thanks")
    assert parse_answer("stop that") == Approval.deny("stop that")
    assert parse_answer("") == Approval.deny()


def test_redact() -> None:
    assert redact(None) == "not set"
    assert redact("short") == "set"
    assert redact("sk-0123456789abcdefXYZW") == "set (…XYZW)"


async def test_no_length_recovery_on_the_embedded_model(tmp_path: Path) -> None:
    local = ScriptedModel([reply("cut", stop_reason="length"), "never"], provider="local")
    built = build_agent(Settings(), tmp_path, approver=None, model=local, environ={})
    result = await built.agent.prompt("hi")
    assert (result.end_reason, result.summary.turns, local.remaining) == ("stop", 1, 1)
    remote = ScriptedModel([reply("cut", stop_reason="length"), "resumed"], provider="openai")
    built = build_agent(Settings(), tmp_path, approver=None, model=remote, environ={})
    result = await built.agent.prompt("hi")
    assert (result.text, result.summary.turns) == ("resumed", 2)


def test_the_commands_bash_cannot_read_its_config_directory(tmp_path: Path, monkeypatch: Any) -> None:
    from ketch.cli._dirs import config_dir
    from ketch.cli._factory import build_tools
    from ketch.tools import BashTool

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    (bash,) = [t for t in build_tools(tmp_path, ["bash"]) if isinstance(t, BashTool)]
    assert bash.policy().hidden == (config_dir(),) == (tmp_path / "xdg" / "ketch",)


def test_the_commands_bash_cannot_read_or_write_what_deny_rules_name(tmp_path: Path, monkeypatch: Any) -> None:
    from ketch.cli._dirs import config_dir
    from ketch.permissions import Rule
    from ketch.sandbox import DEFAULT_PROTECTED
    from ketch.tools import BashTool

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    root = (tmp_path / "ws").resolve()
    root.mkdir()
    (root / "pkg" / ".ketch").mkdir(parents=True)
    (root / "pkg" / "CLAUDE.md").write_text("rules")
    deny = [Rule.parse(r, "project") for r in ("Read(./.env)", "Edit(src/**)", "Bash(rm:*)")]
    built = build_agent(Settings(deny=deny), root, approver=None, model=ScriptedModel(["ok"]), environ={})
    (bash,) = [t for t in built.agent.tools if isinstance(t, BashTool)]
    policy = bash.policy()
    tokens = Path(os.path.realpath(tmp_path / "data" / "ketch" / "mcp-auth"))  # ketch mcp login's tokens
    assert policy.hidden == (root / ".env", Path(os.path.realpath(config_dir())), tokens)  # the config: a key rule
    # the configuration at any depth (**/.ketch, **/CLAUDE.md …) as found when the tools were made
    at_root = tuple(p for p in DEFAULT_PROTECTED if not p.startswith("**/"))
    assert policy.protected == (*at_root, "pkg/.ketch", "pkg/CLAUDE.md", "src/**")
    assert built.permissions.unenforced(bash) is None
    # the file tools' workspace checks the same paths again when a tool runs
    workspace = bash.workspace
    assert workspace.hidden == (str(root / ".env"), os.path.realpath(config_dir()), str(tokens))
    assert workspace.protected == (str(root / "src/**"),)


def test_the_file_tools_get_every_deny_rule_even_those_bash_cannot_hold(tmp_path: Path, monkeypatch: Any) -> None:
    from ketch.permissions import Rule
    from ketch.tools import ReadTool

    home = (tmp_path / "home").resolve()
    root = home / "ws"
    root.mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    deny = [Rule.parse(r, "project") for r in ("Read(~/**/*.pem)", "Edit(~/**/*.lock)")]
    built = build_agent(Settings(deny=deny), root, approver=None, model=ScriptedModel(["ok"]), environ={})
    (read,) = [t for t in built.agent.tools if isinstance(t, ReadTool)]
    assert f"{home}/**/*.pem" in read.workspace.hidden
    assert read.workspace.protected == (f"{home}/**/*.lock",)


async def test_the_file_tools_hold_the_ask_rules_against_a_symlink_made_after_the_check(
    tmp_path: Path, monkeypatch: Any
) -> None:
    from ketch.llm import AbortSignal
    from ketch.loop import ToolContext
    from ketch.permissions import Rule
    from ketch.tools import ReadTool
    from ketch.tools import WriteTool

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    root = (tmp_path / "ws").resolve()
    (root / "secrets").mkdir(parents=True)
    (root / "secrets" / "token").write_text("sk-test\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[core]\n")
    os.symlink("secrets/token", root / "pub.txt")
    os.symlink(".git/config", root / "cfg")
    ask = [Rule.parse("Read(secrets/**)", "project")]
    built = build_agent(Settings(ask=ask), root, approver=None, model=ScriptedModel(["ok"]), environ={})
    tools = {t.name: t for t in built.agent.tools if isinstance(t, (ReadTool, WriteTool))}
    ctx = ToolContext(call_id="c", tool_name="read", signal=AbortSignal())
    read = await tools["read"].execute({"path": "pub.txt"}, ctx)
    assert read.text == (
        "Permission denied: pub.txt leads through a symlink to secrets/token, which is asked about before it "
        "is read; give secrets/token itself."
    )
    # the sandbox's protected paths stay asked about too
    write = await tools["write"].execute({"path": "cfg", "content": "x"}, ctx)
    assert write.text == (
        "Permission denied: cfg leads through a symlink to .git/config, which is asked about before it "
        "changes; give .git/config itself."
    )
    assert (root / ".git" / "config").read_text() == "[core]\n"
