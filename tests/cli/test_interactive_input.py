"""The interactive session as users of Claude Code and Codex expect it: multi-line input,
completion of slash commands and ``@`` paths, ``@file`` attachments, what approvals show,
the spinner's word, resuming after a rewind, and the resume hint on exit."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from clihelp import Env
from clihelp import Terminal
from clihelp import call_reply
from clihelp import text_reply


@pytest.fixture(autouse=True)
def _store(env: Env, tmp_path: Path) -> None:
    env.vars["KETCH_HOME"] = str(tmp_path / "ketch-home")


def _start(env: Env, terminals: list[Terminal], replies: list[Any], *args: str) -> Terminal:
    script = env.script(replies, name="interactive.json")
    term = Terminal(env, "--model", f"scripted:{script}", *args)
    terminals.append(term)
    term.expect("/help for commands")
    term.expect("›")
    return term


def _exit(term: Terminal) -> str:
    """Leave with /exit; the id of the session the exit hint names."""
    term.sendline("/exit")
    term.expect(r"Resume this session with: ketch --resume ([0-9a-f]{32})")
    match = term.child.match
    assert match is not None
    session_id = match.group(1)
    assert term.wait_exit() == 0
    return str(session_id)


def _user_texts(env: Env, session_id: str) -> list[str]:
    proc = env.run("sessions", "show", session_id, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    messages = json.loads(proc.stdout)["messages"]
    return [
        "".join(b.get("text", "") for b in m["content"] if b.get("type") == "text") for m in messages if m["role"] == "user"
    ]


# -- multi-line input -----------------------------------------------------------------------------
def test_alt_enter_and_a_backslash_start_new_lines(env: Env, terminals: list[Terminal]) -> None:
    term = _start(env, terminals, [text_reply("three lines"), text_reply("sent")])
    term.child.send("first\x1b\r")  # Alt-Enter (Esc, Enter)
    term.child.send("second\\\r")  # a backslash before Enter
    term.sendline("third")
    term.expect("three lines")
    term.expect(r"· 1 turn")
    term.child.send("typed ahead\n")  # an Enter typed before the terminal is raw arrives as LF: it sends
    term.expect("sent")
    session_id = _exit(term)
    assert _user_texts(env, session_id) == ["first\nsecond\nthird", "typed ahead"]


# -- completion ----------------------------------------------------------------------------------------
def test_tab_completes_slash_commands(env: Env, terminals: list[Terminal]) -> None:
    term = _start(env, terminals, [])
    term.child.send("/he")
    term.expect("this help")  # the menu shows what the command does
    term.child.send("\t")
    term.sendline("")
    term.expect("Commands:")
    term.child.send("/rew")
    term.expect("list your prompts")  # the menu is there: Tab takes its one entry
    term.child.send("\t")
    term.sendline("")
    term.expect("nothing to rewind: no prompt yet")
    term.sendline("/exit")
    assert term.wait_exit() == 0


def test_tab_completes_at_paths_and_the_file_is_attached(env: Env, terminals: list[Terminal]) -> None:
    (env.work / "notes").mkdir()
    (env.work / "notes" / "today.md").write_text("# Today\nship it\n")
    (env.work / ".hidden").write_text("no")
    term = _start(env, terminals, [text_reply("summarised")])
    term.child.send("summarise @no")
    term.expect("@notes/")  # the menu
    term.child.send("\t")  # -> @notes/
    term.child.send("to")
    term.expect("@notes/today.md")
    term.child.send("\t")  # -> @notes/today.md
    term.sendline("")
    term.expect(r"↳ attached @notes/today\.md \(2 lines\)")
    term.expect("summarised")
    session_id = _exit(term)
    (text,) = _user_texts(env, session_id)
    assert text.startswith("summarise @notes/today.md\n\nFiles the user attached (as the read tool shows them):\n")
    assert '<file path="notes/today.md">' in text and "# Today" in text and "ship it" in text


def test_at_mentions_follow_the_file_tools_rules(env: Env, terminals: list[Terminal]) -> None:
    (env.home / "outside.txt").write_text("outside secret")
    (env.work / "secret.env").write_text("TOKEN=abc")
    (env.work / "ok.txt").write_text("fine content")
    term = _start(env, terminals, [text_reply("looked")], "--deny", "Read(./secret.env)")
    term.sendline("look at @../home/outside.txt, @secret.env and @ok.txt. Mail me@example.com or @nobody")
    term.expect(r"@\.\./home/outside\.txt: not attached: Path '\.\./home/outside\.txt' is outside the workspace")
    term.expect(r"@secret\.env: not attached: Permission denied: the call matches the deny rule Read\(\./secret\.env\)\.")
    term.expect(r"↳ attached @ok\.txt \(1 line\)")
    term.expect("looked")
    session_id = _exit(term)
    (text,) = _user_texts(env, session_id)
    assert "fine content" in text
    assert "outside secret" not in text and "TOKEN=abc" not in text
    assert "nobody" not in text.split("Files the user attached")[1]


# -- approvals -------------------------------------------------------------------------------------------
def test_a_write_approval_shows_the_content_cut_with_a_count(env: Env, terminals: list[Terminal]) -> None:
    content = "".join(f"line {n}\n" for n in range(1, 61))
    term = _start(env, terminals, [call_reply(("c1", "write", {"path": "big.txt", "content": content})), text_reply("written")])
    term.sendline("write it")
    term.expect(r"⚠ write wants to write big\.txt \(60 lines\)")
    term.expect(r"--- /dev/null")
    term.expect(r"\+\+\+ b/big\.txt")
    term.expect(r"@@ -0,0 \+1,60 @@")
    term.expect(r"\+line 1\b")
    between = term.expect(r"… 23 more lines")
    assert "+line 37" in between and "+line 38" not in between
    term.expect(r"Allow\?")
    term.sendline("y")
    term.expect("written")
    term.sendline("/exit")
    assert term.wait_exit() == 0


def test_an_overwrite_approval_shows_the_diff(env: Env, terminals: list[Terminal]) -> None:
    (env.work / "a.txt").write_text("one\ntwo\n")
    replies = [
        call_reply(("c1", "read", {"path": "a.txt"})),
        call_reply(("c2", "write", {"path": "a.txt", "content": "one\nTWO\n"})),
        text_reply("rewritten"),
    ]
    term = _start(env, terminals, replies)
    term.sendline("rewrite")
    term.expect(r"⚠ write wants to write a\.txt \(2 lines\)")
    term.expect(r"--- a/a\.txt")
    term.expect(r"\+\+\+ b/a\.txt")
    term.expect(r"-two")
    term.expect(r"\+TWO")
    term.expect(r"Allow\?")
    term.sendline("n")
    term.expect("rewritten")
    term.sendline("/exit")
    assert term.wait_exit() == 0


def test_an_edit_approval_diff_names_the_file(env: Env, terminals: list[Terminal]) -> None:
    (env.work / "f.py").write_text("x = 1\n")
    replies = [
        call_reply(("c1", "read", {"path": "f.py"})),
        call_reply(("c2", "edit", {"path": "f.py", "old_string": "x = 1", "new_string": "x = 2"})),
        text_reply("done"),
    ]
    term = _start(env, terminals, replies)
    term.sendline("edit")
    term.expect(r"⚠ edit wants to change f\.py")
    term.expect(r"--- a/f\.py")
    term.expect(r"\+\+\+ b/f\.py")
    term.expect(r"Allow\?")
    term.sendline("n")
    term.expect("done")
    term.sendline("/exit")
    assert term.wait_exit() == 0


# -- the spinner's word ------------------------------------------------------------------------------------
def test_the_spinner_says_working_and_thinking_only_while_thinking(env: Env, terminals: list[Terminal]) -> None:
    replies = [{"hang": True}, {"blocks": [{"type": "thinking", "thinking": "Hmm."}], "hang": True}]
    term = _start(env, terminals, replies)
    term.sendline("wait")
    before = term.expect(r"Working… \d+\.\ds")
    assert "Thinking…" not in before
    term.ctrl("c")
    term.expect(r"· aborted · 1 turn")
    term.sendline("think")
    term.expect(r"Thinking… \d+\.\ds")
    term.ctrl("c")
    term.expect(r"· aborted · 1 turn")
    term.sendline("/exit")
    assert term.wait_exit() == 0


# -- resuming -------------------------------------------------------------------------------------------------
def test_after_a_rewind_the_picker_counts_what_is_resumed_and_the_transcript_is_redrawn(
    env: Env, terminals: list[Terminal]
) -> None:
    term = _start(env, terminals, [text_reply("answer one"), text_reply("answer two"), text_reply("answer three")])
    for prompt, answer in (("prompt one", "answer one"), ("prompt two", "answer two"), ("prompt three", "answer three")):
        term.sendline(prompt)
        term.expect(answer)
        term.expect(r"· 1 turn")
    term.sendline("/rewind 2")
    term.expect("rewound to before prompt 2: prompt two")
    session_id = _exit(term)

    term = Terminal(env, "--model", f"scripted:{env.script([text_reply('again')], name='again.json')}", "--resume")
    terminals.append(term)
    term.expect(re.escape(f"1.   {session_id}"))
    row = term.expect("prompt one")
    assert re.search(r"\s2\s+\$", row), row  # 2 messages: prompt one and its answer
    term.expect(r"Resume which session\?")
    term.sendline("1")
    term.expect("/help for commands")
    redrawn = term.expect(re.escape(f"resumed session {session_id} (2 messages)"))
    assert "› prompt one" in redrawn and "answer one" in redrawn
    assert "prompt two" not in redrawn and "answer two" not in redrawn
    term.sendline("/exit")
    term.expect(re.escape(f"Resume this session with: ketch --resume {session_id}"))
    assert term.wait_exit() == 0


def test_no_resume_hint_without_a_conversation_or_a_session(env: Env, terminals: list[Terminal]) -> None:
    term = _start(env, terminals, [])
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert "Resume this session" not in term.seen
    term = _start(env, terminals, [text_reply("hi")], "--no-session")
    term.sendline("hello")
    term.expect(r"· 1 turn")
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert "Resume this session" not in term.seen
