"""The SSE stream of a session stays linear in the size of a tool call: a scripted 1 MB
call streamed in 8-character fragments goes out in under 3 MB, its fragments joined into
frames of up to 1024 characters (it was tens of GB, one frame per fragment, each with the
arguments parsed so far).

Black-box: the HTTP API on a loopback port; asserts on bytes and frames, never on time.
"""

from __future__ import annotations

import json
from typing import Any

from serverhelp import subscribe
from serverhelp import types

from ketch import tool
from ketch.testing import reply
from ketch.testing import tool_call

LIMIT = 3_000_000
CONTENT = "".join(f'    value_{i} = compute("item {i}", path="C:\\\\data")  # step {i}\n' for i in range(16_000))


@tool
async def save(content: str) -> str:
    """Save a document."""
    return f"saved {len(content)} characters"


async def _frames(stream: Any) -> tuple[list[dict[str, Any]], int]:
    """The data frames up to the idle ``session_state``, and their bytes; stopped past
    :data:`LIMIT` bytes."""
    frames: list[dict[str, Any]] = []
    size = 0
    pending = b""
    async for chunk in stream.response.content.iter_any():  # a message_end line is over 1 MB
        size += len(chunk)
        assert size <= LIMIT, f"the SSE stream carried more than {LIMIT} bytes for a 1 MB call"
        *lines, pending = (pending + chunk).split(b"\n")
        for line in lines:
            if line.startswith(b"data: "):
                data = json.loads(line[6:])
                frames.append({"data": data})
                if data.get("type") == "session_state" and not data["running"]:
                    return frames, size
    raise AssertionError("the stream ended")


async def test_a_1mb_tool_call_streams_in_under_3mb_with_its_fragments_joined(servers: Any) -> None:
    assert len(CONTENT) > 1_000_000
    script = lambda: [reply(tool_call("save", {"content": CONTENT}, id="s1"), chunk_size=8), "Saved."]  # noqa: E731
    server = await servers(script, tools=lambda: [save])
    sid = await server.create()
    stream = await subscribe(server, sid)
    assert (await server.call("POST", f"/api/sessions/{sid}/prompt", {"text": "save it"}))[0] == 202
    frames, _ = await _frames(stream)
    stream.close()
    text = json.dumps({"content": CONTENT}, separators=(",", ":"))
    joined = -(-len(text) // 1024)
    assert types(frames)[4:12 + joined] == [
        "message_start:assistant",
        "update:toolcall_start",
        *["update:toolcall_delta"] * joined,
        "update:toolcall_end",
        "message_end:assistant",
        "tool_execution_start",
        "tool_execution_end",
        "message_start:tool_result",
        "message_end:tool_result",
    ]
    deltas = [f["data"]["event"] for f in frames if types([f]) == ["update:toolcall_delta"]]
    assert all(set(d) == {"type", "index", "delta"} for d in deltas)
    assert json.loads("".join(d["delta"] for d in deltas)) == {"content": CONTENT}
    assert frames[-1]["data"]["last_end"] == {"end_reason": "stop", "error": None}
