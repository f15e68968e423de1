"""White-box test: imports ketch implementation modules (private) directly.

The interactive session in a real pseudo-terminal (pexpect) on scripted models."""

from __future__ import annotations

import json
import os
import re
import threading
import tomllib
from pathlib import Path

import pytest
from clihelp import Env
from clihelp import Terminal
from clihelp import call_reply
from clihelp import text_reply
from rich.cells import cell_len

from ketch.cli._interactive import banner
from ketch.cli._interactive import shorten_path


def _start(env: Env, terminals: list[Terminal], script: str, *args: str) -> Terminal:
    term = Terminal(env, "--model", f"scripted:{script}", *args)
    terminals.append(term)
    term.expect("ketch · scripted:scripted-model · ")
    term.expect("/help for commands")
    term.expect("›")
    return term


def test_streams_markdown_thinking_and_exits(env: Env, terminals: list[Terminal]) -> None:
    script = env.script(
        [
            {
                "blocks": [
                    {"type": "thinking", "thinking": "Consider the greeting.\nThen answer politely."},
                    {"type": "text", "text": "# Greeting\n\nHello **there**, friend.\n\n- first item\n- second item\n"},
                ]
            }
        ]
    )
    term = _start(env, terminals, script)
    term.sendline("say hello")
    term.expect(r"✻ Consider the greeting\.  \(44 chars, Ctrl-T expands\)")
    term.expect("Greeting")
    term.expect("friend.")
    term.expect("first item")
    term.expect("second item")
    term.expect(r"· 1 turn · \d+ tokens · \$0\.0000 · \d+\.\ds")
    term.expect(r"↑\d+ ↓\d+ tokens │ \$0\.0000 │ ctx \d+% │ mode default")
    term.ctrl("t")
    term.expect("Then answer politely.")
    term.sendline("/exit")
    assert term.wait_exit() == 0
    history = (env.xdg / "ketch" / "history").read_text()
    assert "+say hello" in history and "+/exit" in history


def test_permission_prompt_once_deny_and_always(env: Env, terminals: list[Terminal]) -> None:
    script = env.script(
        [
            call_reply(("c1", "write", {"path": "a.txt", "content": "one\ntwo\n"})),
            call_reply(("c2", "bash", {"command": "touch b.txt"})),
            call_reply(("c3", "bash", {"command": "touch c.txt"})),
            call_reply(("c4", "bash", {"command": "touch c.txt"})),
            text_reply("all done"),
        ]
    )
    term = _start(env, terminals, script)
    term.sendline("make files")
    term.expect(r"⚠ write wants to write a\.txt \(2 lines\)")
    term.expect(r"'a' always allows write")
    term.expect(r"Allow\? \[y\] once  \[a\] always  \[n\] deny")
    term.expect(r"\? waiting for your answer")
    term.sendline("/mode")
    term.expect("permission mode: default")
    term.expect(r"Allow\? \[y\] once")
    term.sendline("y")
    term.expect(r"Created a\.txt \(8 bytes, 2 lines\)\.")
    term.expect("⚠ bash wants to run: touch b.txt")
    term.expect("Allow")
    term.sendline("n not now")
    term.expect(r"Permission denied by the user\. Reason: not now")
    term.expect("⚠ bash wants to run: touch c.txt")
    term.expect(r"'a' always allows Bash\(touch c\.txt\)")
    term.expect("Allow")
    term.sendline("a")
    term.expect(r"Save the rule: \[s\] this session only  \[u\] user  \[p\] project  \[l\] local")
    term.sendline("s")
    term.expect(r"allowed for this session: Bash\(touch c\.txt\)")
    between = term.expect("all done")
    assert "wants to run" not in between
    assert between.count("⏺ bash(touch c.txt)") == 1
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert sorted(p.name for p in env.work.iterdir()) == ["a.txt", "c.txt"]


