"""White-box test: imports ketch implementation modules (private) directly.

The OpenAI Chat adapter against a real server: llama-cpp-python running SmolLM2-135M.

The server's quirks are handled by the ``llama-cpp-python`` preset (data, not special
cases): it cannot stream tool calls under ``tool_choice`` auto (requests go unstreamed),
it streams forced tool calls, it ignores ``stream_options``, and it fails on an
assistant tool-call message whose content is null (HTTP 500 from its chat template).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import msgspec
import pytest

from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import Request
from ketch.llm import StreamEvent
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import ToolResultMessage
from ketch.llm import ToolSpec
from ketch.llm import UserMessage
from ketch.llm import complete
from ketch.llm._providers.openai_chat import PRESETS
from ketch.llm._providers.openai_chat import OpenAIChatModel
from ketch.llm._retry import NO_RETRY
from ketch.llm._retry import RetryPolicy

LlamaServer = Any  # conftest.LlamaServer; not imported, as tests/conftest.py shares the module name

WEATHER = ToolSpec(
    name="get_weather",
    description="Get the current weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
STORY = Request(messages=[UserMessage(content="Write a long story about a dragon who learns to bake bread.")])
ASK_WEATHER = Request(messages=[UserMessage(content="What is the weather in Paris?")], tools=[WEATHER])


def model_for(server: LlamaServer, **kwargs: Any) -> OpenAIChatModel:
    kwargs.setdefault("retry", RetryPolicy(max_attempts=2, base_delay=0.01, jitter=0))
    kwargs.setdefault("idle_timeout", 60.0)
    return OpenAIChatModel("smollm2", provider="llama-cpp-python", base_url=server.base_url, **kwargs)


async def events_of(stream: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [ev async for ev in stream]


def shape(events: list[Any]) -> list[str]:
    """Event types with runs of deltas collapsed to one entry."""
    out: list[str] = []
    for ev in events:
        if ev.type.endswith("_delta") and out and out[-1] == ev.type:
            continue
        out.append(ev.type)
    return out


async def test_streamed_text(llama_server: LlamaServer) -> None:
    events = await events_of(model_for(llama_server).stream(STORY, StreamOptions(max_tokens=8, temperature=0)))
    assert shape(events) == ["start", "text_start", "text_delta", "text_end", "done"]
    deltas = [e.delta for e in events if e.type == "text_delta"]
    assert len(deltas) > 1
    message = events[-1].message
    assert message.content == [TextContent(text="".join(deltas))]
    assert message.text.strip() != ""
    assert (message.stop_reason, message.provider, message.api, message.model) == (
        "length",
        "llama-cpp-python",
        "openai-chat",
        "smollm2",
    )
    assert message.response_id is not None and message.response_id.startswith("chatcmpl-")


async def test_non_streamed_text(llama_server: LlamaServer) -> None:
    compat = msgspec.structs.replace(PRESETS["llama-cpp-python"], streaming=False)
    model = model_for(llama_server, compat=compat)
    events = await events_of(model.stream(STORY, StreamOptions(max_tokens=8, temperature=0)))
    assert [e.type for e in events] == ["start", "text_start", "text_delta", "text_end", "done"]
    message = events[-1].message
    assert message.stop_reason == "length"
    assert message.text == events[2].delta
    usage = message.usage
    assert usage.output == 8
    assert usage.input > 10
    assert usage.total_tokens == usage.input + usage.output


async def test_forced_tool_call_streams(llama_server: LlamaServer) -> None:
    options = StreamOptions(max_tokens=20, temperature=0, tool_choice="get_weather")
    events = await events_of(model_for(llama_server).stream(ASK_WEATHER, options))
    assert shape(events) == ["start", "toolcall_start", "toolcall_delta", "toolcall_end", "done"]
    assert sum(1 for e in events if e.type == "toolcall_delta") > 1
    message = events[-1].message
    assert message.stop_reason == "tool_use"
    [call] = message.tool_calls
    assert call.name == "get_weather"
    assert list(call.args) == ["city"] and isinstance(call.args["city"], str)
    assert call.parse_error is None


async def test_auto_tool_choice_goes_unstreamed_and_still_yields_events(llama_server: LlamaServer) -> None:
    events = await events_of(model_for(llama_server).stream(ASK_WEATHER, StreamOptions(max_tokens=12, temperature=0)))
    assert events[0].type == "start"
    assert events[-1].type == "done"
    message = events[-1].message
    # Either a tool call or text, but always well-formed and complete (never an error).
    if message.tool_calls:
        assert shape(events) == ["start", "toolcall_start", "toolcall_delta", "toolcall_end", "done"]
        assert message.stop_reason == "tool_use"
        assert message.tool_calls[0].name == "get_weather"
    else:
        assert shape(events) == ["start", "text_start", "text_delta", "text_end", "done"]
    assert message.usage.input > 0


async def test_tool_round_trip(llama_server: LlamaServer) -> None:
    model = model_for(llama_server)
    first = await complete(model, ASK_WEATHER, StreamOptions(max_tokens=20, temperature=0, tool_choice="get_weather"))
    assert first.stop_reason == "tool_use"
    [call] = first.tool_calls
    history = [
        *ASK_WEATHER.messages,
        first,
        ToolResultMessage(tool_call_id=call.id, tool_name=call.name, content=[TextContent(text="Sunny, 21 C")]),
    ]
    context = Request(messages=history, tools=[WEATHER])
    final = await complete(model, context, StreamOptions(max_tokens=8, temperature=0, tool_choice="none"))
    assert final.stop_reason in ("stop", "length"), final.error_message
    assert final.text.strip() != ""
    assert final.tool_calls == []


async def test_null_tool_call_content_is_what_this_server_rejects(llama_server: LlamaServer) -> None:
    # OpenAI's canonical null content breaks this server's chat template; the preset sends "".
    model = model_for(llama_server)
    first = await complete(model, ASK_WEATHER, StreamOptions(max_tokens=20, temperature=0, tool_choice="get_weather"))
    [call] = first.tool_calls
    context = Request(
        messages=[
            *ASK_WEATHER.messages,
            first,
            ToolResultMessage(tool_call_id=call.id, tool_name=call.name, content=[TextContent(text="Sunny")]),
        ],
        tools=[WEATHER],
    )
    null_compat = msgspec.structs.replace(PRESETS["llama-cpp-python"], tool_call_content="null")
    strict = model_for(llama_server, compat=null_compat, retry=NO_RETRY)
    message = await complete(strict, context, StreamOptions(max_tokens=8, tool_choice="none"))
    assert (message.stop_reason, message.error_kind) == ("error", "server")
    assert message.error_message is not None and message.error_message.startswith("HTTP 500: ")
    fixed = await complete(model, context, StreamOptions(max_tokens=4, tool_choice="none"))
    assert fixed.stop_reason in ("stop", "length"), fixed.error_message


class TurnTools:
    """A real model whose tool_choice is forced on the first call and "none" after."""

    def __init__(self, model: OpenAIChatModel) -> None:
        self.inner = model
        self.provider, self.api, self.id = model.provider, model.api, model.id
        self.context_window = model.context_window
        self.calls = 0

    def stream(self, request: Request, options: StreamOptions | None = None) -> AsyncIterator[StreamEvent]:
        self.calls += 1
        choice = "get_weather" if self.calls == 1 else "none"
        opts = msgspec.structs.replace(options or StreamOptions(), tool_choice=choice, max_tokens=20, temperature=0)
        return self.inner.stream(request, opts)


async def test_full_agent_run(llama_server: LlamaServer) -> None:
    import ketch.loop as loop
    seen: list[dict[str, Any]] = []

    async def get_weather(args: dict[str, Any], ctx: Any) -> str:
        seen.append(args)
        return "Sunny, 21 C"

    tool = loop.Tool("get_weather", WEATHER.description, WEATHER.parameters, get_weather)
    model = TurnTools(model_for(llama_server))
    context = loop.Conversation(messages=[], tools=[tool])
    run = loop.run_loop("What is the weather in Paris?", context, loop.LoopConfig(model=model, max_turns=3, length_recoveries=0))
    result = await run.result()
    roles = [m.role for m in result.messages]
    assert roles == ["user", "assistant", "tool_result", "assistant"]
    assert len(seen) == 1 and list(seen[0]) == ["city"]
    tool_result = result.messages[2]
    assert isinstance(tool_result, ToolResultMessage)
    assert (tool_result.text, tool_result.is_error) == ("Sunny, 21 C", False)
    final = result.messages[3]
    assert isinstance(final, AssistantMessage)
    assert final.stop_reason in ("stop", "length") and final.text.strip() != ""
    assert model.calls == 2


async def test_abort_mid_stream_keeps_partial_text(llama_server: LlamaServer) -> None:
    signal = AbortSignal()
    events = []
    async for ev in model_for(llama_server).stream(STORY, StreamOptions(max_tokens=200, signal=signal, temperature=0)):
        events.append(ev)
        if ev.type == "text_delta" and len(events) == 4:
            signal.abort()
    assert shape(events) == ["start", "text_start", "text_delta", "error"]
    message = events[-1].error
    assert message.stop_reason == "aborted"
    assert message.content == [TextContent(text=events[2].delta + events[3].delta)]
    # The server stays usable after the client dropped the connection.
    again = await complete(model_for(llama_server), STORY, StreamOptions(max_tokens=3, temperature=0))
    assert again.stop_reason == "length"


async def test_task_cancellation_closes_the_request(llama_server: LlamaServer) -> None:
    got_text = asyncio.Event()

    async def consume() -> None:
        async for ev in model_for(llama_server).stream(STORY, StreamOptions(max_tokens=300, temperature=0)):
            if ev.type == "text_delta":
                got_text.set()

    task = asyncio.create_task(consume())
    await got_text.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    again = await complete(model_for(llama_server), STORY, StreamOptions(max_tokens=3, temperature=0))
    assert again.stop_reason == "length"


async def test_server_killed_mid_stream(llama_server_factory: Any) -> None:
    server = llama_server_factory()
    model = model_for(server, retry=NO_RETRY)
    events = []

    async def consume() -> None:
        async for ev in model.stream(STORY, StreamOptions(max_tokens=400, temperature=0)):
            events.append(ev)
            if ev.type == "text_delta" and server.process.poll() is None:
                server.process.kill()

    await asyncio.wait_for(consume(), 60)  # a safety net against a hang, not a timing check
    assert shape(events)[:3] == ["start", "text_start", "text_delta"]
    last = events[-1]
    assert last.type == "error"
    assert last.error.error_kind == "network"
    assert last.error.error_message in (
        "The connection closed before the response was complete",
        "The server closed the connection",
    )
    assert last.error.text == "".join(e.delta for e in events if e.type == "text_delta")
