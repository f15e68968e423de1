"""``ketch run --input-format stream-json -o stream-json`` as a subprocess on scripted
models: a multi-turn session driven by JSON lines on stdin."""

from __future__ import annotations

import json
import os
import queue
import threading
from pathlib import Path
from typing import Any

from clihelp import Env
from clihelp import call_reply
from clihelp import shape
from clihelp import text_reply

TIMEOUT = 60  # a guard against a hung child only; nothing waits on time


class Controlled:
    """``ketch run --input-format stream-json -o stream-json *args`` with pipes; lines
    are read as they come and consumed in order with :meth:`until`."""

    def __init__(self, env: Env, *args: str, extra: dict[str, str] | None = None) -> None:
        self.proc = env.popen("run", "--input-format", "stream-json", "-o", "stream-json", *args, extra=extra)
        self._lines: queue.Queue[dict[str, Any] | None] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self._lines.put(json.loads(line))
        self._lines.put(None)

    def send(self, command: dict[str, Any] | str) -> None:
        """Write one line (a command object, or raw text as it is)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write((command if isinstance(command, str) else json.dumps(command)) + "\n")
        self.proc.stdin.flush()

    def next(self) -> dict[str, Any]:
        """The next line of output."""
        line = self._lines.get(timeout=TIMEOUT)
        assert line is not None, f"ketch exited: {self.proc.wait()} {self.proc.stderr.read() if self.proc.stderr else ''}"
        return line

    def until(self, kind: str, **match: Any) -> list[dict[str, Any]]:
        """The lines up to and including the next one of type ``kind`` (with these fields)."""
        out: list[dict[str, Any]] = []
        while True:
            line = self.next()
            out.append(line)
            if line["type"] == kind and all(line.get(k) == v for k, v in match.items()):
                return out

    def close(self) -> tuple[int, list[dict[str, Any]], str]:
        """End the input; the exit code, the remaining lines and stderr."""
        assert self.proc.stdin is not None and self.proc.stderr is not None
        self.proc.stdin.close()
        rest: list[dict[str, Any]] = []
        while (line := self._lines.get(timeout=TIMEOUT)) is not None:
            rest.append(line)
        code = self.proc.wait(timeout=TIMEOUT)
        return code, rest, self.proc.stderr.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _text_run(reply_deltas: int = 1) -> list[str]:
    return [
        "agent_start",
        "turn_start",
        "message_start:user",
        "message_end:user",
        "message_start:assistant",
        "update:text_start",
        *["update:text_delta"] * reply_deltas,
        "update:text_end",
        "message_end:assistant",
        "turn_end",
        "agent_end",
        "result",
    ]


def _user_texts(lines: list[dict[str, Any]]) -> list[str]:
    return [
        b["text"]
        for e in lines
        if e["type"] == "message_end" and e["message"]["role"] == "user"
        for b in e["message"]["content"]
    ]


def _gate(env: Env) -> Path:
    """A named pipe in the workspace: ``read x < gate`` in bash blocks until :func:`_open`."""
    path = env.work / "gate"
    os.mkfifo(path)
    return path


def _open(gate: Path) -> None:
    with gate.open("w") as f:
        f.write("go\n")


WAIT = ("g1", "bash", {"command": "read x < gate"})


def _wait_reply() -> dict[str, Any]:
    """A bash call that blocks on the gate (its arguments streamed in one delta)."""
    return call_reply(WAIT, chunk_size=1000)


def test_multi_turn_session_keeps_the_conversation(env: Env) -> None:
    script = env.script([text_reply("First."), text_reply("Second.")])
    c = Controlled(env, "--model", f"scripted:{script}")
    try:
        init = c.next()
        assert (init["type"], init["model"], len(init["session_id"])) == ("init", "scripted:scripted-model", 32)
        c.send({"type": "user", "text": "one", "id": "a"})
        first = c.until("result")
        assert first[0] == {"type": "ack", "id": "a", "command": "user", "as": "prompt"}
        assert shape(first[1:]) == _text_run()
        assert (first[-1]["text"], first[-1]["end_reason"], first[-1]["session_id"]) == ("First.", "stop", init["session_id"])
        c.send({"type": "user", "text": "two", "id": 7})
        second = c.until("result")
        assert second[0] == {"type": "ack", "id": 7, "command": "user", "as": "prompt"}
        assert shape(second[1:]) == _text_run()
        assert second[-1]["text"] == "Second."
        code, rest, err = c.close()
        assert (code, rest, err) == (0, [], "")
    finally:
        c.kill()
    show = env.run("sessions", "show", init["session_id"])
    assert show.stdout == "user: one\nassistant: First.\nuser: two\nassistant: Second.\n"


def test_steering_while_active_reaches_the_next_turn(env: Env) -> None:
    gate = _gate(env)
    script = env.script([_wait_reply(), text_reply("Steered.")])
    c = Controlled(env, "--model", f"scripted:{script}", "--permission-mode", "bypass", "--no-session")
    try:
        c.next()
        c.send({"type": "user", "text": "start", "id": 1})
        before = c.until("tool_execution_start")
        c.send({"type": "user", "text": "also mind the tests", "id": 2})
        ack = c.until("ack")
        _open(gate)
        after = c.until("result")
        assert ack == [{"type": "ack", "id": 2, "command": "user", "as": "steer"}]
        assert shape(before + ack + after) == [
            "ack",
            "agent_start",
            "turn_start",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "update:toolcall_start",
            "update:toolcall_delta",
            "update:toolcall_end",
            "message_end:assistant",
            "tool_execution_start:g1",
            "ack",
            "tool_call_note",
            "tool_execution_end:g1",
            "message_start:tool_result",
            "message_end:tool_result",
            "turn_end",
            "turn_start",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "update:text_start",
            "update:text_delta",
            "update:text_end",
            "message_end:assistant",
            "turn_end",
            "agent_end",
            "result",
        ]
        assert _user_texts(before + after) == ["start", "also mind the tests"]
        assert after[-1]["text"] == "Steered."
        assert after[-1]["turns"] == 2
        assert (c.close()[0]) == 0
    finally:
        c.kill()


def test_follow_up_runs_when_the_agent_would_stop(env: Env) -> None:
    gate = _gate(env)
    script = env.script([_wait_reply(), text_reply("Done."), text_reply("Followed.")])
    c = Controlled(env, "--model", f"scripted:{script}", "--permission-mode", "bypass", "--no-session")
    try:
        c.next()
        c.send({"type": "user", "text": "start"})
        before = c.until("tool_execution_start")
        c.send({"type": "follow_up", "text": "then the docs", "id": "f"})
        ack = c.until("ack")
        _open(gate)
        after = c.until("result")
        assert ack == [{"type": "ack", "id": "f", "command": "follow_up", "as": "follow_up"}]
        events = shape(before + ack + after)
        # the follow-up comes after the answer that would have ended the run, in the same run
        answer = events.index("message_end:assistant", events.index("tool_execution_end:g1"))
        assert events[answer:] == [
            "message_end:assistant",
            "turn_end",
            "turn_start",
            "message_start:user",
            "message_end:user",
            "message_start:assistant",
            "update:text_start",
            "update:text_delta",
            "update:text_delta",
            "update:text_end",
            "message_end:assistant",
            "turn_end",
            "agent_end",
            "result",
        ]
        assert _user_texts(before + after) == ["start", "then the docs"]
        assert (after[-1]["text"], after[-1]["turns"]) == ("Followed.", 3)
        assert c.close()[0] == 0
    finally:
        c.kill()


def test_follow_up_when_idle_starts_a_run(env: Env) -> None:
    script = env.script([text_reply("Ran.")])
    c = Controlled(env, "--model", f"scripted:{script}", "--no-session")
    try:
        c.next()
        c.send({"type": "follow_up", "text": "go"})
        lines = c.until("result")
        assert lines[0] == {"type": "ack", "command": "follow_up", "as": "prompt"}
        assert lines[-1]["text"] == "Ran."
        assert c.close()[0] == 0
    finally:
        c.kill()


def test_interrupt_aborts_the_run_and_the_session_goes_on(env: Env) -> None:
    script = env.script([{"blocks": [{"type": "text", "text": "Working"}], "hang": True}, text_reply("Back.")])
    c = Controlled(env, "--model", f"scripted:{script}", "--no-session")
    try:
        c.next()
        c.send({"type": "user", "text": "long task"})
        c.until("message_update")
        c.send({"type": "interrupt", "id": "stop"})
        lines = c.until("result")
        assert [line for line in lines if line["type"] == "ack"] == [
            {"type": "ack", "id": "stop", "command": "interrupt", "running": True}
        ]
        result = lines[-1]
        assert (result["end_reason"], result["exit_code"], result["is_error"]) == ("aborted", 130, True)
        c.send({"type": "interrupt"})
        assert c.next() == {"type": "ack", "command": "interrupt", "running": False}
        c.send({"type": "user", "text": "again"})
        again = c.until("result")
        assert (again[0]["as"], again[-1]["end_reason"], again[-1]["text"]) == ("prompt", "stop", "Back.")
        assert c.close()[:2] == (0, [])
    finally:
        c.kill()


def test_interrupt_right_after_the_prompt_aborts_it(env: Env) -> None:
    """Both lines arrive together: the interrupt is read before the run has started."""
    script = env.script([text_reply("Never."), text_reply("Later.")])
    c = Controlled(env, "--model", f"scripted:{script}", "--no-session")
    try:
        c.next()
        c.send('{"type": "user", "text": "go"}\n{"type": "interrupt"}')
        lines = c.until("result")
        assert [line["type"] for line in lines[:2]] == ["ack", "ack"]
        assert lines[1] == {"type": "ack", "command": "interrupt", "running": True}
        assert lines[-1]["end_reason"] == "aborted"
        assert "Never." not in json.dumps(lines)
        assert c.close()[0] == 0
    finally:
        c.kill()


def test_set_model_applies_to_the_next_run(env: Env) -> None:
    first = env.script([text_reply("From A."), text_reply("A again.")], "a.json")
    second = env.script([text_reply("From B.")], "b.json")
    c = Controlled(env, "--model", f"scripted:{first}", "--no-session")
    try:
        c.next()
        c.send({"type": "user", "text": "one"})
        assert c.until("result")[-1]["text"] == "From A."
        c.send({"type": "control", "subtype": "set_model", "model": f"scripted:{second}", "id": 3})
        assert c.next() == {
            "type": "ack",
            "id": 3,
            "command": "control",
            "subtype": "set_model",
            "model": "scripted:scripted-model",
            "applies": "now",
        }
        c.send({"type": "user", "text": "two"})
        assert c.until("result")[-1]["text"] == "From B."
        assert c.close()[0] == 0
    finally:
        c.kill()


def test_set_model_while_running_waits_for_the_run_to_end(env: Env) -> None:
    gate = _gate(env)
    first = env.script([_wait_reply(), text_reply("From A.")], "a.json")
    second = env.script([text_reply("From B.")], "b.json")
    c = Controlled(env, "--model", f"scripted:{first}", "--permission-mode", "bypass", "--no-session")
    try:
        c.next()
        c.send({"type": "user", "text": "one"})
        c.until("tool_execution_start")
        c.send({"type": "control", "subtype": "set_model", "model": f"scripted:{second}"})
        ack = c.until("ack")[-1]
        assert (ack["subtype"], ack["applies"]) == ("set_model", "next_run")
        _open(gate)
        assert c.until("result")[-1]["text"] == "From A."
        c.send({"type": "user", "text": "two"})
        assert c.until("result")[-1]["text"] == "From B."
        assert c.close()[0] == 0
    finally:
        c.kill()


def _session_entries(env: Env, session_id: str) -> list[dict[str, Any]]:
    [path] = (env.home / ".local" / "share" / "ketch" / "sessions").glob(f"*/{session_id}.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_set_thinking_is_used_by_the_next_run(env: Env) -> None:
    script = env.script([text_reply("One."), text_reply("Two.")])
    c = Controlled(env, "--model", f"scripted:{script}")
    try:
        init = c.next()
        assert init["thinking"] == "off"
        c.send({"type": "user", "text": "one"})
        c.until("result")
        c.send({"type": "control", "subtype": "set_thinking", "level": "high"})
        assert c.next() == {"type": "ack", "command": "control", "subtype": "set_thinking", "thinking": "high", "applies": "now"}
        c.send({"type": "user", "text": "two"})
        c.until("result")
        assert c.close()[0] == 0
    finally:
        c.kill()
    levels = [e["payload"]["level"] for e in _session_entries(env, init["session_id"]) if e["type"] == "thinking_change"]
    assert levels == ["off", "high"]


def test_set_permission_mode_applies_at_once(env: Env) -> None:
    script = env.script(
        [
            call_reply(("w1", "write", {"path": "a.txt", "content": "A"})),
            text_reply("Could not."),
            call_reply(("w2", "write", {"path": "a.txt", "content": "A"})),
            text_reply("Wrote it."),
        ]
    )
    c = Controlled(env, "--model", f"scripted:{script}", "--permission-mode", "plan")
    try:
        init = c.next()
        assert init["permission_mode"] == "plan"
        c.send({"type": "user", "text": "write a.txt"})
        result = c.until("result")[-1]
        assert [d["tool_call_id"] for d in result["permission_denials"]] == ["w1"]
        assert not (env.work / "a.txt").exists()
        c.send({"type": "control", "subtype": "set_permission_mode", "mode": "accept-edits"})
        assert c.next() == {
            "type": "ack",
            "command": "control",
            "subtype": "set_permission_mode",
            "permission_mode": "accept_edits",
            "applies": "now",
        }
        c.send({"type": "user", "text": "now write it"})
        result = c.until("result")[-1]
        assert (result["end_reason"], result["permission_denials"], result["text"]) == ("stop", [], "Wrote it.")
        assert [d["decided_by"] for d in result["permission_decisions"]] == ["mode accept_edits"]
        assert (env.work / "a.txt").read_text() == "A"
        assert c.close()[0] == 0
    finally:
        c.kill()
    modes = [e["payload"]["mode"] for e in _session_entries(env, init["session_id"]) if e["type"] == "permission_mode_change"]
    assert modes == ["plan", "accept_edits"]


def test_approvals_answered_over_stdin(env: Env) -> None:
    script = env.script(
        [
            call_reply(("w1", "write", {"path": "a.txt", "content": "A"})),
            text_reply("Wrote a."),
            call_reply(
                ("w2", "write", {"path": "b.txt", "content": "B"}),
                ("w3", "write", {"path": "c.txt", "content": "wrong"}),
            ),
            text_reply("Done."),
            text_reply("Stopped."),
        ]
    )
    c = Controlled(env, "--model", f"scripted:{script}", "--no-session")
    try:
        c.next()
        c.send({"type": "user", "text": "write a"})
        paused = c.until("result")
        result = paused[-1]
        assert (result["end_reason"], result["exit_code"]) == ("approval_required", 5)
        assert [(p["tool_call_id"], p["tool_name"], p["args"]) for p in result["pending_approvals"]] == [
            ("w1", "write", {"path": "a.txt", "content": "A"})
        ]
        assert "approval_required" in shape(paused)
        c.send({"type": "approve", "call_id": "w1", "id": "ok"})
        resumed = c.until("result")
        assert resumed[0] == {"type": "ack", "id": "ok", "command": "approve", "call_id": "w1", "as": "resume", "waiting": []}
        assert (resumed[-1]["end_reason"], resumed[-1]["text"]) == ("stop", "Wrote a.")
        assert (env.work / "a.txt").read_text() == "A"

        c.send({"type": "user", "text": "write b and c"})
        result = c.until("result")[-1]
        # calls start in order: the run pauses on w2; w3 has not asked yet
        assert [p["tool_call_id"] for p in result["pending_approvals"]] == ["w2"]
        c.send({"type": "user", "text": "and then stop"})
        assert c.next() == {"type": "ack", "command": "user", "as": "follow_up"}
        c.send({"type": "deny", "call_id": "w2", "reason": "not b"})
        lines = c.until("result")
        assert lines[0] == {"type": "ack", "command": "deny", "call_id": "w2", "as": "resume", "waiting": []}
        assert [p["tool_call_id"] for p in lines[-1]["pending_approvals"]] == ["w3"]
        c.send({"type": "edit", "call_id": "w3", "args": {"path": "c.txt", "content": "C"}})
        lines += c.until("result")
        assert (lines[-1]["end_reason"], lines[-1]["text"]) == ("stop", "Stopped.")
        results = {
            e["message"]["tool_call_id"]: (e["message"].get("is_error", False), e["message"]["content"][0]["text"])
            for e in lines
            if e["type"] == "message_end" and e["message"]["role"] == "tool_result"
        }
        assert results["w2"] == (True, "Permission denied by the user. Reason: not b")
        assert results["w3"][0] is False
        assert not (env.work / "b.txt").exists()
        assert (env.work / "c.txt").read_text() == "C"
        assert _user_texts(lines) == ["and then stop"]  # the prompt sent meanwhile followed the resumed run
        assert c.close()[0] == 0
    finally:
        c.kill()


def test_a_paused_session_is_resumed_by_another_process(env: Env) -> None:
    script = env.script([call_reply(("w1", "write", {"path": "a.txt", "content": "A"})), text_reply("Wrote it.")])
    c = Controlled(env, "--model", f"scripted:{script}")
    try:
        session_id = c.next()["session_id"]
        c.send({"type": "user", "text": "write a"})
        assert c.until("result")[-1]["end_reason"] == "approval_required"
        assert c.close() == (0, [], "")
    finally:
        c.kill()
    script = env.script([text_reply("Wrote it.")], "rest.json")
    c = Controlled(env, "--model", f"scripted:{script}", "--resume", session_id)
    try:
        assert c.next()["type"] == "init"
        assert c.next() == {
            "type": "approval_pending",
            "session_id": session_id,
            "pending_approvals": [
                {
                    "tool_call_id": "w1",
                    "tool_name": "write",
                    "args": {"path": "a.txt", "content": "A"},
                    "reason": "write needs approval (mode default)",
                }
            ],
        }
        c.send({"type": "approve", "call_id": "w1"})
        lines = c.until("result")
        assert (lines[-1]["end_reason"], lines[-1]["text"]) == ("stop", "Wrote it.")
        assert (env.work / "a.txt").read_text() == "A"
        assert c.close()[0] == 0
    finally:
        c.kill()


BAD_LINES: list[tuple[str, str]] = [
    ("not json", 'not JSON (JSON is malformed: invalid character (byte 4)); each line must be one JSON object such as {"type": "user", "text": "…"}'),
    ("[1, 2]", 'expected a JSON object such as {"type": "user", "text": "…"}, got an array'),
    ('{"text": "hi"}', 'missing "type"; expected one of user, follow_up, interrupt, control, approve, deny, edit'),
    ('{"type": "shout"}', "unknown type 'shout'; expected one of user, follow_up, interrupt, control, approve, deny, edit"),
    ('{"type": 3}', "unknown type a number; expected one of user, follow_up, interrupt, control, approve, deny, edit"),
    ('{"type": "user"}', 'user: missing "text" (a string)'),
    ('{"type": "follow_up", "text": ["a"]}', 'follow_up: "text" must be a string, got an array'),
    ('{"type": "user", "text": "x", "id": [1]}', '"id" must be a string or an integer, got an array'),
    ('{"type": "control"}', 'control: missing "subtype" (a string)'),
    ('{"type": "control", "subtype": "reboot"}', "control: \"subtype\" 'reboot' is not one of set_model, set_permission_mode, set_thinking"),
    ('{"type": "control", "subtype": "set_thinking", "level": "max"}', "control set_thinking: \"level\" 'max' is not one of off, minimal, low, medium, high, xhigh"),
    ('{"type": "control", "subtype": "set_permission_mode", "mode": "yolo"}', "control set_permission_mode: \"mode\" 'yolo' is not one of default, accept_edits, plan, bypass (or accept-edits)"),
    ('{"type": "control", "subtype": "set_model"}', 'control set_model: missing "model" (a string)'),
    ('{"type": "control", "subtype": "set_model", "model": "scripted:/nonexistent.json"}', "control set_model: cannot read model script /nonexistent.json: No such file or directory"),
    ('{"type": "approve", "call_id": "c1"}', "approve c1: no run is paused; approve, deny and edit answer the pending_approvals of a result"),
    ('{"type": "deny"}', 'deny: missing "call_id" (a string)'),
]


def test_bad_lines_get_an_error_line_and_the_session_goes_on(env: Env) -> None:
    script = env.script([text_reply("Still here.")])
    c = Controlled(env, "--model", f"scripted:{script}", "--no-session")
    try:
        c.next()
        for n, (line, _) in enumerate(BAD_LINES, 1):
            c.send(line)
            c.send({"type": "interrupt", "id": n})  # every bad line is answered before the next
        answers = [c.next() for _ in range(2 * len(BAD_LINES))]
        expected: list[dict[str, Any]] = []
        for n, (_, error) in enumerate(BAD_LINES, 1):
            bad = {"type": "error", "line": 2 * n - 1, "error": error}
            expected += [bad, {"type": "ack", "id": n, "command": "interrupt", "running": False}]
        assert answers == expected
        c.send({"type": "deny", "call_id": "c1", "id": "x"})
        assert c.next() == {
            "type": "error",
            "id": "x",
            "line": 2 * len(BAD_LINES) + 1,
            "error": "deny c1: no run is paused; approve, deny and edit answer the pending_approvals of a result",
        }
        c.send("")  # blank lines are skipped
        c.send({"type": "user", "text": "hello"})
        lines = c.until("result")
        assert (lines[0]["as"], lines[-1]["text"]) == ("prompt", "Still here.")
        assert c.close() == (0, [], "")
    finally:
        c.kill()


def test_invalid_utf8_is_replaced(env: Env) -> None:
    script = env.script([text_reply("Ok.")])
    c = Controlled(env, "--model", f"scripted:{script}", "--no-session")
    try:
        c.next()
        assert c.proc.stdin is not None
        c.proc.stdin.buffer.write(b'{"type": "user", "text": "caf\xe9"}\n')  # type: ignore[attr-defined]
        c.proc.stdin.flush()
        lines = c.until("result")
        assert _user_texts(lines) == ["caf\ufffd"]
        assert c.close()[0] == 0
    finally:
        c.kill()


def test_end_of_input_waits_for_the_active_run(env: Env) -> None:
    script = env.script([call_reply(("c1", "ls", {})), text_reply("Listed.")])
    c = Controlled(env, "--model", f"scripted:{script}", "--no-session")
    try:
        c.next()
        c.send({"type": "user", "text": "list"})
        code, rest, err = c.close()
        assert (code, err) == (0, "")
        assert rest[0]["type"] == "ack"
        assert (rest[-1]["type"], rest[-1]["text"]) == ("result", "Listed.")
    finally:
        c.kill()


def test_sigterm_aborts_the_run_and_ends_the_session(env: Env) -> None:
    import signal

    script = env.script([{"blocks": [{"type": "text", "text": "Working"}], "hang": True}])
    c = Controlled(env, "--model", f"scripted:{script}", "--no-session")
    try:
        c.next()
        c.send({"type": "user", "text": "long"})
        c.until("message_update")
        c.proc.send_signal(signal.SIGTERM)
        result = c.until("result")[-1]
        assert result["end_reason"] == "aborted"
        assert c.proc.wait(timeout=TIMEOUT) == 130
    finally:
        c.kill()


def test_usage_errors(env: Env) -> None:
    proc = env.run("run", "--input-format", "stream-json", "--model", "scripted:x.json")
    assert (proc.returncode, proc.stdout, proc.stderr) == (
        2,
        "",
        "ketch: --input-format stream-json needs -o stream-json (got -o text)\n",
    )
    proc = env.run("run", "--input-format", "stream-json", "-o", "stream-json", "task")
    assert (proc.returncode, proc.stderr) == (
        2,
        'ketch: --input-format stream-json: the prompts come as JSON lines on stdin ({"type": "user", "text": "…"}), not as an argument\n',
    )
    proc = env.run("run", "--input-format", "yaml")
    assert proc.returncode == 2
    assert proc.stderr.startswith("ketch: argument --input-format: invalid choice: 'yaml'")


def test_a_line_over_the_limit_is_refused(env: Env) -> None:
    script = env.script([text_reply("Fine.")])
    c = Controlled(env, "--model", f"scripted:{script}", "--no-session")
    try:
        c.next()
        c.send('{"type": "user", "text": "' + "x" * (17 * 1024 * 1024) + '"}')
        assert c.next() == {
            "type": "error",
            "line": 1,
            "error": "the line is longer than 16 MiB; send large text in smaller messages",
        }
        c.send({"type": "user", "text": "short"})
        assert c.until("result")[-1]["text"] == "Fine."
        assert c.close()[0] == 0
    finally:
        c.kill()


def test_resume_with_approve_flag_continues_at_once_and_set_model_waits_for_decisions(env: Env) -> None:
    script = env.script(
        [
            call_reply(("w1", "write", {"path": "a.txt", "content": "A"})),
            text_reply("Wrote a."),
            call_reply(("w2", "write", {"path": "b.txt", "content": "B"})),
        ]
    )
    c = Controlled(env, "--model", f"scripted:{script}")
    try:
        session_id = c.next()["session_id"]
        c.send({"type": "user", "text": "write a"})
        assert c.until("result")[-1]["pending_approvals"][0]["tool_call_id"] == "w1"
        assert c.close()[0] == 0
    finally:
        c.kill()
    script = env.script([text_reply("Wrote a."), call_reply(("w2", "write", {"path": "b.txt", "content": "B"}))], "rest.json")
    c = Controlled(env, "--model", f"scripted:{script}", "--resume", session_id, "--approve", "w1")
    try:
        lines = c.until("result")
        assert lines[0]["type"] == "init" and lines[1]["type"] == "agent_start"
        assert (lines[-1]["end_reason"], lines[-1]["text"]) == ("stop", "Wrote a.")
        assert (env.work / "a.txt").read_text() == "A"
        c.send({"type": "user", "text": "write b"})
        assert c.until("result")[-1]["end_reason"] == "approval_required"
        c.send({"type": "control", "subtype": "set_model", "model": f"scripted:{script}"})
        assert c.next() == {
            "type": "error",
            "line": 2,
            "error": "control set_model: a run is paused for approval of w2 (write): decide those first "
            "(approve, deny or edit); the paused run resumes with its own model",
        }
        c.send({"type": "approve", "call_id": "w9"})
        assert c.next()["error"] == "approve w9: the paused run waits on no such call; it waits on w2 (write)"
        assert c.close()[0] == 0
    finally:
        c.kill()