def test_always_allow_saves_the_rule_where_the_user_picks(env: Env, terminals: list[Terminal]) -> None:
    import tomllib

    env.user_config('thinking = "off"\n')
    script = env.script(
        [
            call_reply(("c1", "bash", {"command": "touch a.txt"})),
            call_reply(("c2", "bash", {"command": "touch a.txt && touch b.txt"})),
            call_reply(("c3", "write", {"path": "w.txt", "content": "w\n"})),
            call_reply(("c4", "bash", {"command": "touch b.txt"})),
            text_reply("all saved"),
        ]
    )
    term = _start(env, terminals, script)
    term.sendline("go")
    term.expect(r"'a' always allows Bash\(touch a\.txt\)")
    term.expect("Allow")
    term.sendline("a")
    term.expect("Save the rule")
    term.sendline("p")
    project = env.work / ".ketch" / "config.toml"
    term.expect(r"saved allow rule Bash\(touch a\.txt\) to .*config\.toml")
    # the compound command: touch a.txt is allowed now, touch b.txt is asked
    term.expect(r"'a' always allows Bash\(touch a\.txt\), Bash\(touch b\.txt\)")
    term.expect("Allow")
    term.sendline("a")
    term.expect("Save the rule")
    term.sendline("u")
    term.expect(r"saved allow rule Bash\(touch a\.txt\), Bash\(touch b\.txt\) to .*config\.toml")
    term.expect(r"'a' always allows write")
    term.expect("Allow")
    term.sendline("a")
    term.expect("Save the rule")
    term.sendline("l")
    term.expect(r"saved allow rule write to .*config\.local\.toml")
    between = term.expect("all saved")
    assert "wants to run" not in between  # c4 is covered by the rule remembered from c2
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert tomllib.loads(project.read_text()) == {"permissions": {"allow": ["Bash(touch a.txt)"]}}
    user = tomllib.loads((env.xdg / "ketch" / "config.toml").read_text())
    assert user == {"thinking": "off", "permissions": {"allow": ["Bash(touch a.txt)", "Bash(touch b.txt)"]}}
    local = tomllib.loads((env.work / ".ketch" / "config.local.toml").read_text())
    assert local == {"permissions": {"allow": ["write"]}}
    assert sorted(p.name for p in env.work.iterdir()) == [".ketch", "a.txt", "b.txt", "w.txt"]


def test_edit_shows_a_diff_in_the_prompt_and_the_result(env: Env, terminals: list[Terminal]) -> None:
    (env.work / "f.py").write_text("x = 1\ny = 2\n")
    script = env.script(
        [
            call_reply(("c1", "read", {"path": "f.py"})),
            call_reply(("c2", "edit", {"path": "f.py", "old_string": "x = 1", "new_string": "x = 42"})),
            text_reply("edited"),
        ]
    )
    term = _start(env, terminals, script)
    term.sendline("change x")
    term.expect(r"⏺ read\(f\.py\)")
    term.expect(r"⚠ edit wants to change f\.py")
    term.expect("-x = 1")
    term.expect(r"\+x = 42")
    term.expect("Allow")
    term.sendline("yes")
    term.expect(r"Edited f\.py: replaced 1 occurrence\.")
    term.expect(r"\+\+\+ b/f\.py")
    term.expect("-x = 1")
    term.expect(r"\+x = 42")
    term.expect("edited")
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert (env.work / "f.py").read_text() == "x = 42\ny = 2\n"


def test_ctrl_c_aborts_a_hanging_run_and_a_second_exits(env: Env, terminals: list[Terminal]) -> None:
    script = env.script([{"hang": True}])
    term = _start(env, terminals, script)
    term.sendline("wait forever")
    term.expect(r"⠋|⠙|⠹|⠸|⠼|⠴|⠦|⠧|⠇|⠏")
    term.expect(r"Working… \d+\.\ds")
    term.ctrl("c")
    term.expect(r"Aborting… \(Ctrl-C again exits\)")
    term.expect("✗ interrupted")
    term.expect(r"· aborted · 1 turn")
    term.ctrl("c")
    assert term.wait_exit() == 0


def test_ctrl_c_while_idle_needs_two(env: Env, terminals: list[Terminal]) -> None:
    term = _start(env, terminals, env.script([]))
    term.ctrl("c")
    term.expect(r"Press Ctrl-C again to exit \(or type /exit\)\.")
    term.sendline("/help")
    term.expect("Commands:")
    term.ctrl("c")
    term.expect("Press Ctrl-C again")
    term.ctrl("c")
    assert term.wait_exit() == 0


def test_ctrl_d_exits(env: Env, terminals: list[Terminal]) -> None:
    term = _start(env, terminals, env.script([]))
    term.ctrl("d")
    assert term.wait_exit() == 0


def _deep_workspace(env: Env) -> Path:
    """A workspace whose path is over 400 characters long, ending in ``the-workspace``."""
    deep = env.work
    while len(str(deep)) < 400:
        deep = deep / ("nested-directory-" * 3)
    deep = deep / "the-workspace"
    deep.mkdir(parents=True)
    return deep


