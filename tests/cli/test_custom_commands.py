"""Custom slash commands (``.ketch/commands``, ``.claude/commands``, the user's) through
the ``ketch`` command on scripted models: expansion with arguments, front matter (model,
allowed tools, description), trust, ``/help``, the control protocol and bad files."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from clihelp import Env
from clihelp import Terminal

REVIEW = "---\ndescription: Review a file\nargument-hint: FILE [FOCUS]\n---\nReview $1 with a focus on $2. All: $ARGUMENTS"


def command(root: Path, rel: str, text: str) -> Path:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def requests(env: Env) -> list[dict[str, Any]]:
    log = env.home / "requests.jsonl"
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines()]


def extra(env: Env, replies: list[Any]) -> dict[str, str]:
    return {"KETCH_TEST_SCRIPT": env.script(replies), "KETCH_TEST_REQUESTS": str(env.home / "requests.jsonl")}


def prompt_text(request: dict[str, Any]) -> str:
    first = request["messages"][0]
    assert first["role"] == "user"
    return "".join(b["text"] for b in first["content"])


def test_a_command_expands_with_its_arguments(env: Env) -> None:
    command(env.work, ".ketch/commands/review.md", REVIEW)
    proc = env.run("run", "--trust-project", '/review src/a.py "error handling"', extra=extra(env, ["Reviewed."]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "Reviewed."
    assert prompt_text(requests(env)[0]) == (
        'Review src/a.py with a focus on error handling. All: src/a.py "error handling"'
    )


def test_claude_commands_in_sub_folders_and_arguments_appended(env: Env) -> None:
    command(env.work, ".claude/commands/git/commit.md", "Write a commit message for the staged changes.\n")
    proc = env.run("run", "--trust-project", "/git:commit keep it short", extra=extra(env, ["ok"]))
    assert proc.returncode == 0, proc.stderr
    assert prompt_text(requests(env)[0]) == (
        "Write a commit message for the staged changes.\n\nARGUMENTS: keep it short"
    )


def test_an_untrusted_projects_commands_are_not_loaded(env: Env) -> None:
    command(env.work, ".ketch/commands/review.md", REVIEW)
    proc = env.run("run", "/review a.py", extra=extra(env, ["ok"]))
    assert proc.returncode == 0, proc.stderr
    assert prompt_text(requests(env)[0]) == "/review a.py"
    line = next(x for x in proc.stderr.splitlines() if "untrusted project" in x)
    assert f"commands /review ({env.work / '.ketch' / 'commands'})" in line


def test_the_users_commands_load_anywhere_and_the_model_field_picks_the_runs_model(env: Env) -> None:
    other = env.script(["From the other model."], name="other.json")
    command(env.xdg / "ketch", "commands/quick.md", f"---\nmodel: scripted:{other}\n---\nAnswer quickly: $ARGUMENTS")
    proc = env.run("run", "/quick why", extra=extra(env, ["From the default model."]))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "From the other model."


def test_allowed_tools_allow_those_calls_without_asking(env: Env) -> None:
    write = {"blocks": [{"type": "tool_call", "id": "c1", "name": "write",
                         "args": {"path": "out.txt", "content": "made"}}]}
    command(env.xdg / "ketch", "commands/make.md", "---\nallowed-tools: Write, Bash(git status)\n---\nMake the file.")
    proc = env.run("run", "-o", "stream-json", "/make", extra=extra(env, [write, "Made."]))
    assert proc.returncode == 0, proc.stderr
    assert (env.work / "out.txt").read_text() == "made"
    # The same call in a plain run needs approval (the run pauses for it).
    (env.work / "out.txt").unlink()
    proc = env.run("run", "-o", "stream-json", "make the file", extra=extra(env, [write, "Not made."]))
    assert proc.returncode == 5
    assert not (env.work / "out.txt").exists()
    result = json.loads(proc.stdout.splitlines()[-1])
    assert [p["tool_name"] for p in result["pending_approvals"]] == ["write"]


def test_bad_files_and_built_in_names_are_named_warnings(env: Env) -> None:
    bad = command(env.xdg / "ketch", "commands/bad.md", "---\ndescription: x\n")
    help_file = command(env.xdg / "ketch", "commands/help.md", "My help.")
    tools = command(env.xdg / "ketch", "commands/tools2.md", "---\nallowed-tools: Foo(\n---\nx")
    odd = command(env.xdg / "ketch", "commands/odd.md", "---\ncolour: red\n---\nOdd.")
    proc = env.run("run", "/odd", extra=extra(env, ["ok"]))
    lines = proc.stderr.splitlines()
    assert f"ketch: command left out: {bad}: the front matter has no closing '---'" in lines
    assert f"ketch: command left out: {help_file}: /help is a built-in command" in lines
    assert any(x.startswith(f"ketch: command left out: {tools}: 'allowed-tools': Invalid permission rule 'Foo('")
               for x in lines)
    assert (
        f"ketch: {odd}: unknown front matter key 'colour' ignored; known: description, argument-hint, "
        "allowed-tools, model, disable-model-invocation" in lines
    )
    assert prompt_text(requests(env)[0]) == "Odd."


def test_the_control_protocol_expands_commands_and_names_them_in_the_ack(env: Env) -> None:
    command(env.work, ".ketch/commands/review.md", REVIEW)
    lines = [{"type": "user", "id": 1, "text": "/review b.py speed"}]
    proc = env.run(
        "run", "--trust-project", "--input-format", "stream-json", "-o", "stream-json",
        input="".join(json.dumps(x) + "\n" for x in lines), extra=extra(env, ["ok"]),
    )
    assert proc.returncode == 0, proc.stderr
    acks = [json.loads(x) for x in proc.stdout.splitlines() if json.loads(x)["type"] == "ack"]
    assert acks == [{"type": "ack", "id": 1, "command": "user", "as": "prompt", "slash_command": "/review"}]
    assert prompt_text(requests(env)[0]) == "Review b.py with a focus on speed. All: b.py speed"


def test_help_lists_the_custom_commands_and_they_run(env: Env, terminals: list[Terminal]) -> None:
    command(env.work, ".ketch/commands/review.md", REVIEW)
    command(env.xdg / "ketch", "commands/hello.md", "Say hello to $1.")
    term = Terminal(env, "--trust-project", extra=extra(env, ["Hello, Ann!"]))
    terminals.append(term)
    term.expect("/help for commands")
    term.expect("›")
    term.sendline("/help")
    term.expect("Custom commands:")
    term.expect(r"/hello\s+Say hello to \$1\. \(user\)")
    term.expect(r"/review FILE \[FOCUS\]\s+Review a file \(project\)")
    term.sendline("/hello Ann")
    term.expect("Hello, Ann!")
    term.ctrl("d")
    assert term.wait_exit() == 0
    assert prompt_text(requests(env)[0]) == "Say hello to Ann."


def test_a_trusted_projects_command_that_leads_out_of_the_project_is_not_read(env: Env) -> None:
    secret = env.home / "secret.md"
    secret.write_text("KETCHCANARY: send this along\n")
    folder = env.work / ".ketch" / "commands"
    folder.mkdir(parents=True)
    (folder / "leak.md").symlink_to(secret)
    os.mkfifo(folder / "pipe.md")  # a read of it would block forever
    proc = env.run("run", "--trust-project", "/leak now", extra=extra(env, ["ok"]))
    assert proc.returncode == 0, proc.stderr
    assert "KETCHCANARY" not in json.dumps(requests(env))
    assert prompt_text(requests(env)[0]) == "/leak now"  # no such command: sent as typed
    left = sorted(x for x in proc.stderr.splitlines() if x.startswith("ketch: command left out:"))
    assert left == [
        f"ketch: command left out: {folder / 'leak.md'}: cannot read the command ({folder / 'leak.md'} leads outside {env.work})",
        f"ketch: command left out: {folder / 'pipe.md'}: cannot read the command ({folder / 'pipe.md'} is not a regular file)",
    ]


def test_the_users_claude_code_commands_load_and_ketchs_own_replace_them(env: Env) -> None:
    command(env.home, ".claude/commands/hi.md", "Claude's hi to $1.")
    command(env.home, ".claude/commands/bye.md", "Claude's bye to $1.")
    command(env.xdg, "ketch/commands/bye.md", "ketch's bye to $1.")
    proc = env.run("run", "/hi Ann", extra=extra(env, ["ok"]))
    assert proc.returncode == 0, proc.stderr
    assert prompt_text(requests(env)[0]) == "Claude's hi to Ann."
    (env.home / "requests.jsonl").unlink()
    proc = env.run("run", "/bye Bob", extra=extra(env, ["ok"]))
    assert proc.returncode == 0, proc.stderr
    assert prompt_text(requests(env)[0]) == "ketch's bye to Bob."


def test_shell_lines_run_when_allowed_and_are_refused_with_a_line_otherwise(env: Env) -> None:
    (env.work / "notes.txt").write_text("note one\n")
    command(
        env.work,
        ".ketch/commands/status.md",
        "---\nallowed-tools: Bash(cat notes.txt)\n---\nNotes: !`cat notes.txt`\nList: !`ls -a /`\nArgs: !`echo $1`\nFocus: $1",
    )
    proc = env.run("run", "--trust-project", "/status x", extra=extra(env, ["ok"]))
    assert proc.returncode == 0, proc.stderr
    assert prompt_text(requests(env)[0]) == (
        "Notes: note one\n"
        "List: (not run: it needs an allow rule: add Bash(ls -a /) to the command's allowed-tools, or --allow)\n"
        "Args: (not run: arguments are not put into shell lines)\nFocus: x"
    )
    err = [line for line in proc.stderr.splitlines() if "shell line" in line]
    assert err == [
        "ketch: /status: shell line `ls -a /` not run: it needs an allow rule: add Bash(ls -a /) to the command's "
        "allowed-tools, or --allow",
        "ketch: /status: shell line `echo $1` not run: arguments are not put into shell lines",
    ]
