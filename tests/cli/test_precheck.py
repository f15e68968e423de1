"""A call the tool would refuse anyway (an edit or overwrite of a file not read yet) is
not asked about, nor paused for: the tool's message is its result at once."""

from __future__ import annotations

from clihelp import Env
from clihelp import Terminal
from clihelp import call_reply
from clihelp import lines
from clihelp import text_reply

from ketch.permissions import args_digest

NOT_READ = "f.py has not been read yet. Read it with the read tool before you {action} it."


def test_an_unread_edit_is_refused_without_a_question(env: Env, terminals: list[Terminal]) -> None:
    (env.work / "f.py").write_text("x = 1\n")
    edit = {"path": "f.py", "old_string": "x = 1", "new_string": "x = 2"}
    script = env.script(
        [
            call_reply(("c1", "edit", edit)),
            text_reply("it needs a read first"),
            call_reply(("c2", "read", {"path": "f.py"})),
            call_reply(("c3", "edit", edit)),
            text_reply("edited"),
        ]
    )
    term = Terminal(env, "--model", f"scripted:{script}")
    terminals.append(term)
    term.expect("/help for commands")
    term.sendline("change x")
    term.expect(NOT_READ.format(action="edit").replace(".", r"\."))
    term.expect(r"· 2 turns")
    assert "Allow?" not in term.seen and "wants to change" not in term.seen
    term.sendline("read it, then change x")
    term.expect(r"⚠ edit wants to change f\.py")  # once read, the edit is asked about
    term.expect(r"Allow\?")
    term.sendline("y")
    term.expect("edited")
    term.sendline("/exit")
    assert term.wait_exit() == 0
    assert (env.work / "f.py").read_text() == "x = 2\n"


def test_an_unread_overwrite_does_not_pause_the_run(env: Env) -> None:
    (env.work / "f.py").write_text("x = 1\n")
    args = {"path": "f.py", "content": "new\n"}
    script = env.script([call_reply(("c1", "write", args)), text_reply("could not")])
    done = env.run("run", "--model", f"scripted:{script}", "-o", "stream-json", "rewrite f.py")
    assert (done.returncode, done.stderr) == (0, "")
    events = lines(done.stdout)
    end = next(e for e in events if e["type"] == "tool_execution_end")
    assert (end["is_error"], end["result"]["content"]) == (
        True,
        [{"type": "text", "text": NOT_READ.format(action="overwrite")}],
    )
    result = events[-1]
    assert (result["end_reason"], result["pending_approvals"]) == ("stop", [])
    assert result["permission_decisions"] == [
        {
            "tool_name": "write",
            "tool_call_id": "c1",
            "args_digest": args_digest(args),
            "decided_by": "tool precheck",
            "outcome": "deny",
            "asked": False,
            "reason": NOT_READ.format(action="overwrite"),
        }
    ]
    assert (env.work / "f.py").read_text() == "x = 1\n"


def test_a_new_file_is_still_asked_about(env: Env) -> None:
    script = env.script([call_reply(("c1", "write", {"path": "new.txt", "content": "hi\n"}))])
    done = env.run("run", "--model", f"scripted:{script}", "create it")
    assert done.returncode == 5  # paused for approval: a new file needs no read
    assert "write (c1) needs approval" in done.stderr
