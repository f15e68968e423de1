"""Sessions in the interactive ``ketch``: the ``--resume`` picker, ``/sessions``,
``/export``, ``/fork``, ``/rewind`` and ``/clear``, in a pseudo-terminal on scripted models."""

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


def _headless(env: Env, reply: str, task: str) -> str:
    script = env.script([text_reply(reply)], name=f"{reply}.json")
    proc = env.run("run", "-o", "json", "--model", f"scripted:{script}", task)
    assert proc.returncode == 0, proc.stderr
    session_id: str = json.loads(proc.stdout)["session_id"]
    return session_id


def _start(env: Env, terminals: list[Terminal], replies: list[Any], *args: str) -> Terminal:
    script = env.script(replies, name="interactive.json")
    term = Terminal(env, "--model", f"scripted:{script}", *args)
    terminals.append(term)
    return term


def _ready(term: Terminal, resumed: str | None = None) -> None:
    term.expect("/help for commands")
    if resumed is not None:
        term.expect(re.escape(resumed))
    term.expect("›")


def _show(env: Env, session_id: str) -> dict[str, Any]:
    proc = env.run("sessions", "show", session_id, "-o", "json")
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def _texts(data: dict[str, Any]) -> list[str]:
    return ["".join(b.get("text", "") for b in m.get("content", []) if b.get("type") == "text") for m in data["messages"]]


def test_resume_picker_lists_the_directory_and_resumes_the_choice(env: Env, terminals: list[Terminal]) -> None:
    older = _headless(env, "one", "first task")
    newer = _headless(env, "two", "second task")
    term = _start(env, terminals, [text_reply("three")], "--resume")
    term.expect(re.escape(f"1.   {newer}"))
    term.expect("second task")
    term.expect(re.escape(f"2.   {older}"))
    term.expect("first task")
    term.expect(r"Resume which session\? \[1-2, Enter: new\] ›")
    term.sendline("7")
    term.expect("'7' is not a number from 1 to 2")
    term.expect("Resume which session")
    term.sendline("2")
    _ready(term, f"resumed session {older} (2 messages)")
    term.sendline("and more")
    term.expect("three")
    term.expect(r"· 1 turn ·")
    term.sendline("/sessions")
    term.expect(re.escape(f"* {older}"))
    term.sendline("/export out.md")
    term.expect(re.escape(f"exported the session to {env.work / 'out.md'}"))
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert _texts(_show(env, older)) == ["first task", "one", "and more", "three"]
    exported = (env.work / "out.md").read_text()
    assert exported.startswith(f"# first task\n\n- Session: `{older}`\n")
    assert exported.endswith("## User\n\nand more\n\n## Assistant\n\nthree\n")


def test_resume_with_an_id_and_continue(env: Env, terminals: list[Terminal]) -> None:
    first = _headless(env, "one", "first task")
    term = _start(env, terminals, [text_reply("two")], "--resume", first[:8])
    _ready(term, f"resumed session {first} (2 messages)")
    term.sendline("/exit")
    assert term.wait_exit() == 0
    term = _start(env, terminals, [text_reply("two")], "--continue")
    _ready(term, f"resumed session {first} (2 messages)")
    term.sendline("/exit")
    assert term.wait_exit() == 0


def test_rewind_restores_files_and_conversation(env: Env, terminals: list[Terminal]) -> None:
    replies = [
        call_reply(("c1", "write", {"path": "a.txt", "content": "v1\n"})),
        text_reply("wrote v1"),
        call_reply(("c2", "write", {"path": "a.txt", "content": "v2\n"})),
        text_reply("wrote v2"),
    ]
    term = _start(env, terminals, replies, "--permission-mode", "accept_edits")
    _ready(term)
    term.sendline("make v1")
    term.expect("wrote v1")
    term.expect(r"· 2 turns ·")
    term.sendline("make v2")
    term.expect("wrote v2")
    term.expect(r"· 2 turns ·")
    assert (env.work / "a.txt").read_text() == "v2\n"
    term.sendline("/rewind")
    term.expect(r"  1\. make v1")
    term.expect(r"  2\. make v2")
    term.sendline("/rewind 3")
    term.expect(r"/rewind 3: expected a prompt number from 1 to 2 \(/rewind lists them\)")
    term.sendline("/rewind 2")
    term.expect("rewound to before prompt 2: make v2")
    term.expect("files restored: a.txt")
    assert (env.work / "a.txt").read_text() == "v1\n"
    term.sendline("/rewind")
    term.expect(r"  1\. make v1")
    term.sendline("/rewind 1")
    term.expect("rewound to before prompt 1: make v1")
    term.expect("files restored: a.txt")
    assert not (env.work / "a.txt").exists()
    term.sendline("/rewind")
    term.expect("nothing to rewind: no prompt yet")
    term.sendline("/exit")
    assert term.wait_exit() == 0
    (info,) = json.loads(env.run("sessions", "list", "-o", "json").stdout)
    assert _show(env, info["id"])["messages"] == []


