"""``ketch replay`` on scripted models: a saved session rerun with the tool calls answered
from the recording, the report of where the decisions diverge, and bad input."""

from __future__ import annotations

import json
from pathlib import Path

from clihelp import Env
from clihelp import call_reply

RECORDED = [
    call_reply(("c1", "read", {"path": "a.txt"})),
    call_reply(("c2", "ls", {"path": "."})),
    call_reply(("c3", "read", {"path": "b.txt"})),
    "Done.",
]


def record(env: Env) -> str:
    """Run a task that reads and lists files; returns its session's id."""
    (env.work / "a.txt").write_text("alpha\n")
    (env.work / "b.txt").write_text("beta\n")
    proc = env.run(
        "run", "-o", "json", "--model", f"scripted:{env.script(RECORDED, 'recorded.json')}", "look"
    )
    assert proc.returncode == 0, proc.stderr
    session_id: str = json.loads(proc.stdout)["session_id"]
    return session_id


def sent_tool_results(path: Path) -> list[str]:
    """The tool results in the last request the scripted model logged."""
    last = json.loads(path.read_text().splitlines()[-1])
    return [m["content"][0]["text"] for m in last["messages"] if m["role"] == "tool_result"]


def test_a_replay_making_the_same_calls_is_answered_from_the_recording(env: Env) -> None:
    session_id = record(env)
    (env.work / "a.txt").write_text("changed since\n")  # the replay sees the recorded world
    (env.work / "c.txt").write_text("new\n")
    log = env.home / "requests.jsonl"
    proc = env.run(
        "replay",
        session_id[:8],
        "--model",
        f"scripted:{env.script(RECORDED, 'same.json')}",
        "--json",
        "report.json",
        extra={"KETCH_TEST_REQUESTS": str(log)},
    )
    assert (proc.returncode, proc.stderr) == (0, "")
    assert proc.stdout.splitlines() == [
        f"replay of session {session_id} on scripted:{env.home}/same.json: the same decisions at every turn (4 turns)",
        "3 calls answered from the recording, 0 run live",
    ]
    assert sent_tool_results(log) == ["     1\talpha", "a.txt\nb.txt", "     1\tbeta"]
    saved = sorted(p.name for p in (env.home / ".local" / "share" / "ketch" / "sessions").glob("*/*.jsonl"))
    assert saved == [f"{session_id}.jsonl"]  # the replay is not saved as a session
    report = json.loads((env.work / "report.json").read_text())
    assert report == {
        "recording": f"session {session_id}",
        "model": f"scripted:{env.home}/same.json",
        "on_divergence": "stop",
        "recorded_turns": 4,
        "divergence": None,
        "replayed": 3,
        "live": 0,
        "text": "Done.",
        "end_reason": "stop",
    }


def test_a_replay_choosing_another_tool_at_turn_2_diverges_there(env: Env) -> None:
    session_id = record(env)
    other = [*RECORDED[:2], call_reply(("x3", "find", {"pattern": "*.txt"})), "Done."]
    proc = env.run(
        "replay", session_id, "--model", f"scripted:{env.script(other, 'other.json')}", "--json", "r.json"
    )
    assert (proc.returncode, proc.stderr) == (1, "")
    assert proc.stdout.splitlines() == [
        f"replay of session {session_id} on scripted:{env.home}/other.json: diverged at turn 2 (turns counted from 0)",
        "  recorded: read(path='b.txt')",
        "  replayed: find(pattern='*.txt')",
        "2 calls answered from the recording, 0 run live",
    ]
    report = json.loads((env.work / "r.json").read_text())
    assert report["divergence"] == {
        "turn": 2,
        "expected": [{"name": "read", "args": {"path": "b.txt"}}],
        "actual": [{"name": "find", "args": {"pattern": "*.txt"}}],
    }
    assert (report["end_reason"], report["replayed"], report["live"]) == ("stop_guard", 2, 0)


def test_live_runs_the_calls_from_the_divergence_on_the_real_tools(env: Env) -> None:
    session_id = record(env)
    (env.work / "b.txt").write_text("beta, changed\n")
    other = [
        *RECORDED[:2],
        call_reply(("x3", "read", {"path": "a.txt"}), ("x4", "read", {"path": "b.txt"})),
        "Both.",
    ]
    log = env.home / "requests.jsonl"
    proc = env.run(
        "replay",
        session_id,
        "--on-divergence",
        "live",
        "--model",
        f"scripted:{env.script(other, 'other.json')}",
        extra={"KETCH_TEST_REQUESTS": str(log)},
    )
    assert proc.returncode == 1, proc.stderr
    assert proc.stdout.splitlines()[1:] == [
        "  recorded: read(path='b.txt')",
        "  replayed: read(path='a.txt'), read(path='b.txt')",
        "2 calls answered from the recording, 2 run live",
    ]
    assert sent_tool_results(log) == [
        "     1\talpha",
        "a.txt\nb.txt",
        "     1\talpha",
        "     1\tbeta, changed",
    ]


def test_a_session_file_is_replayed_too(env: Env) -> None:
    session_id = record(env)
    [log] = (env.home / ".local" / "share" / "ketch" / "sessions").glob(f"*/{session_id}.jsonl")
    exported = env.run("sessions", "export", session_id, "--format", "json")
    (env.work / "exported.json").write_text(exported.stdout)
    same = env.script(RECORDED, "same.json")
    for path in (str(log), "exported.json"):
        proc = env.run("replay", path, "--model", f"scripted:{same}")
        assert (proc.returncode, proc.stderr) == (0, "")
        assert proc.stdout.splitlines()[0] == (
            f"replay of {path} on scripted:{same}: the same decisions at every turn (4 turns)"
        )


def test_bad_input_is_one_line_naming_it(env: Env) -> None:
    missing = env.run("replay", "0123456789abcdef", "--model", f"scripted:{env.script(['x'])}")
    assert (missing.returncode, missing.stdout) == (2, "")
    assert missing.stderr == (
        "ketch replay: unknown session '0123456789abcdef': 'ketch sessions list --all' shows the session ids\n"
    )
    no_file = env.run("replay", "gone.jsonl")
    assert (no_file.returncode, no_file.stderr) == (
        2,
        "ketch replay: gone.jsonl: cannot read the session file: No such file or directory\n",
    )
    (env.work / "junk.jsonl").write_text('{"nope": 1}\n')
    junk = env.run("replay", "junk.jsonl")
    assert junk.returncode == 2
    assert junk.stderr.startswith(
        "ketch replay: junk.jsonl: not a session file (a session's .jsonl log or the JSON of "
        "'ketch sessions export --format json'): no 'messages' list"
    )
    (env.work / "empty.json").write_text('{"messages": []}')
    empty = env.run("replay", "empty.json")
    assert (empty.returncode, empty.stderr) == (
        2,
        "ketch replay: empty.json: the recording has no user message to send\n",
    )
    mode = env.run("replay", "x", "--on-divergence", "maybe")
    assert mode.returncode == 2
    assert "--on-divergence: invalid choice: 'maybe' (choose from 'stop', 'live')" in mode.stderr
    assert len(mode.stderr.splitlines()) == 1
