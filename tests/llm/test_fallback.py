"""FallbackModel: exact event sequences for every way a chain can go."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from ketch import Agent
from ketch.llm import AbortSignal
from ketch.llm import FallbackModel
from ketch.llm import MessageBuilder
from ketch.llm import Model
from ketch.llm import Request
from ketch.llm import StreamEvent
from ketch.llm import StreamOptions
from ketch.llm import UserMessage
from ketch.llm import complete
from ketch.testing import FunctionModel
from ketch.testing import ScriptedModel
from ketch.testing import error_reply
from ketch.testing import reply

CTX = Request(messages=[UserMessage(content="hi", timestamp=1.0)])


def scripted(name: str, *replies: Any) -> ScriptedModel:
    return ScriptedModel(list(replies), provider=name, api=f"{name}-api", id=f"{name}-model")


def label(ev: StreamEvent) -> tuple[Any, ...]:
    t = ev.type
    if t == "start":
        return ("start", ev.partial.provider)  # type: ignore[union-attr]
    if t in ("text_start", "thinking_start", "toolcall_start"):
        return (t, ev.index)  # type: ignore[union-attr]
    if t in ("text_delta", "thinking_delta", "toolcall_delta"):
        return (t, ev.index, ev.delta)  # type: ignore[union-attr]
    if t in ("text_end", "thinking_end"):
        return (t, ev.index, ev.content)  # type: ignore[union-attr]
    if t == "retry":
        return ("retry", ev.attempt, ev.max_attempts, ev.delay, ev.error_kind, ev.error_message, ev.discard_partial)  # type: ignore[union-attr]
    if t == "done":
        m = ev.message  # type: ignore[union-attr]
        return ("done", ev.reason, m.provider, m.model, m.text)  # type: ignore[union-attr]
    if t == "error":
        m = ev.error  # type: ignore[union-attr]
        return ("error", ev.reason, m.provider, m.error_kind, m.error_message)  # type: ignore[union-attr]
    return (t,)


async def run(model: Model, options: StreamOptions | None = None) -> list[tuple[Any, ...]]:
    return [label(ev) async for ev in model.stream(CTX, options)]


TEXT_B = [("text_start", 0), ("text_delta", 0, "from b"), ("text_end", 0, "from b")]


async def test_primary_answers() -> None:
    a, b = scripted("a", "hello"), scripted("b", "unused")
    chain = FallbackModel([a, b])
    assert await run(chain) == [
        ("start", "a"),
        ("text_start", 0),
        ("text_delta", 0, "hello"),
        ("text_end", 0, "hello"),
        ("done", "stop", "a", "a-model", "hello"),
    ]
    assert chain.last_model is a
    assert (len(a.requests), len(b.requests)) == (1, 0)


async def test_failover_before_any_content() -> None:
    a, b = scripted("a", error_reply("slow down", kind="rate_limit")), scripted("b", "from b")
    chain = FallbackModel([a, b])
    assert await run(chain) == [
        ("retry", 1, 2, 0.0, "rate_limit", "slow down", False),
        ("start", "b"),
        *TEXT_B,
        ("done", "stop", "b", "b-model", "from b"),
    ]
    assert chain.last_model is b
    assert b.requests[0].messages == CTX.messages


async def test_failover_after_partial_content_discards_it() -> None:
    a, b = scripted("a", error_reply("overloaded", "part", kind="overloaded")), scripted("b", "from b")
    chain = FallbackModel([a, b])
    assert await run(chain) == [
        ("start", "a"),
        ("text_start", 0),
        ("text_delta", 0, "part"),
        ("text_end", 0, "part"),
        ("retry", 1, 2, 0.0, "overloaded", "overloaded", True),
        ("start", "b"),
        *TEXT_B,
        ("done", "stop", "b", "b-model", "from b"),
    ]


@pytest.mark.parametrize("kind", ["rate_limit", "overloaded", "timeout", "stream_idle", "network", "server"])
async def test_every_failover_kind_moves_on(kind: str) -> None:
    chain = FallbackModel([scripted("a", error_reply("e", kind=kind)), scripted("b", "from b")])
    events = await run(chain)
    assert events[0] == ("retry", 1, 2, 0.0, kind, "e", False)
    assert events[-1] == ("done", "stop", "b", "b-model", "from b")


@pytest.mark.parametrize("kind", ["auth", "invalid_request", "context_overflow", "content_filter", "unknown"])
async def test_other_errors_end_the_stream(kind: str) -> None:
    a, b = scripted("a", error_reply("nope", kind=kind)), scripted("b", "unused")
    chain = FallbackModel([a, b])
    assert await run(chain) == [("start", "a"), ("error", "error", "a", kind, "nope")]
    assert chain.last_model is a
    assert len(b.requests) == 0


async def test_every_model_fails() -> None:
    a = scripted("a", error_reply("limit", kind="rate_limit"))
    b = scripted("b", error_reply("down", "x", kind="server"))
    c = scripted("c", error_reply("still down", kind="server"))
    chain = FallbackModel([a, b, c])
    assert await run(chain) == [
        ("retry", 1, 3, 0.0, "rate_limit", "limit", False),
        ("start", "b"),
        ("text_start", 0),
        ("text_delta", 0, "x"),
        ("text_end", 0, "x"),
        ("retry", 2, 3, 0.0, "server", "down", True),
        ("start", "c"),
        ("error", "error", "c", "server", "still down"),
    ]
    assert chain.last_model is c


async def test_final_message_names_the_answering_model() -> None:
    chain = FallbackModel([scripted("a", error_reply("e", kind="timeout")), scripted("b", "from b")])
    message = await complete(chain, CTX)
    assert (message.provider, message.api, message.model, message.text) == ("b", "b-api", "b-model", "from b")
    assert (chain.provider, chain.api, chain.id) == ("a", "a-api", "a-model")


async def test_abort_ends_the_stream_without_failover() -> None:
    signal = AbortSignal()
    a, b = scripted("a", reply("Hi", hang=True)), scripted("b", "unused")
    chain = FallbackModel([a, b])
    events = []
    async for ev in chain.stream(CTX, StreamOptions(signal=signal)):
        events.append(label(ev))
        if ev.type == "text_end":
            signal.abort()
    assert events == [
        ("start", "a"),
        ("text_start", 0),
        ("text_delta", 0, "Hi"),
        ("text_end", 0, "Hi"),
        ("error", "aborted", "a", None, "Request was aborted"),
    ]
    assert len(b.requests) == 0


class AbortingModel:
    """Aborts the request's signal, then reports an eligible error (a race a guarded
    stream resolves as an abort, but a model may not)."""

    provider, api, id = "x", "x-api", "x-model"
    context_window = 128_000

    async def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        assert options is not None and options.signal is not None
        builder = MessageBuilder(provider="x", api="x-api", model="x-model")
        yield builder.start()
        options.signal.abort()
        yield builder.error("limit", kind="rate_limit")


async def test_eligible_error_after_abort_does_not_fail_over() -> None:
    b = scripted("b", "unused")
    assert await run(FallbackModel([AbortingModel(), b]), StreamOptions(signal=AbortSignal())) == [
        ("start", "x"),
        ("error", "error", "x", "rate_limit", "limit"),
    ]
    assert len(b.requests) == 0


class RaisingModel:
    provider, api, id = "r", "r-api", "r-model"
    context_window = 128_000

    def __init__(self, emit_start: bool, exc: Exception | None) -> None:
        self.emit_start = emit_start
        self.exc = exc

    async def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        if self.emit_start:
            yield MessageBuilder(provider="r", api="r-api", model="r-model").start()
        if self.exc is not None:
            raise self.exc


async def test_a_model_that_raises_ends_with_an_error() -> None:
    b = scripted("b", "unused")
    assert await run(FallbackModel([RaisingModel(True, RuntimeError("bad")), b])) == [
        ("start", "r"),
        ("error", "error", "r", "unknown", "RuntimeError: bad"),
    ]
    assert len(b.requests) == 0


async def test_a_stream_without_terminal_event_fails_over() -> None:
    chain = FallbackModel([RaisingModel(True, None), scripted("b", "from b")])
    assert await run(chain) == [
        ("retry", 1, 2, 0.0, "network", "stream ended without a terminal event", False),
        ("start", "b"),
        *TEXT_B,
        ("done", "stop", "b", "b-model", "from b"),
    ]


async def test_last_model_streams_unchanged() -> None:
    chain = FallbackModel([scripted("solo", error_reply("e", kind="server"))])
    assert await run(chain) == [("start", "solo"), ("error", "error", "solo", "server", "e")]


async def test_api_key_only_goes_to_the_primary_provider() -> None:
    seen: list[tuple[str, str | None]] = []

    def responder(name: str, fail: bool) -> Any:
        def fn(context: Request, options: StreamOptions) -> Any:
            seen.append((name, options.api_key))
            return error_reply("e", kind="server") if fail else "ok"

        return fn

    a1 = FunctionModel(responder("a1", True), provider="a", id="a1")
    a2 = FunctionModel(responder("a2", True), provider="a", id="a2")
    b = FunctionModel(responder("b", False), provider="b", id="b")
    message = await complete(FallbackModel([a1, a2, b]), CTX, StreamOptions(api_key="sk-a", temperature=0.5))
    assert message.text == "ok"
    assert seen == [("a1", "sk-a"), ("a2", "sk-a"), ("b", None)]
    assert b.requests[0].options.temperature == 0.5


async def test_agent_run_with_fallback() -> None:
    a, b = scripted("a", error_reply("limit", "partial", kind="rate_limit")), scripted("b", "from b")
    agent = Agent(FallbackModel([a, b]))
    result = await agent.prompt("hi")
    final = result.last_assistant
    assert final is not None
    assert (final.provider, final.text, final.stop_reason) == ("b", "from b", "stop")
    assert [m.role for m in result.messages] == ["user", "assistant"]


def test_needs_a_model() -> None:
    with pytest.raises(ValueError) as e:
        FallbackModel([])
    assert str(e.value) == "FallbackModel needs at least one model"
    assert repr(FallbackModel([scripted("a"), scripted("b")])) == "FallbackModel([a:a-model, b:b-model])"
    assert isinstance(FallbackModel([scripted("a")]), Model)
