"""White-box test: imports ketch implementation modules (private) directly.

The shared HTTP core: SSE parsing, the per-loop session, redaction, connection handling."""

from __future__ import annotations

import asyncio
import gc
import warnings
from typing import Any

import pytest
from loopback import LoopbackServer
from loopback import Reply
from loopback import sse_reply

from ketch.llm import AbortSignal
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import UserMessage
from ketch.llm._http import Deadline
from ketch.llm._http import SSEBatch
from ketch.llm._http import close_session
from ketch.llm._http import get_session
from ketch.llm._http import iter_sse
from ketch.llm._http import redact_headers
from ketch.llm._http import redact_text
from ketch.llm._providers.openai_chat import Compat
from ketch.llm._providers.openai_chat import OpenAIChatModel
from ketch.llm._retry import NO_RETRY


class Chunks:
    """A byte source that returns the given chunks, then b""."""

    def __init__(self, *chunks: bytes) -> None:
        self.chunks = list(chunks)

    async def readany(self) -> bytes:
        return self.chunks.pop(0) if self.chunks else b""


async def parse(*chunks: bytes) -> list[tuple[str, bytes]]:
    """(event name, data) of every event, across batches."""
    out: list[tuple[str, bytes]] = []
    async for batch in iter_sse(Chunks(*chunks)):
        names = batch.events if batch.events is not None else [""] * len(batch.data)
        assert len(names) == len(batch.data)
        out.extend(zip(names, batch.data, strict=True))
    return out


async def test_sse_events_come_in_one_batch_per_read() -> None:
    reads = [batch async for batch in iter_sse(Chunks(b"data: a\n\ndata: b\n\ndata: c", b"\n\n", b": ping\n\n"))]
    assert reads == [SSEBatch([b"a", b"b"], None), SSEBatch([b"c"], None)]


async def test_sse_event_names_are_aligned_with_the_data_of_their_batch() -> None:
    reads = [
        batch
        async for batch in iter_sse(Chunks(b"data: a\n\nevent: x\ndata: b\n\ndata: c\n\n", b"event: y\ndata: d\n"))
    ]
    assert reads == [SSEBatch([b"a", b"b", b"c"], ["", "x", ""]), SSEBatch([b"d"], ["y"])]


# -- SSE parsing ---------------------------------------------------------------------------
async def test_sse_events_split_on_blank_lines() -> None:
    assert await parse(b"data: a\n\ndata: b\n\n") == [("", b"a"), ("", b"b")]


async def test_sse_lines_split_across_chunks() -> None:
    assert await parse(b"da", b"ta: {\"x\"", b": 1}\n", b"\n", b"data: [DONE]\n\n") == [
        ("", b'{"x": 1}'),
        ("", b"[DONE]"),
    ]


async def test_sse_crlf_line_endings() -> None:
    assert await parse(b"event: ping\r\ndata: a\r\n\r\ndata: b\r\n\r\n") == [("ping", b"a"), ("", b"b")]


async def test_sse_multiline_data_is_joined_with_newlines() -> None:
    assert await parse(b"data: one\ndata: two\ndata:three\n\n") == [("", b"one\ntwo\nthree")]


async def test_sse_comments_ids_and_retry_fields_are_ignored() -> None:
    assert await parse(b": keep-alive\n\nid: 7\nretry: 100\ndata: x\n\n:comment\n") == [("", b"x")]


async def test_sse_event_names_apply_to_one_event() -> None:
    body = b"event: message_start\ndata: {}\n\nevent: delta\ndata: 1\n\ndata: 2\n\n"
    assert await parse(body) == [("message_start", b"{}"), ("delta", b"1"), ("", b"2")]


async def test_sse_event_without_data_is_not_dispatched() -> None:
    assert await parse(b"event: ping\n\ndata: x\n\n") == [("", b"x")]


async def test_sse_complete_event_without_final_blank_line_is_delivered() -> None:
    assert await parse(b"data: a\n\ndata: last\n") == [("", b"a"), ("", b"last")]


async def test_sse_line_cut_off_at_end_of_stream_is_dropped() -> None:
    assert await parse(b"data: a\n\ndata: {\"trunc") == [("", b"a")]