@pytest.mark.parametrize("columns", [120, 60])
def test_banner_fits_the_terminal_however_long_the_workspace_path(
    env: Env, terminals: list[Terminal], columns: int
) -> None:
    deep = _deep_workspace(env)
    term = Terminal(env, "--model", f"scripted:{env.script([])}", columns=columns, cwd=deep)
    terminals.append(term)
    term.expect("ketch · ")
    middle = term.expect("/help for commands")
    shown = "ketch · " + middle + "/help for commands"
    assert middle.startswith("scripted:scripted-model · ")
    assert middle.endswith("the-workspace · permission mode default · ")
    assert "\n" not in shown and "\r" not in shown
    assert "…" in middle and str(deep) not in middle
    if columns == 120:
        assert cell_len(shown) == 119  # the path is shortened to fill the line exactly
    term.expect("›")
    term.ctrl("d")
    assert term.wait_exit() == 0


def test_banner_shortens_the_path_in_the_middle_and_uses_tilde_for_home() -> None:
    home = Path("/home/someone")
    assert (
        banner("openai:gpt-5", home / "src" / "ketch", "default", 120, home=home)
        == "ketch · openai:gpt-5 · ~/src/ketch · permission mode default · /help for commands"
    )
    assert banner("openai:gpt-5", home, "plan", 120, home=home).startswith("ketch · openai:gpt-5 · ~ · ")
    long = Path("/" + "/".join(f"dir{i:03d}" for i in range(60)))
    line = banner("local:smollm2", long, "default", 100, home=home)
    assert cell_len(line) == 99
    assert line.startswith("ketch · local:smollm2 · /dir000/")
    assert line.endswith("/dir059 · permission mode default · /help for commands")
    assert "…" in line
    # Too narrow for the fixed parts: the path still keeps its last characters.
    assert banner("m:x", long, "default", 20, home=home) == (
        "ketch · m:x · …r058/dir059 · permission mode default · /help for commands"
    )


def test_shorten_path_counts_terminal_cells() -> None:
    assert shorten_path("/short", 10) == "/short"
    assert shorten_path("/abcdefghij/klmnopqrst", 10) == "…lmnopqrst"
    assert shorten_path("/abcdefghij/klmnopqrst" * 2, 30) == "/abcdefgh…bcdefghij/klmnopqrst"
    wide = "/データ/" * 10
    short = shorten_path(wide, 31)
    assert cell_len(short) in (30, 31) and short.startswith("/デ") and short.endswith("ータ/")
    assert shorten_path("/anything", 1) == "…"


def test_typing_while_working_steers_or_queues_a_follow_up(env: Env, terminals: list[Terminal]) -> None:
    fifo = env.work / "gate"  # inside the workspace: the bash sandbox hides the host /tmp
    os.mkfifo(fifo)
    script = env.script(
        [
            call_reply(("c1", "bash", {"command": f"cat {fifo}"})),
            text_reply("after steering"),
            text_reply("after follow-up"),
        ]
    )
    term = _start(env, terminals, script, "--permission-mode", "bypass")
    term.sendline("start")
    term.expect(r"⏺ bash\(cat ")
    term.expect(r"Running bash… \d+\.\ds")
    term.sendline("also check the tests")
    term.expect("↳ steering: also check the tests")
    term.sendline(">> then write docs")
    term.expect("↳ queued follow-up: then write docs")

    def release() -> None:
        with open(fifo, "w") as f:
            f.write("go\n")

    writer = threading.Thread(target=release)
    writer.start()
    writer.join(timeout=20)
    assert not writer.is_alive()
    term.expect("↳ delivered: also check the tests")
    term.expect("after steering")
    term.expect("↳ delivered: then write docs")
    term.expect("after follow-up")
    term.expect(r"· 3 turns")
    term.sendline("/exit")
    assert term.wait_exit() == 0


def test_slash_commands(env: Env, terminals: list[Terminal]) -> None:
    term = _start(env, terminals, env.script(["hi"]))
    term.sendline("/help")
    term.expect(r"/model \[provider:id\]  show or switch the model")
    term.sendline("/model")
    term.expect("model: scripted:scripted-model")
    term.sendline("/model nosuch:thing")
    term.expect("cannot use model 'nosuch:thing': Unknown provider 'nosuch'")
    term.sendline("/thinking")
    term.expect("thinking: off")
    term.sendline("/thinking high")
    term.expect("thinking: high")
    term.sendline("/thinking extreme")
    term.expect("unknown thinking level 'extreme'; one of off, minimal, low, medium, high, xhigh")
    term.sendline("/tools")
    term.expect("read     Read a file from the workspace.")
    term.expect(r"ls\s+")
    term.sendline("/mode")
    term.expect("permission mode: default")
    term.sendline("/mode plan")
    term.expect("permission mode: plan")
    term.expect("mode plan ")
    term.sendline("hello")
    term.expect(r"· 1 turn")
    term.sendline("/cost")
    term.expect(r"1 model call · input \d+ · output 1 · cache read 0 · cache write 0 · total \d+ tokens · \$0\.0000")
    term.sendline("/clear")
    term.expect("conversation cleared")
    term.sendline("/nope")
    term.expect("unknown command /nope; /help lists the commands")
    term.sendline("/quit")
    assert term.wait_exit() == 0


