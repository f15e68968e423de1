"""White-box test: imports ketch.cli._wire (private) to pin the exact bytes of the
``stream-json`` lines a ``message_update`` writes, keys in order."""

from __future__ import annotations

from ketch.cli._wire import encode_event
from ketch.cli._wire import encode_line
from ketch.llm import MessageBuilder
from ketch.llm import StreamEvent
from ketch.loop import ApprovalRequired
from ketch.loop import MessageUpdate
from ketch.loop import ToolExecutionStart
from ketch.loop import ToolExecutionUpdate


def _line(event: StreamEvent) -> bytes:
    update = MessageUpdate(message=event.partial, event=event)  # type: ignore[union-attr]
    return bytes(encode_line(encode_event(update), bytearray()))


def test_message_update_lines_keep_their_fields_and_key_order() -> None:
    b = MessageBuilder()
    start = b.start()
    lines = [
        _line(b.text_start()),
        _line(b.text_delta("Hi", 0)),
        _line(b.text_end(0)),
        _line(b.thinking_start()),
        _line(b.thinking_delta("hmm", 1)),
        _line(b.thinking_end(1)),
        _line(b.tool_call_start("c1", "ls")),
        _line(b.tool_call_delta('{"path":"."}', 2)),
        _line(b.tool_call_end(2)),
    ]
    assert lines == [
        b'{"type":"message_update","event":{"type":"text_start","index":0}}\n',
        b'{"type":"message_update","event":{"type":"text_delta","delta":"Hi","index":0}}\n',
        b'{"type":"message_update","event":{"type":"text_end","content":"Hi","index":0}}\n',
        b'{"type":"message_update","event":{"type":"thinking_start","index":1}}\n',
        b'{"type":"message_update","event":{"type":"thinking_delta","delta":"hmm","index":1}}\n',
        b'{"type":"message_update","event":{"type":"thinking_end","content":"hmm","index":1}}\n',
        b'{"type":"message_update","event":{"type":"toolcall_start","id":"c1","name":"ls","index":2}}\n',
        b'{"type":"message_update","event":{"type":"toolcall_delta","delta":"{\\"path\\":\\".\\"}","index":2}}\n',
        b'{"type":"message_update","event":{"type":"toolcall_end","id":"c1","name":"ls","index":2}}\n',
    ]
    assert _line(start) == b'{"type":"message_update","event":{"type":"start"}}\n'


def test_tool_events_name_the_call_without_repeating_its_arguments() -> None:
    args = {"command": "make", "content": "x" * 100}
    events = [
        ToolExecutionStart(tool_call_id="c1", tool_name="bash", args=args),
        ToolExecutionUpdate(tool_call_id="c1", tool_name="bash", args=args, partial={"output": "ok"}),
        ApprovalRequired(tool_call_id="c1", tool_name="bash", args=args, reason="asks"),
        ApprovalRequired(tool_call_id="c2", tool_name="bash", args=args),
    ]
    assert [bytes(encode_line(encode_event(e), bytearray())) for e in events] == [
        b'{"type":"tool_execution_start","tool_call_id":"c1","tool_name":"bash"}\n',
        b'{"type":"tool_execution_update","tool_call_id":"c1","tool_name":"bash","partial":{"output":"ok"}}\n',
        b'{"type":"approval_required","tool_call_id":"c1","tool_name":"bash","reason":"asks"}\n',
        b'{"type":"approval_required","tool_call_id":"c2","tool_name":"bash","reason":null}\n',
    ]


def test_a_lone_surrogate_is_one_replacement_character_in_every_json_line_writer() -> None:
    import io

    from ketch.cli._stdio import JsonLines
    from ketch.cli._wire import encode_line

    out = io.BytesIO()
    JsonLines(out).write({"text": "caf\ud800 ok"})
    assert out.getvalue() == encode_line({"text": "caf\ud800 ok"}, bytearray()) == '{"text":"caf\ufffd ok"}\n'.encode()