async def test_sse_long_line_over_many_chunks() -> None:
    payload = b"x" * 10_000
    pieces = [b"data: "] + [payload[i : i + 7] for i in range(0, len(payload), 7)] + [b"\n\n"]
    assert await parse(*pieces) == [("", payload)]


async def test_sse_data_without_space_and_empty_data() -> None:
    assert await parse(b"data:x\n\ndata:\n\n") == [("", b"x"), ("", b"")]


# -- redaction -----------------------------------------------------------------------------
def test_redact_headers_hides_credentials_and_secret_values() -> None:
    headers = {
        "Authorization": "Bearer sk-1",
        "x-api-key": "k",
        "x-goog-api-key": "g",
        "api-key": "a",
        "X-Custom": "token sk-1 inside",
        "accept": "text/event-stream",
    }
    assert redact_headers(headers, ("sk-1",)) == {
        "Authorization": "***",
        "x-api-key": "***",
        "x-goog-api-key": "***",
        "api-key": "***",
        "X-Custom": "token *** inside",
        "accept": "text/event-stream",
    }


def test_redact_text_ignores_empty_secrets() -> None:
    assert redact_text("a key=abc and abc", ("", "abc")) == "a key=*** and ***"


# -- the session ---------------------------------------------------------------------------
async def test_one_session_per_loop_reused() -> None:
    first = await get_session()
    assert await get_session() is first
    assert not first.closed


async def test_close_session_then_new_session() -> None:
    first = await get_session()
    await close_session()
    assert first.closed
    second = await get_session()
    assert second is not first and not second.closed


def test_session_closed_when_its_loop_shuts_down_and_new_loop_gets_new_one() -> None:
    async def grab() -> object:
        return await get_session()

    with warnings.catch_warnings():
        warnings.simplefilter("error", ResourceWarning)
        first = asyncio.run(grab())
        assert first.closed  # type: ignore[attr-defined]
        second = asyncio.run(grab())
        assert second is not first
        assert second.closed  # type: ignore[attr-defined]
        gc.collect()


# -- connections ---------------------------------------------------------------------------
def _done_stream(text: str) -> Reply:
    return sse_reply(
        {"choices": [{"delta": {"content": text}, "finish_reason": None}]},
        {"choices": [{"delta": {}, "finish_reason": "stop"}]},
    )


async def test_sequential_requests_reuse_one_connection(loopback: LoopbackServer) -> None:
    loopback.queue(_done_stream("a"), _done_stream("b"), _done_stream("c"))
    model = OpenAIChatModel("m", base_url=loopback.url, api_key="k", retry=NO_RETRY)
    ctx = Request(messages=[UserMessage(content="hi")])
    texts = []
    for _ in range(3):
        events = [ev async for ev in model.stream(ctx)]
        texts.append(events[-1].message.text)
    assert texts == ["a", "b", "c"]
    assert loopback.connections == 1


async def test_cancelling_the_consumer_closes_the_connection(loopback: LoopbackServer) -> None:
    reply = sse_reply({"choices": [{"delta": {"content": "partial"}, "finish_reason": None}]}, stall_after=1)
    loopback.queue(reply)
    model = OpenAIChatModel("m", base_url=loopback.url, api_key="k", retry=NO_RETRY)
    seen: list[str] = []
    got_text = asyncio.Event()

    async def consume() -> None:
        async for ev in model.stream(Request(messages=[UserMessage(content="hi")])):
            seen.append(ev.type)
            if ev.type == "text_delta":
                got_text.set()

    task = asyncio.create_task(consume())
    await got_text.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await asyncio.wait_for(reply.disconnected.wait(), 5)
    assert seen == ["start", "text_start", "text_delta"]


# -- time limits ---------------------------------------------------------------------------
def _text(text: str) -> dict[str, Any]:
    return {"choices": [{"delta": {"content": text}, "finish_reason": None}]}


HI = Request(messages=[UserMessage(content="hi")])
_STOP = {"choices": [{"delta": {}, "finish_reason": "stop"}]}