def test_headless_run_in_a_terminal_asks_on_the_terminal(env: Env, terminals: list[Terminal]) -> None:
    script = env.script(
        [
            call_reply(("c1", "write", {"path": "a.txt", "content": "x\n"})),
            call_reply(("c2", "bash", {"command": "touch b.txt"})),
            text_reply("finished"),
        ]
    )
    term = Terminal(env, "run", "-o", "stream-json", "--model", f"scripted:{script}", "make files")
    terminals.append(term)
    term.expect("ketch wants to run write a.txt")
    term.expect(r"\[y\] allow once  \[a\] always \(write\)  \[n\] deny \(optionally: n <reason>\)")
    term.sendline("y")
    term.expect("ketch wants to run bash touch b.txt")
    term.sendline("n not today")
    term.expect(r'"text":"Permission denied by the user\. Reason: not today"')
    term.expect('"type":"result","end_reason":"stop"')
    assert term.wait_exit() == 0
    assert sorted(p.name for p in env.work.iterdir()) == ["a.txt"]


def test_headless_run_in_a_terminal_notifies_hooks_when_it_asks(env: Env, terminals: list[Terminal]) -> None:
    log = env.home / "notifications.txt"
    hook = env.home / "notify.sh"
    hook.write_text(f"#!/bin/sh\ncat >> {log}\necho >> {log}\n")
    hook.chmod(0o755)
    env.user_config(f'[[hooks.Notification]]\n[[hooks.Notification.hooks]]\ncommand = "{hook}"\n')
    script = env.script([call_reply(("c1", "write", {"path": "a.txt", "content": "x\n"})), text_reply("finished")])
    term = Terminal(env, "run", "-o", "stream-json", "--model", f"scripted:{script}", "make a file")
    terminals.append(term)
    term.expect("ketch wants to run write a.txt")
    term.sendline("y")
    term.expect('"type":"result","end_reason":"stop"')
    assert term.wait_exit() == 0
    events = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    assert [(e["hook_event_name"], e["message"], e["notification_type"]) for e in events] == [
        ("Notification", "ketch needs your permission to use write", "permission_prompt")
    ]


def test_headless_run_in_a_terminal_saves_an_always_rule_where_the_user_picks(env: Env, terminals: list[Terminal]) -> None:
    script = env.script(
        [
            call_reply(("c1", "write", {"path": "a.txt", "content": "x\n"})),
            call_reply(("c2", "write", {"path": "b.txt", "content": "y\n"})),
            text_reply("finished"),
        ]
    )
    term = Terminal(env, "run", "-o", "stream-json", "--model", f"scripted:{script}", "make files")
    terminals.append(term)
    term.expect("ketch wants to run write a.txt")
    term.sendline("a")
    term.expect(r"Save the rule: \[s\] this session only  \[u\] user  \[p\] project  \[l\] local")
    term.sendline("u")
    user = env.xdg / "ketch" / "config.toml"
    term.expect(f"ketch: saved allow rule write to {re.escape(str(user))}")
    between = term.expect('"type":"result","end_reason":"stop"')
    assert "wants to run" not in between  # b.txt is covered by the saved rule
    assert term.wait_exit() == 0
    assert tomllib.loads(user.read_text()) == {"permissions": {"allow": ["write"]}}
    assert sorted(p.name for p in env.work.iterdir()) == ["a.txt", "b.txt"]


def test_the_to_do_list_shows_as_a_checklist(env: Env, terminals: list[Terminal]) -> None:
    todos = [
        {"content": "Read the parser", "status": "completed"},
        {"content": "Fix the bug", "status": "in_progress", "priority": "high"},
        {"content": "Run the tests", "status": "pending"},
    ]
    script = env.script([call_reply(("t1", "todo_write", {"todos": todos})), text_reply("planned")])
    term = _start(env, terminals, script)
    term.sendline("plan it")
    term.expect(r"⏺ todo_write\(3 items\)")
    term.expect("⎿ ☒ Read the parser")
    term.expect("◐ Fix the bug")
    term.expect("☐ Run the tests")
    term.expect("planned")
    term.sendline("/exit")
    assert term.wait_exit() == 0
