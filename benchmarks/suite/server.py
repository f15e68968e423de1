"""A scripted LLM server for benchmarks: OpenAI Chat Completions and Anthropic Messages.

Run: ``python -m suite.server [--port 0]`` (from ``benchmarks/``); it prints
``READY <port>`` once it listens on 127.0.0.1. The URL path selects the script:
``/r{rounds}/c{chunks}/...`` answers ``rounds`` tool-call turns and then a final text of
``chunks`` pieces (see :mod:`suite.script`). Requests ending in ``/chat/completions``
get OpenAI chunks, requests ending in ``/messages`` get Anthropic events; both stream
when the request says ``"stream": true`` and answer with one JSON body otherwise.

Which turn a request is in is read from the request itself (the tool results after the
last user message), so the server keeps no per-conversation state. Every response is
computed once, cached, and written with a single ``transport.write`` (HTTP/1.1, one
chunk of chunked encoding), so timings measure the client, not the server's pacing.
``GET /stats`` returns the server's own CPU seconds and request counts (all, streamed,
unstreamed).

The HTTP layer is a small asyncio protocol (keep-alive, Content-Length or chunked
request bodies) so the server costs as little CPU as possible on a shared machine.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import resource
import sys
from typing import Any

import msgspec

from . import script

_PATH = re.compile(rb"^/r(\d+)/c(\d+)(/.*)$")
_enc = msgspec.json.Encoder()


class _OAMessage(msgspec.Struct):
    role: str = ""
    content: msgspec.Raw = msgspec.Raw(b"null")


class _OARequest(msgspec.Struct):
    messages: list[_OAMessage] = []
    stream: bool = False
    stream_options: dict[str, Any] | None = None


class _AMessage(msgspec.Struct):
    role: str = ""
    content: msgspec.Raw = msgspec.Raw(b"null")


class _ARequest(msgspec.Struct):
    messages: list[_AMessage] = []
    stream: bool = False


class _Head(msgspec.Struct):
    stream: bool = False
    stream_options: dict[str, Any] | None = None


_oa_request = msgspec.json.Decoder(_OARequest)
_head = msgspec.json.Decoder(_Head)
_a_request = msgspec.json.Decoder(_ARequest)
_any = msgspec.json.Decoder()


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict))
    return "" if content is None else str(content)


def openai_results(messages: list[_OAMessage]) -> list[str]:
    """The tool results after the last user (or system) message, in order."""
    out: list[str] = []
    for m in reversed(messages):
        if m.role == "tool":
            out.append(_text_of(_any.decode(m.content)).strip())
        elif m.role != "assistant":
            break
    out.reverse()
    return out


def anthropic_results(messages: list[_AMessage]) -> list[str]:
    """The tool results after the last user message that is not only tool results."""
    out: list[str] = []
    for m in reversed(messages):
        if m.role == "assistant":
            continue
        content = _any.decode(m.content)
        if not isinstance(content, list) or not content:
            break
        blocks = [b for b in content if isinstance(b, dict)]
        if not blocks or any(b.get("type") != "tool_result" for b in blocks):
            break
        out.extend(_text_of(b.get("content")).strip() for b in reversed(blocks))
    out.reverse()
    return out


# -- OpenAI Chat Completions ---------------------------------------------------------------
def _oa_chunk(choices: list[Any], usage: Any = None) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-bench",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": script.MODEL,
        "system_fingerprint": None,
        "choices": choices,
    }
    if usage is not None:
        body["usage"] = usage
    return b"data: " + _enc.encode(body) + b"\n\n"


def _delta(delta: dict[str, Any], finish: str | None = None) -> list[Any]:
    return [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def openai_stream(results: list[str], rounds: int, chunks: int, usage: bool) -> bytes:
    """The SSE body for the turn after ``results``."""
    k = len(results)
    parts = [_oa_chunk(_delta({"role": "assistant", "content": None}))]
    if k < rounds:
        first = {
            "index": 0,
            "id": f"call_{k}_bench",
            "type": "function",
            "function": {"name": "add", "arguments": ""},
        }
        parts.append(_oa_chunk(_delta({"tool_calls": [first]})))
        for piece in script.args_pieces(k):
            parts.append(_oa_chunk(_delta({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]})))
        parts.append(_oa_chunk(_delta({}, "tool_calls")))
        completion = 12
    else:
        for text in script.text_chunks(results, chunks):
            parts.append(_oa_chunk(_delta({"content": text})))
        parts.append(_oa_chunk(_delta({}, "stop")))
        completion = chunks
    if usage:
        parts.append(_oa_chunk([], _usage(20 + 10 * k, completion)))
    parts.append(b"data: [DONE]\n\n")
    return b"".join(parts)


def openai_json(results: list[str], rounds: int, chunks: int) -> bytes:
    """The non-streamed response for the turn after ``results``."""
    k = len(results)
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if k < rounds:
        a, b = script.tool_args(k)
        message["tool_calls"] = [
            {
                "id": f"call_{k}_bench",
                "type": "function",
                "function": {"name": "add", "arguments": f'{{"a": {a}, "b": {b}}}'},
            }
        ]
        finish, completion = "tool_calls", 12
    else:
        message["content"] = "".join(script.text_chunks(results, chunks))
        finish, completion = "stop", chunks
    return _enc.encode(
        {
            "id": "chatcmpl-bench",
            "object": "chat.completion",
            "created": 1700000000,
            "model": script.MODEL,
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": _usage(20 + 10 * k, completion),
        }
    )


# -- Anthropic Messages ----------------------------------------------------------------------
def _a_event(name: str, data: dict[str, Any]) -> bytes:
    return b"event: " + name.encode() + b"\ndata: " + _enc.encode(data) + b"\n\n"


def anthropic_stream(results: list[str], rounds: int, chunks: int) -> bytes:
    """The SSE body for the turn after ``results``."""
    k = len(results)
    start: dict[str, Any] = {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": script.MODEL,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 20 + 10 * k, "output_tokens": 1},
    }
    parts = [_a_event("message_start", {"type": "message_start", "message": start})]
    if k < rounds:
        block = {"type": "tool_use", "id": f"toolu_{k}_bench", "name": "add", "input": {}}
        parts.append(
            _a_event(
                "content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}
            )
        )
        for piece in script.args_pieces(k):
            delta = {"type": "input_json_delta", "partial_json": piece}
            parts.append(
                _a_event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
            )
        stop, completion = "tool_use", 12
    else:
        block = {"type": "text", "text": ""}
        parts.append(
            _a_event(
                "content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}
            )
        )
        for text in script.text_chunks(results, chunks):
            delta = {"type": "text_delta", "text": text}
            parts.append(
                _a_event("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta})
            )
        stop, completion = "end_turn", chunks
    parts.append(_a_event("content_block_stop", {"type": "content_block_stop", "index": 0}))
    parts.append(
        _a_event(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": completion},
            },
        )
    )
    parts.append(_a_event("message_stop", {"type": "message_stop"}))
    return b"".join(parts)


def anthropic_json(results: list[str], rounds: int, chunks: int) -> bytes:
    """The non-streamed response for the turn after ``results``."""
    k = len(results)
    if k < rounds:
        a, b = script.tool_args(k)
        content: list[Any] = [
            {"type": "tool_use", "id": f"toolu_{k}_bench", "name": "add", "input": {"a": a, "b": b}}
        ]
        stop, completion = "tool_use", 12
    else:
        content = [{"type": "text", "text": "".join(script.text_chunks(results, chunks))}]
        stop, completion = "end_turn", chunks
    return _enc.encode(
        {
            "id": "msg_bench",
            "type": "message",
            "role": "assistant",
            "model": script.MODEL,
            "content": content,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 20 + 10 * k, "output_tokens": completion},
        }
    )


# -- HTTP --------------------------------------------------------------------------------------
_cache: dict[tuple[Any, ...], bytes] = {}
_stats = {"requests": 0, "streamed": 0, "unstreamed": 0}


def _response(status: str, content_type: str, body: bytes, chunked: bool) -> bytes:
    if chunked:
        head = f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncache-control: no-cache\r\ntransfer-encoding: chunked\r\n\r\n"
        return b"".join((head.encode(), b"%x\r\n" % len(body), body, b"\r\n0\r\n\r\n"))
    head = f"HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {len(body)}\r\n\r\n"
    return head.encode() + body


def _error(status: str, message: str) -> bytes:
    return _response(
        status, "application/json", _enc.encode({"error": {"message": message, "type": "bench"}}), False
    )


def handle(method: bytes, path: bytes, body: bytes) -> bytes:
    """The complete HTTP response for one request."""
    _stats["requests"] += 1
    if method == b"GET" and path == b"/stats":
        ru = resource.getrusage(resource.RUSAGE_SELF)
        stats = {"cpu": ru.ru_utime + ru.ru_stime, "maxrss_kb": ru.ru_maxrss, **_stats}
        return _response("200 OK", "application/json", _enc.encode(stats), False)
    match = _PATH.match(path.split(b"?", 1)[0])
    if method != b"POST" or match is None:
        return _error("404 Not Found", "unknown path")
    rounds, chunks, rest = int(match[1]), int(match[2]), match[3]
    try:
        if rest.endswith(b"/chat/completions"):
            # A script without tool rounds needs no messages: skipping them keeps the
            # server's cost flat however long the transcript is.
            oa: _Head | _OARequest
            if rounds == 0:
                oa, results = _head.decode(body), []
            else:
                oa = _oa_request.decode(body)
                results = openai_results(oa.messages)
            usage = bool(oa.stream_options and oa.stream_options.get("include_usage"))
            key: tuple[Any, ...] = ("oa", oa.stream, usage, rounds, chunks, *results)
            cached = _cache.get(key)
            if cached is None:
                if oa.stream:
                    cached = _response(
                        "200 OK", "text/event-stream", openai_stream(results, rounds, chunks, usage), True
                    )
                else:
                    cached = _response(
                        "200 OK", "application/json", openai_json(results, rounds, chunks), True
                    )
        elif rest.endswith(b"/messages"):
            an = _a_request.decode(body)
            results = anthropic_results(an.messages)
            key = ("a", an.stream, rounds, chunks, *results)
            cached = _cache.get(key)
            if cached is None:
                if an.stream:
                    cached = _response(
                        "200 OK", "text/event-stream", anthropic_stream(results, rounds, chunks), True
                    )
                else:
                    cached = _response(
                        "200 OK", "application/json", anthropic_json(results, rounds, chunks), True
                    )
        else:
            return _error("404 Not Found", "unknown path")
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return _error("400 Bad Request", f"bad request body: {exc}")
    _stats["streamed" if key[1] else "unstreamed"] += 1
    if len(_cache) > 4096:
        _cache.clear()
    _cache[key] = cached
    return cached


class _Connection(asyncio.Protocol):
    """One keep-alive HTTP/1.1 connection."""

    def __init__(self) -> None:
        self.buf = bytearray()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        while self.transport is not None and self._one():
            pass

    def _one(self) -> bool:
        buf = self.buf
        end = buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        lines = bytes(buf[:end]).split(b"\r\n")
        method, path, _ = lines[0].split(b" ", 2)
        length = 0
        chunked = close = False
        for line in lines[1:]:
            name, _, value = line.partition(b":")
            name = name.strip().lower()
            if name == b"content-length":
                length = int(value)
            elif name == b"transfer-encoding" and b"chunked" in value.lower():
                chunked = True
            elif name == b"connection" and value.strip().lower() == b"close":
                close = True
        start = end + 4
        body: bytes | None
        if chunked:
            body, consumed = _dechunk(buf, start)
            if body is None:
                return False
        else:
            if len(buf) < start + length:
                return False
            body, consumed = bytes(buf[start : start + length]), start + length
        del buf[:consumed]
        assert self.transport is not None
        self.transport.write(handle(method, path, body))
        if close:
            self.transport.close()
            self.transport = None
            return False
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


def _dechunk(buf: bytearray, pos: int) -> tuple[bytes | None, int]:
    out = bytearray()
    while True:
        eol = buf.find(b"\r\n", pos)
        if eol < 0:
            return None, 0
        size = int(bytes(buf[pos:eol]).split(b";", 1)[0], 16)
        pos = eol + 2
        if size == 0:
            trailer_end = buf.find(b"\r\n\r\n", pos - 2)
            if trailer_end < 0:
                return None, 0
            return bytes(out), trailer_end + 4
        if len(buf) < pos + size + 2:
            return None, 0
        out += buf[pos : pos + size]
        pos += size + 2


async def serve(port: int) -> None:
    """Listen on 127.0.0.1:``port`` (0: any free port), print ``READY <port>``, serve forever."""
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Connection, "127.0.0.1", port, backlog=4096, reuse_address=True)
    bound = server.sockets[0].getsockname()[1]
    print(f"READY {bound}", flush=True)
    async with server:
        await server.serve_forever()


def main() -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    try:
        asyncio.run(serve(args.port))
    except KeyboardInterrupt:
        pass
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
