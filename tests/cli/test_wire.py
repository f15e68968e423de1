"""White-box test: imports ketch.cli._wire (private) to pin the exact bytes of the
``stream-json`` lines a ``message_update`` writes, keys in order."""

from __future__ import annotations

from ketch.cli._wire import encode_event
from ketch.cli._wire import encode_line
from ketch.llm import MessageBuilder
from ketch.llm import StreamEvent
from ketch.loop import MessageUpdate


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