def _outcome(events: list[Any]) -> list[tuple[str, ...]]:
    out: list[tuple[str, ...]] = []
    for ev in events:
        if ev.type == "error":
            out.append((ev.type, ev.error.error_kind, ev.error.error_message))
        elif ev.type == "text_delta":
            out.append((ev.type, ev.delta))
        else:
            out.append((ev.type,))
    return out


def _limited(loopback: LoopbackServer, **limits: Any) -> OpenAIChatModel:
    return OpenAIChatModel("m", base_url=loopback.url, api_key="k", retry=NO_RETRY, **limits)


async def test_no_response_headers_within_the_idle_limit_is_stream_idle(loopback: LoopbackServer) -> None:
    reply = sse_reply(_text("late"), _STOP, done=True, stall_headers=True)
    loopback.queue(reply)
    events = [ev async for ev in _limited(loopback, idle_timeout=0.2).stream(HI)]
    assert _outcome(events) == [("start",), ("error", "stream_idle", "The provider sent no data for 0.2 seconds")]
    assert reply.stalled.is_set()


async def test_no_response_headers_within_the_total_limit_is_a_timeout(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(_text("late"), _STOP, done=True, stall_headers=True))
    events = [ev async for ev in _limited(loopback, idle_timeout=None, timeout=0.2).stream(HI)]
    assert _outcome(events) == [("start",), ("error", "timeout", "The request timed out")]


async def test_an_unstreamed_request_has_only_the_total_limit(loopback: LoopbackServer) -> None:
    loopback.queue(Reply(headers={"content-type": "application/json"}, chunks=[b"{}"], stall_headers=True))
    model = OpenAIChatModel(
        "m",
        base_url=loopback.url,
        api_key="k",
        retry=NO_RETRY,
        compat=Compat(streaming=False),
        idle_timeout=0.05,
        timeout=0.3,
    )
    events = [ev async for ev in model.stream(HI)]
    assert _outcome(events) == [("start",), ("error", "timeout", "The request timed out")]


async def test_a_slow_consumer_is_not_an_idle_provider(loopback: LoopbackServer) -> None:
    # The idle limit counts the time spent waiting for bytes, not the time the consumer
    # spends between reads.
    reply = sse_reply(_text("a"), _text("b"), _STOP, done=True, stall_after=1)
    loopback.queue(reply)
    events = []
    async for ev in _limited(loopback, idle_timeout=0.2).stream(HI):
        events.append(ev)
        if ev.type == "text_delta" and ev.delta == "a":
            await asyncio.sleep(0.4)  # busy for twice the idle limit while the provider holds back
            reply.release.set()
    assert _outcome(events) == [
        ("start",),
        ("text_start",),
        ("text_delta", "a"),
        ("text_delta", "b"),
        ("text_end",),
        ("done",),
    ]


async def test_time_limits_leave_no_timer_behind(loopback: LoopbackServer) -> None:
    loopback.queue(_done_stream("ok"), Reply(status=500, chunks=[b"boom"]))
    model = _limited(loopback, idle_timeout=30, timeout=60)
    assert [ev async for ev in model.stream(HI)][-1].type == "done"
    assert [ev async for ev in model.stream(HI)][-1].type == "error"
    scheduled = asyncio.get_running_loop()._scheduled  # type: ignore[attr-defined]
    pending = [h for h in scheduled if not h.cancelled() and isinstance(getattr(h._callback, "__self__", None), Deadline)]
    assert pending == []


async def test_an_abort_wins_over_a_limit_that_passed_while_the_consumer_was_busy(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(_text("a"), _text("b"), _STOP, done=True, stall_after=1))
    signal = AbortSignal()
    model = OpenAIChatModel("m", base_url=loopback.url, api_key="k", idle_timeout=None, timeout=0.1)
    events = []
    async for ev in model.stream(HI, StreamOptions(signal=signal)):
        events.append(ev)
        if ev.type == "text_delta":
            await asyncio.sleep(0.2)  # busy past the total limit
            signal.abort()
    assert _outcome(events) == [("start",), ("text_start",), ("text_delta", "a"), ("error", None, "Request was aborted")]
    assert events[-1].error.stop_reason == "aborted"
