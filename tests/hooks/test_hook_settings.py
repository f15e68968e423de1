"""White-box test: imports ketch implementation modules (private) directly.

Hook settings: Claude Code's JSON shape, the same shape in ketch's TOML config, one-line
errors naming the bad entry, and the ``ketch`` command running configured hooks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from hookkit import write_script

from ketch.cli._config import ConfigError
from ketch.cli._config import load_settings
from ketch.hooks import HookConfigError
from ketch.hooks import HookSpec
from ketch.hooks import hooks_from_json
from ketch.hooks import parse_hooks

SRC = str(Path(__file__).resolve().parents[2] / "src")

TOML = """
[[hooks.PreToolUse]]
matcher = "bash"
[[hooks.PreToolUse.hooks]]
type = "command"
command = "./check.sh"
timeout = 5

[[hooks.PreToolUse.hooks]]
command = "./audit.sh"

[[hooks.Stop]]
[[hooks.Stop.hooks]]
type = "command"
command = "./stop.sh"
"""


def describe(specs: list[HookSpec]) -> list[tuple[str, str | None, object, float, str]]:
    return [(s.event, s.matcher, s.handler, s.timeout, s.origin) for s in specs]


def test_toml_shape() -> None:
    specs = parse_hooks(tomllib.loads(TOML)["hooks"], "config.toml")
    assert describe(specs) == [
        ("PreToolUse", "bash", "./check.sh", 5.0, "config.toml"),
        ("PreToolUse", "bash", "./audit.sh", 60.0, "config.toml"),
        ("Stop", None, "./stop.sh", 60.0, "config.toml"),
    ]


def test_claude_code_settings_json() -> None:
    text = json.dumps(
        {
            "permissions": {"allow": []},
            "hooks": {
                "PostToolUse": [
                    {"matcher": "Edit|Write", "hooks": [{"type": "command", "command": "fmt.sh", "timeout": 30}]}
                ],
                "UserPromptSubmit": [{"hooks": [{"type": "command", "command": "ctx.sh"}]}],
            },
        }
    )
    assert describe(hooks_from_json(text, ".claude/settings.json")) == [
        ("PostToolUse", "Edit|Write", "fmt.sh", 30.0, ".claude/settings.json"),
        ("UserPromptSubmit", None, "ctx.sh", 60.0, ".claude/settings.json"),
    ]
    bare = json.dumps({"Stop": [{"hooks": [{"type": "command", "command": "s.sh"}]}]})
    assert describe(hooks_from_json(bare, "hooks.json")) == [("Stop", None, "s.sh", 60.0, "hooks.json")]


def test_matchers() -> None:
    def match(matcher: str | None, event: str, **data: str) -> bool:
        return HookSpec(event, "true", matcher).matches(data)  # type: ignore[arg-type]

    assert match("Bash", "PreToolUse", tool_name="bash")
    assert match("bash", "PreToolUse", tool_name="bash") and not match("bash", "PreToolUse", tool_name="bash2")
    assert match("Edit|Write", "PostToolUse", tool_name="write") and not match("Edit|Write", "PostToolUse", tool_name="read")
    assert match("mcp__.*", "PreToolUse", tool_name="mcp__git__status")
    assert match("*", "PreToolUse", tool_name="x") and match("", "PreToolUse", tool_name="x") and match(None, "PreToolUse", tool_name="x")
    assert match("startup", "SessionStart", source="startup") and not match("startup", "SessionStart", source="clear")
    assert match("auto", "PreCompact", trigger="auto") and not match("auto", "PreCompact", trigger="manual")
    assert match("anything", "Stop") and match("anything", "UserPromptSubmit", prompt="hi")


@pytest.mark.parametrize(
    ("hooks", "message"),
    [
        ({"PreToolUs": []}, "cfg: hooks.PreToolUs: unknown hook event 'PreToolUs'; expected one of PreToolUse, PostToolUse, PostToolUseFailure, UserPromptSubmit, Stop, SubagentStop, PreCompact, SessionStart, SessionEnd, Notification"),
        ({"Stop": {"hooks": []}}, "cfg: hooks.Stop must be a list of matcher entries"),
        ({"Stop": [{"matcher": 3, "hooks": []}]}, "cfg: hooks.Stop[0].matcher must be a string, got 3"),
        ({"Stop": [{"hooks": []}]}, "cfg: hooks.Stop[0].hooks must be a non-empty list of hooks"),
        ({"Stop": [{"hooks": [{"type": "prompt", "prompt": "x"}]}]}, "cfg: hooks.Stop[0].hooks[0]: unsupported hook type 'prompt'; ketch runs type = \"command\" hooks"),
        ({"Stop": [{"hooks": [{"type": "command"}]}]}, "cfg: hooks.Stop[0].hooks[0]: 'command' must be a non-empty string"),
        ({"Stop": [{"hooks": [{"command": "x"}, {"command": "y", "timeout": 0}]}]}, "cfg: hooks.Stop[0].hooks[1]: timeout must be a positive number of seconds, got 0"),
        ({"PreToolUse": [{"matcher": "(", "hooks": [{"command": "x"}]}]}, "cfg: hooks.PreToolUse[0].hooks[0]: matcher '(' is not a valid regular expression: missing ), unterminated subpattern at position 0"),
        (["Stop"], "cfg: hooks must be a table of events, got list"),
    ],
)
def test_bad_entries_give_one_line_errors(hooks: object, message: str) -> None:
    with pytest.raises(HookConfigError) as err:
        parse_hooks(hooks, "cfg")
    assert str(err.value) == message
    assert "\n" not in message


def test_invalid_json() -> None:
    with pytest.raises(HookConfigError, match=r"^hooks.json: invalid JSON: "):
        hooks_from_json("{", "hooks.json")


def test_config_files_accumulate_hooks_and_name_bad_ones(tmp_path: Path) -> None:
    xdg = tmp_path / "xdg"
    (xdg / "ketch").mkdir(parents=True)
    user = xdg / "ketch" / "config.toml"
    user.write_text('[[hooks.SessionStart]]\n[[hooks.SessionStart.hooks]]\ncommand = "./hello.sh"\n')
    work = tmp_path / "work"
    (work / ".ketch").mkdir(parents=True)
    project = work / ".ketch" / "config.toml"
    project.write_text(TOML)
    untrusted = load_settings(work, environ={"XDG_CONFIG_HOME": str(xdg), "HOME": str(tmp_path)})
    assert [(s.event, s.handler) for s in untrusted.hooks] == [("SessionStart", "./hello.sh")]
    assert any(item.startswith("hooks (") for item in untrusted.ignored)
    settings = load_settings(work, environ={"XDG_CONFIG_HOME": str(xdg), "HOME": str(tmp_path)}, trust=True)
    assert [(s.event, s.handler, s.origin) for s in settings.hooks] == [
        ("SessionStart", "./hello.sh", f"user config {user}"),
        ("PreToolUse", "./check.sh", f"project config {project}"),
        ("PreToolUse", "./audit.sh", f"project config {project}"),
        ("Stop", "./stop.sh", f"project config {project}"),
    ]
    project.write_text('[[hooks.Stop]]\n[[hooks.Stop.hooks]]\ncommand = "x"\ntimeout = -1\n')
    with pytest.raises(ConfigError) as err:
        load_settings(work, environ={"XDG_CONFIG_HOME": str(xdg), "HOME": str(tmp_path)}, trust=True)
    assert str(err.value) == f"project config {project}: hooks.Stop[0].hooks[0]: timeout must be a positive number of seconds, got -1"


def _ketch(work: Path, home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "XDG_CONFIG_HOME": str(home / "xdg"),
        "PYTHONPATH": SRC,
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "KETCH_TRUST_PROJECT": "1",  # project hooks apply only in a trusted project
    }
    return subprocess.run(
        [sys.executable, "-m", "ketch", *args], cwd=work, env=env, input="", capture_output=True, text=True, timeout=120
    )


def test_ketch_run_with_configured_hooks(tmp_path: Path) -> None:
    """The command runs SessionStart, UserPromptSubmit, PreToolUse (exit 2), Stop and SessionEnd hooks."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    (work / ".ketch").mkdir(parents=True)
    log = tmp_path / "log.jsonl"
    logger = write_script(
        tmp_path,
        "log.py",
        f"""
import json, sys
data = json.load(sys.stdin)
with open({str(log)!r}, "a") as f:
    f.write(json.dumps([data["hook_event_name"], data.get("source") or data.get("reason") or data.get("tool_name") or data.get("prompt")]) + "\\n")
if data["hook_event_name"] == "PreToolUse":
    sys.stderr.write("listing is not allowed")
    sys.exit(2)
if data["hook_event_name"] == "SessionStart":
    print("the project uses make")
""",
        shell="/usr/bin/env python3",
    )
    config = "".join(
        f'[[hooks.{event}]]\nmatcher = "{matcher}"\n[[hooks.{event}.hooks]]\ncommand = "{logger}"\n'
        for event, matcher in (("SessionStart", "startup"), ("UserPromptSubmit", ""), ("PreToolUse", "ls"), ("Stop", ""), ("SessionEnd", "*"))
    )
    (work / ".ketch" / "config.toml").write_text(config)
    script = home / "script.json"
    script.write_text(json.dumps([{"blocks": [{"type": "tool_call", "id": "c1", "name": "ls", "args": {}}]}, "no listing then"]))
    proc = _ketch(work, home, "run", "--model", f"scripted:{script}", "-o", "stream-json", "what is here?")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stdout.splitlines()]
    assert lines[-1]["text"] == "no listing then"
    messages = [e["message"] for e in lines if e["type"] == "message_end"]
    assert [[b["text"] for b in m["content"]] for m in messages if m["role"] != "assistant"] == [
        ["what is here?", "\n\nSessionStart hook context: the project uses make"],
        ["Denied by a PreToolUse hook: listing is not allowed"],
    ]
    assert [json.loads(line) for line in log.read_text().splitlines()] == [
        ["SessionStart", "startup"],
        ["UserPromptSubmit", "what is here?"],
        ["PreToolUse", "ls"],
        ["Stop", None],
        ["SessionEnd", "other"],
    ]


def test_ketch_run_prompt_blocked_by_a_hook(tmp_path: Path) -> None:
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    (work / ".ketch").mkdir(parents=True)
    blocker = write_script(tmp_path, "block.sh", "cat >/dev/null\necho 'no tasks on Fridays' >&2\nexit 2\n")
    (work / ".ketch" / "config.toml").write_text(
        f'[[hooks.UserPromptSubmit]]\n[[hooks.UserPromptSubmit.hooks]]\ncommand = "{blocker}"\n'
    )
    script = home / "script.json"
    script.write_text(json.dumps(["never sent"]))
    proc = _ketch(work, home, "run", "--model", f"scripted:{script}", "do it")
    assert proc.stdout == ""
    assert proc.stderr == "ketch: run ended with stop_guard: Prompt blocked by a UserPromptSubmit hook: no tasks on Fridays\n"
    assert proc.returncode == 1
