"""Plugins through the ``ketch`` command: a plugin from a local git repository adds a
skill, a command and a subagent that work; what ketch does not load is named; disable,
enable and remove take them away and back."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from clihelp import Env
from clihelp import call_reply
from test_mcp import ECHO_SERVER


def plugin_repo(root: Path) -> Path:
    repo = root / "plugin-src"
    hook = {"hooks": [{"type": "command", "command": f"touch {root / 'hook-ran'}; test -d ${{CLAUDE_PLUGIN_ROOT}}"}]}
    files = {
        ".claude-plugin/plugin.json": json.dumps({"name": "tidy", "version": "1.0.0", "description": "Tidy code",
                                                  "lspServers": {}}),
        "skills/tidy-imports/SKILL.md": "---\nname: tidy-imports\ndescription: Sort imports.\n---\nTIDY-BODY\n",
        "commands/tidy.md": "---\ndescription: Tidy a file\n---\nTidy $1 please.",
        "agents/tidier.md": "---\nname: tidier\ndescription: Tidies files\n---\nYou tidy.",
        "hooks/hooks.json": json.dumps({"hooks": {"UserPromptSubmit": [hook], "FancyEvent": [hook]}}),
        ".mcp.json": json.dumps({"mcpServers": {"echo": {"command": sys.executable,
                                                         "args": ["${CLAUDE_PLUGIN_ROOT}/servers/echo.py"]}}}),
        "servers/echo.py": ECHO_SERVER,
    }
    for rel, text in files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    git = ["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@e", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "plugin"]):
        subprocess.run([*git, *args], check=True, capture_output=True)
    return repo


def requests(env: Env) -> list[dict[str, Any]]:
    log = env.home / "requests.jsonl"
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    log.unlink()
    return lines


def run(env: Env, task: str) -> Any:
    return env.run("run", task, extra={"KETCH_TEST_SCRIPT": env.script(["ok"]),
                                       "KETCH_TEST_REQUESTS": str(env.home / "requests.jsonl")})


def test_a_plugin_from_a_git_repository_adds_a_skill_a_command_and_an_agent(env: Env) -> None:
    repo = plugin_repo(env.home)
    proc = env.run("plugin", "add", f"file://{repo}")
    assert proc.returncode == 0, proc.stderr
    installed = env.xdg / "ketch" / "plugins" / "tidy"
    assert proc.stdout == f"added plugin tidy (1 skill, 1 command, 1 agent) to {installed}\n"
    assert (installed / "servers" / "echo.py").is_file()
    assert proc.stderr.splitlines() == [
        "ketch: plugin tidy: skipped hooks (hooks/hooks.json): they run commands, trust the plugin first "
        "(ketch plugin trust tidy)",
        "ketch: plugin tidy: skipped MCP servers (.mcp.json): they run commands, trust the plugin first "
        "(ketch plugin trust tidy)",
        "ketch: plugin tidy: skipped manifest key 'lspServers': custom paths and inline definitions are not "
        "supported yet",
    ]
    assert not (installed / ".git").exists()
    proc = env.run("plugin", "list")
    assert proc.stdout.splitlines()[0] == f"tidy  [enabled] 1 skill, 1 command, 1 agent  from file://{repo}"

    proc = run(env, "/tidy a.py")
    assert proc.returncode == 0, proc.stderr
    (first,) = requests(env)
    assert first["messages"][0]["content"][0]["text"] == "Tidy a.py please."
    assert "- tidy-imports: Sort imports." in first["system_prompt"]
    assert "TIDY-BODY" not in json.dumps(first)
    assert {"skill", "subagent"} <= set(first["tools"])
    assert "mcp__echo__echo" not in first["tools"]  # not trusted yet
    assert not (env.home / "hook-ran").exists()
    (listed,) = env.run("skills", "list", "--json").stdout.splitlines()
    assert json.loads(listed)["origin"] == "plugin tidy"

    # Trusted, its MCP server runs (the plugin's folder put in for ${CLAUDE_PLUGIN_ROOT}).
    assert env.run("plugin", "trust", "tidy").stdout == "trusted plugin tidy\n"
    assert env.run("plugin", "list").stdout.splitlines()[:2] == [
        f"tidy  [enabled, trusted] 1 skill, 1 command, 1 agent  from file://{repo}",
        "    skipped: hook event 'FancyEvent' (hooks/hooks.json): ketch has no such event",
    ]
    script = env.script([
        call_reply(("c1", "mcp__echo__echo", {"text": "hi"})),
        call_reply(("c2", "subagent", {"agent": "tidier", "task": "Tidy."})),
        "Tidied by the plugin's agent.",  # the subagent's answer (same scripted model)
        "done",
    ])
    done = env.run("run", "--model", f"scripted:{script}", "--permission-mode", "bypass", "-o", "stream-json",
                   "--no-session", "say hi")
    assert done.returncode == 0, done.stderr
    end = next(json.loads(x) for x in done.stdout.splitlines() if json.loads(x)["type"] == "tool_execution_end")
    assert (end["tool_name"], end["is_error"], end["result"]["content"]) == (
        "mcp__echo__echo", False, [{"type": "text", "text": "echo: hi"}]
    )
    ends = [json.loads(x) for x in done.stdout.splitlines() if json.loads(x)["type"] == "tool_execution_end"]
    assert (ends[1]["tool_name"], ends[1]["is_error"], ends[1]["result"]["content"]) == (
        "subagent", False, [{"type": "text", "text": "Tidied by the plugin's agent."}]
    )
    assert (env.home / "hook-ran").exists()  # its UserPromptSubmit hook ran
    (env.home / "hook-ran").unlink()

    assert env.run("plugin", "disable", "tidy").stdout == "disabled plugin tidy\n"
    run(env, "/tidy a.py")
    (first,) = requests(env)
    assert first["messages"][0]["content"][0]["text"] == "/tidy a.py"
    assert "skill" not in first["tools"] and "subagent" not in first["tools"]
    assert "mcp__echo__echo" not in first["tools"]
    assert not (env.home / "hook-ran").exists()
    assert env.run("plugin", "list").stdout.startswith("tidy  [disabled, trusted]")

    assert env.run("plugin", "enable", "tidy").stdout == "enabled plugin tidy\n"
    run(env, "/tidy b.py")
    assert requests(env)[0]["messages"][0]["content"][0]["text"] == "Tidy b.py please."

    assert env.run("plugin", "remove", "tidy").stdout == "removed plugin tidy\n"
    (env.home / "hook-ran").unlink()  # enabled again, its hook ran
    assert not installed.exists()
    run(env, "/tidy a.py")
    (first,) = requests(env)
    assert first["messages"][0]["content"][0]["text"] == "/tidy a.py" and "skill" not in first["tools"]
    assert "mcp__echo__echo" not in first["tools"] and not (env.home / "hook-ran").exists()
    assert env.run("plugin", "list").stdout == "no plugins installed (ketch plugin add PATH|GIT_URL adds one)\n"


def test_bad_plugins_and_names_are_one_line_errors(env: Env) -> None:
    folder = env.home / "noplugin"
    folder.mkdir()
    proc = env.run("plugin", "add", str(folder))
    assert (proc.returncode, proc.stderr) == (2, f"ketch: {folder}: no plugin manifest (.claude-plugin/plugin.json is missing)\n")
    (folder / ".claude-plugin").mkdir()
    (folder / ".claude-plugin" / "plugin.json").write_text('{"name": "Bad Name"}')
    proc = env.run("plugin", "add", str(folder))
    assert proc.stderr == (
        f"ketch: {folder / '.claude-plugin' / 'plugin.json'}: 'name' must be lowercase letters, digits, '.', '_' "
        "and '-' (got 'Bad Name')\n"
    )
    proc = env.run("plugin", "remove", "nope")
    assert (proc.returncode, proc.stderr) == (2, "ketch: no plugin named 'nope' (installed: none)\n")
    (folder / ".claude-plugin" / "plugin.json").write_text('{"name": "fine"}')
    assert env.run("plugin", "add", str(folder)).returncode == 0
    proc = env.run("plugin", "add", str(folder))
    assert proc.stderr == "ketch: a plugin named 'fine' is installed already (ketch plugin remove fine first)\n"
    assert env.run("plugin", "list").stdout == f"fine  [enabled] nothing ketch loads  from {folder}\n"


def test_a_plugins_links_out_of_its_folder_are_never_read(env: Env) -> None:
    secret = env.home / "secret.md"
    secret.write_text("---\nname: leak\ndescription: KETCHCANARY\n---\nKETCHCANARY body\n")
    folder = env.home / "linky"
    (folder / ".claude-plugin").mkdir(parents=True)
    (folder / ".claude-plugin" / "plugin.json").write_text('{"name": "linky"}')
    (folder / "skills" / "leak").mkdir(parents=True)
    (folder / "skills" / "leak" / "SKILL.md").symlink_to(secret)
    (folder / "commands").mkdir()
    (folder / "commands" / "leak.md").symlink_to(secret)
    assert env.run("plugin", "add", str(folder)).returncode == 0
    installed = env.xdg / "ketch" / "plugins" / "linky"
    assert (installed / "commands" / "leak.md").is_symlink()  # copied as a link, not as the key's text
    proc = run(env, "/leak")
    assert proc.returncode == 0, proc.stderr
    assert "KETCHCANARY" not in json.dumps(requests(env))
    assert sorted(x for x in proc.stderr.splitlines() if " left out: " in x) == [
        f"ketch: command left out: {installed / 'commands' / 'leak.md'}: cannot read the command "
        f"({installed / 'commands' / 'leak.md'} leads outside {installed})",
        f"ketch: skill left out: {installed / 'skills' / 'leak' / 'SKILL.md'}: cannot read the skill "
        f"({installed / 'skills' / 'leak' / 'SKILL.md'} leads outside {installed})",
    ]


def test_a_plugins_commands_are_namespaced_and_the_plain_name_kept_when_unambiguous(env: Env) -> None:
    repo = plugin_repo(env.home)
    (repo / "commands" / "lint.md").write_text("Lint $1 from the plugin.")
    assert env.run("plugin", "add", str(repo)).returncode == 0
    for task, prompt in [
        ("/tidy:tidy a.py", "Tidy a.py please."),
        ("/tidy a.py", "Tidy a.py please."),  # no other /tidy: the plain name works
        ("/tidy:lint b.py", "Lint b.py from the plugin."),
    ]:
        proc = run(env, task)
        assert proc.returncode == 0, proc.stderr
        assert requests(env)[0]["messages"][0]["content"][0]["text"] == prompt
    # the user's own /lint takes the plain name; the plugin's stays /tidy:lint
    (env.xdg / "ketch" / "commands").mkdir(parents=True)
    (env.xdg / "ketch" / "commands" / "lint.md").write_text("The user's lint of $1.")
    proc = run(env, "/lint c.py")
    assert requests(env)[0]["messages"][0]["content"][0]["text"] == "The user's lint of c.py."
    proc = run(env, "/tidy:lint c.py")
    assert requests(env)[0]["messages"][0]["content"][0]["text"] == "Lint c.py from the plugin."
