"""The floor: the benchmark task as a hand-written loop on raw aiohttp.

One shared ``aiohttp.ClientSession``, its own SSE line splitting, typed msgspec structs
for the chunks, the transcript as plain dicts. No retries, no events, no validation
beyond what the task needs: what an expert writes when nothing else is required, and
so the lowest CPU cost a Python client of this protocol can expect.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from collections.abc import Awaitable
from collections.abc import Callable
from typing import Any

import aiohttp
import msgspec

from . import script


class Fn(msgspec.Struct):
    """``function`` of a tool-call delta."""

    name: str | None = None
    arguments: str | None = None


class ToolDelta(msgspec.Struct):
    """One tool-call delta."""

    index: int = 0
    id: str | None = None
    function: Fn | None = None


class Delta(msgspec.Struct):
    """The ``delta`` of a choice."""

    content: str | None = None
    tool_calls: list[ToolDelta] | None = None


class Choice(msgspec.Struct):
    """One choice of a chunk."""

    delta: Delta | None = None
    finish_reason: str | None = None


class Chunk(msgspec.Struct):
    """One ``chat.completion.chunk``."""

    choices: list[Choice] = []


_decode_chunk = msgspec.json.Decoder(Chunk).decode
_decode_args = msgspec.json.Decoder(dict[str, int]).decode
_encode = msgspec.json.Encoder().encode
_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": script.TOOL_NAME,
            "description": script.TOOL_DESCRIPTION,
            "parameters": script.TOOL_PARAMETERS,
        },
    }
]
_HEADERS = {"authorization": "Bearer x", "content-type": "application/json", "accept": "text/event-stream"}


async def _data_lines(response: aiohttp.ClientResponse) -> AsyncIterator[bytes]:
    # Reads to the end of the body so the connection goes back to the pool.
    buf = b""
    content = response.content
    while True:
        data = await content.readany()
        if not data:
            return
        buf += data
        *lines, buf = buf.split(b"\n")
        for line in lines:
            if line.startswith(b"data: "):
                yield line[6:]


async def setup(
    url: str,
) -> tuple[Callable[[], Awaitable[tuple[str, int]]], Callable[[], Awaitable[None]]]:
    """``(run_once, close)`` for the hand-written loop against ``url``."""
    from .script import add_numbers

    endpoint = url + "/chat/completions"
    session = aiohttp.ClientSession()

    async def run_once() -> tuple[str, int]:
        messages: list[dict[str, Any]] = [{"role": "user", "content": script.PROMPT}]
        seen = 0
        while True:
            body = {
                "model": script.MODEL,
                "messages": messages,
                "tools": _TOOLS,
                "stream": True,
                "stream_options": {"include_usage": True},
            }
            text: list[str] = []
            calls: dict[int, list[Any]] = {}
            async with session.post(endpoint, data=_encode(body), headers=_HEADERS) as response:
                if response.status != 200:
                    raise RuntimeError(f"HTTP {response.status}: {await response.text()}")
                async for data in _data_lines(response):
                    if data == b"[DONE]":
                        continue
                    chunk = _decode_chunk(data)
                    if not chunk.choices:
                        continue
                    delta = chunk.choices[0].delta
                    if delta is None:
                        continue
                    if delta.content:
                        text.append(delta.content)
                    for td in delta.tool_calls or ():
                        call = calls.get(td.index)
                        if call is None:
                            name = td.function.name if td.function is not None else ""
                            call = calls[td.index] = [td.id, name, []]
                        if td.function is not None and td.function.arguments:
                            call[2].append(td.function.arguments)
            if not calls:
                return "".join(text), seen
            wire_calls = []
            results = []
            for call_id, name, pieces in calls.values():
                arguments = "".join(pieces)
                wire_calls.append(
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                )
                result = await add_numbers(**_decode_args(arguments))
                results.append({"role": "tool", "tool_call_id": call_id, "content": str(result)})
                seen += 1
            messages.append({"role": "assistant", "content": "".join(text) or None, "tool_calls": wire_calls})
            messages.extend(results)

    return run_once, session.close
