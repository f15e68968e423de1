"""Session export: the transcript the entries leave, as Markdown and as JSON."""

from __future__ import annotations

import json
from typing import Any

from ketch import AssistantMessage
from ketch import TextContent
from ketch import ToolCall
from ketch import ToolResultMessage
from ketch import UserMessage
from ketch import message_to_dict
from ketch.sessions import Entry
from ketch.sessions import export_json
from ketch.sessions import export_markdown

_clock = [1000.0]


def _entry(kind: str, payload: dict[str, Any], entry_id: str) -> Entry:
    _clock[0] += 1
    return Entry(id=entry_id, parent_id=None, timestamp=_clock[0], type=kind, payload=payload)


def _message(entry_id: str, message: Any, *, detached: bool = False) -> Entry:
    payload: dict[str, Any] = {"message": message_to_dict(message)}
    if detached:
        payload["detached"] = True
    return _entry("message", payload, entry_id)


def _session(cwd: str = "/work/project") -> Entry:
    return _entry("session", {"cwd": cwd, "version": 1, "forked_from": None}, "s0")


USER = UserMessage(content="List the files\nplease", timestamp=1.0)
CALL = AssistantMessage(
    content=[TextContent(text="Let me look."), ToolCall(id="c1", name="ls", args={"path": "."})],
    stop_reason="tool_use",
    timestamp=2.0,
)
RESULT = ToolResultMessage(tool_call_id="c1", tool_name="ls", content=[TextContent(text="a.txt\nb.txt")], timestamp=3.0)
ANSWER = AssistantMessage(content=[TextContent(text="Two files: a.txt and b.txt.")], timestamp=4.0)


def _entries() -> list[Entry]:
    return [
        _session(),
        _message("m1", USER),
        _message("m2", CALL),
        _message("m3", RESULT),
        _message("m4", ANSWER),
        _entry("run_summary", {"end_reason": "stop", "usage": {}, "cost": 0.0, "duration": 1.0, "turns": 2}, "r1"),
    ]


def test_markdown_shows_text_tool_calls_and_results() -> None:
    assert export_markdown(_entries(), session_id="abc123") == (
        "# List the files please\n"
        "\n"
        "- Session: `abc123`\n"
        "- Directory: `/work/project`\n"
        "- Messages: 4\n"
        "\n"
        "## User\n"
        "\n"
        "List the files\n"
        "please\n"
        "\n"
        "## Assistant\n"
        "\n"
        "Let me look.\n"
        "\n"
        "**Tool call** `ls` (`c1`):\n"
        "\n"
        "```json\n"
        "{\n"
        '  "path": "."\n'
        "}\n"
        "```\n"
        "\n"
        "## Tool result `ls` (`c1`)\n"
        "\n"
        "```\n"
        "a.txt\n"
        "b.txt\n"
        "```\n"
        "\n"
        "## Assistant\n"
        "\n"
        "Two files: a.txt and b.txt.\n"
    )


def test_json_is_the_transcript_as_message_dicts() -> None:
    data = json.loads(export_json(_entries(), session_id="abc123"))
    assert data == {
        "session_id": "abc123",
        "title": "List the files please",
        "cwd": "/work/project",
        "messages": [message_to_dict(m) for m in (USER, CALL, RESULT, ANSWER)],
    }


def test_compaction_and_rewind_replace_the_transcript() -> None:
    summary = {"role": "context_summary", "timestamp": 5.0, "summary": "The user listed files.", "tokens_before": 900}
    later = UserMessage(content="Now delete b.txt", timestamp=6.0)
    entries = [
        *_entries(),
        _entry("message", {"message": summary, "detached": True}, "m5"),
        _entry("compaction", {"message_ids": ["m5", "m4"], "reason": "threshold", "tokens_before": 900, "tokens_after": 50}, "k1"),
        _message("m6", later),
        _message("m7", AssistantMessage(content=[TextContent(text="Deleted.")], timestamp=7.0)),
    ]
    data = json.loads(export_json(entries))
    assert [m["role"] for m in data["messages"]] == ["context_summary", "assistant", "user", "assistant"]
    assert data["session_id"] is None
    markdown = export_markdown(entries)
    assert "## Summary of the earlier conversation\n\nThe user listed files.\n" in markdown
    assert "Let me look." not in markdown
    assert "- Messages: 4\n" in markdown
    rewound = [*entries, _entry("rewind", {"to": "m6", "message_ids": ["m5", "m4"]}, "w1")]
    assert [m["role"] for m in json.loads(export_json(rewound))["messages"]] == ["context_summary", "assistant"]
    assert "Now delete" not in export_markdown(rewound)
    assert export_markdown(rewound).startswith("# List the files please\n")  # the title is the first prompt


def test_long_results_are_cut_and_fences_outgrow_backticks() -> None:
    long = ToolResultMessage(tool_call_id="c1", tool_name="read", content=[TextContent(text="x" * 2500)], is_error=True)
    ticks = AssistantMessage(content=[ToolCall(id="c2", name="write", args={"content": "```py\nprint()\n```"})])
    markdown = export_markdown([_session(), _message("m1", long), _message("m2", ticks)])
    assert "## Tool result `read` (`c1`): error\n\n```\n" + "x" * 2000 + "\n… (500 more characters)\n```\n" in markdown
    assert '````json\n{\n  "content": "```py\\nprint()\\n```"\n}\n````' in markdown
    assert json.loads(export_json([_session(), _message("m1", long)]))["messages"][0]["content"][0]["text"] == "x" * 2500


def test_errors_images_and_untitled_sessions() -> None:
    failed = AssistantMessage(content=[TextContent(text="par")], stop_reason="error", error_message="upstream broke")
    markdown = export_markdown([_session(), _message("m1", failed)])
    assert markdown == (
        "# (untitled session)\n\n- Directory: `/work/project`\n- Messages: 1\n\n## Assistant\n\npar\n\n*error: upstream broke*\n"
    )
    assert export_markdown([]) == "# (untitled session)\n\n- Messages: 0\n"


async def test_the_export_titles_a_session_as_the_store_lists_it(tmp_path: Any) -> None:
    from ketch import Agent
    from ketch import ImageContent
    from ketch.sessions import JsonlStore
    from ketch.sessions import Session
    from ketch.testing import ScriptedModel

    store = JsonlStore(tmp_path / "sessions")
    session = await Session.create(store, cwd=str(tmp_path))
    agent = Agent(ScriptedModel(["seen", "fixed"]), session=session)
    await agent.prompt([UserMessage(content=[ImageContent(data="AAAA")])])  # no text: no title
    await agent.prompt("Fix   caf\udce9.py\nplease")
    await session.close()
    listed = await store.info(session.id)
    exported = json.loads(export_json(await store.load(session.id)))
    assert listed.title == exported["title"] == "Fix caf\ufffd.py please"