def test_fork_continues_in_a_copy_and_clear_starts_a_new_session(env: Env, terminals: list[Terminal]) -> None:
    replies = [text_reply("one"), text_reply("two"), text_reply("three")]
    term = _start(env, terminals, replies)
    _ready(term)
    term.sendline("/fork")
    term.expect("nothing to fork yet: the conversation is empty")
    term.sendline("first")
    term.expect("one")
    term.expect(r"· 1 turn ·")
    term.sendline("/fork")
    term.expect(r"forked session ([0-9a-f]{32}) as ([0-9a-f]{32}); you are now in the fork")
    found = re.search(r"forked session ([0-9a-f]{32}) as ([0-9a-f]{32})", term.seen)
    assert found is not None
    original, fork = found.groups()
    term.sendline("in the fork")
    term.expect("two")
    term.expect(r"· 1 turn ·")
    term.sendline("/clear")
    term.expect("conversation cleared")
    term.sendline("fresh")
    term.expect("three")
    term.expect(r"· 1 turn ·")
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert _texts(_show(env, original)) == ["first", "one"]
    assert _texts(_show(env, fork)) == ["first", "one", "in the fork", "two"]
    listing = json.loads(env.run("sessions", "list", "-o", "json").stdout)
    assert len(listing) == 3
    by_id = {i["id"]: i for i in listing}
    fields = {"id", "cwd", "title", "created", "updated", "message_count", "cost", "forked_from"}
    assert all(set(i) == fields for i in listing)
    assert by_id[fork]["forked_from"] == [original, by_id[fork]["forked_from"][1]]
    assert by_id[original]["forked_from"] is None and by_id[fork]["title"] == "first"
    (fresh,) = [i for i in listing if i["id"] not in (original, fork)]
    assert _texts(_show(env, fresh["id"])) == ["fresh", "three"]


def test_no_session_in_the_interactive_session(env: Env, terminals: list[Terminal]) -> None:
    term = _start(env, terminals, [text_reply("one")], "--no-session")
    _ready(term)
    term.sendline("/sessions")
    term.expect(r"this session is not saved \(--no-session\)")
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert not (env.home.parent / "ketch-home").exists()


def test_a_paused_run_is_continued_after_the_question(env: Env, terminals: list[Terminal]) -> None:
    script = env.script([call_reply(("c1", "write", {"path": "a.txt", "content": "hello\n"}))], name="paused.json")
    proc = env.run("run", "-o", "json", "--model", f"scripted:{script}", "create a.txt")
    assert proc.returncode == 5, proc.stderr
    session_id = json.loads(proc.stdout)["session_id"]
    term = _start(env, terminals, [text_reply("Created it.")], "--resume", session_id)
    _ready(term, f"resumed session {session_id} (2 messages)")
    term.expect(r"⚠ the paused run waits for approval: write\(a\.txt\)")
    term.expect(r"Allow\? \[y\] once")
    term.sendline("y")
    term.expect(r"Created a\.txt \(6 bytes, 1 line\)\.")
    term.expect("Created it.")
    term.expect(r"· 2 turns ·")  # the paused run's turn and this one
    assert (env.work / "a.txt").read_text() == "hello\n"
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert _texts(_show(env, session_id)) == ["create a.txt", "", "Created a.txt (6 bytes, 1 line).", "Created it."]


def test_approve_on_a_terminal_does_not_ask_again(env: Env, terminals: list[Terminal]) -> None:
    script = env.script([call_reply(("c1", "write", {"path": "a.txt", "content": "hello\n"}))], name="paused.json")
    proc = env.run("run", "-o", "json", "--model", f"scripted:{script}", "create a.txt")
    assert proc.returncode == 5, proc.stderr
    session_id = json.loads(proc.stdout)["session_id"]
    replies = env.script([text_reply("Created it.")], name="rest.json")
    term = Terminal(env, "run", "--model", f"scripted:{replies}", "--resume", session_id, "--approve", "c1")
    terminals.append(term)
    term.expect("Created it.")
    assert term.wait_exit() == 0
    assert "wants to run" not in term.seen
    assert (env.work / "a.txt").read_text() == "hello\n"


def test_rewind_undoes_what_bash_did(env: Env, terminals: list[Terminal]) -> None:
    original = {"a.txt": b"one\r\ntwo", "b.bin": bytes(range(256)), "c.txt": b"moved\n"}
    for name, data in original.items():
        (env.work / name).write_bytes(data)
    command = "sed -i s/one/ONE/ a.txt && rm b.bin && mv c.txt d.txt && head -c 11000000 /dev/zero > big.bin"
    replies = [call_reply(("c1", "bash", {"command": command})), text_reply("changed")]
    term = _start(env, terminals, replies, "--permission-mode", "accept_edits")
    _ready(term)
    term.sendline("change them")
    term.expect("changed")
    term.expect(r"· 2 turns ·")
    assert (env.work / "a.txt").read_bytes() == b"ONE\r\ntwo"
    assert not (env.work / "b.bin").exists()
    term.sendline("/rewind 1")
    term.expect("rewound to before prompt 1: change them")
    term.expect("files restored: a.txt, b.bin, c.txt, d.txt")
    term.expect(r"not restored, their earlier content was not saved \(too big, unreadable\): big.bin")
    assert {name: (env.work / name).read_bytes() for name in original} == original
    assert sorted(p.name for p in env.work.iterdir() if not p.name.startswith(".")) == ["a.txt", "b.bin", "big.bin", "c.txt"]
    term.sendline("/exit")
    assert term.wait_exit() == 0
