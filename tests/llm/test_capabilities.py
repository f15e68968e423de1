"""White-box test: imports ketch implementation modules (private) directly.

Optional capabilities of models and their streams are small protocols, not attribute probes."""

from __future__ import annotations

from collections.abc import AsyncIterator

from ketch.llm import AbortSignal
from ketch.llm import FallbackModel
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm._stream import AsyncClosable
from ketch.llm._stream import MessageBuilder
from ketch.llm._stream import StreamEvent
from ketch.llm._stream import guard_stream
from ketch.llm._stream import is_closable
from ketch.testing import ScriptedModel


class Events:
    """A hand-written stream (no generator) that can be closed: its ``aclose`` must run
    when the reader stops early, exactly as a generator's would."""

    def __init__(self, builder: MessageBuilder) -> None:
        self.builder = builder
        self.closed = 0
        self.sent = 0

    def __aiter__(self) -> Events:
        return self

    async def __anext__(self) -> StreamEvent:
        self.sent += 1
        if self.sent == 1:
            return self.builder.start()
        return self.builder.text_start()

    async def aclose(self) -> None:
        self.closed += 1


class Unclosable:
    """A stream without ``aclose``: nothing to close, nothing raised."""

    def __init__(self, builder: MessageBuilder) -> None:
        self.builder = builder

    def __aiter__(self) -> Unclosable:
        return self

    async def __anext__(self) -> StreamEvent:
        return self.builder.start()


async def _gen() -> AsyncIterator[int]:
    yield 1


def test_async_generators_are_closable_plain_iterators_are_not() -> None:
    builder = MessageBuilder(provider="p", api="a", model="m")
    assert isinstance(_gen(), AsyncClosable)
    assert isinstance(Events(builder), AsyncClosable)
    assert not isinstance(Unclosable(builder), AsyncClosable)
    assert not isinstance(iter(()), AsyncClosable)
    assert [is_closable(s) for s in (_gen(), Events(builder), Unclosable(builder), iter(()))] == [True, True, False, False]


async def test_guard_stream_closes_a_closable_producer_on_abort() -> None:
    builder = MessageBuilder(provider="p", api="a", model="m")
    producer = Events(builder)
    signal = AbortSignal()
    seen = []
    async for event in guard_stream(producer, builder, signal):
        seen.append(event.type)
        signal.abort()
    assert seen == ["start", "error"] and producer.closed >= 1  # closed (a second aclose is harmless)

    plain = Unclosable(builder)
    signal = AbortSignal()
    seen = []
    async for event in guard_stream(plain, builder, signal):
        seen.append(event.type)
        signal.abort()
    assert seen == ["start", "error"]


class ClosableModel:
    """A model whose stream is :class:`Events` and ends without a terminal event."""

    provider, api, id = "c", "c-api", "c-model"
    context_window = 1000

    def __init__(self) -> None:
        self.streams: list[Events] = []

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        events = Events(MessageBuilder(provider="c", api="c-api", model="c-model"))
        self.streams.append(events)
        return events


async def test_fallback_closes_the_inner_stream_it_stops_reading() -> None:
    model = ClosableModel()
    chain = FallbackModel([model, ScriptedModel(["unused"])])
    stream = chain.stream(Request())
    first = await stream.__anext__()
    assert first.type == "start"
    await stream.aclose()  # type: ignore[attr-defined]
    assert [s.closed for s in model.streams] == [1]
