"""White-box test: imports ketch implementation modules (private) directly.

OpenAI Chat Completions adapter against the scripted loopback server."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
from loopback import LoopbackServer
from loopback import Reply
from loopback import json_reply
from loopback import sse_reply
from loopback import text_reply

from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import CustomMessage
from ketch.llm import ImageContent
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import ThinkingContent
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import ToolSpec
from ketch.llm import Usage
from ketch.llm import UserMessage
from ketch.llm import complete
from ketch.llm import get_model
from ketch.llm._providers.base import HTTPExchange
from ketch.llm._providers.openai_chat import PRESETS
from ketch.llm._providers.openai_chat import Compat
from ketch.llm._providers.openai_chat import OpenAIChatModel
from ketch.llm._registry import ModelInfo
from ketch.llm._registry import Pricing
from ketch.llm._registry import get_provider
from ketch.llm._retry import NO_RETRY
from ketch.llm._retry import RetryPolicy

FAST = RetryPolicy(max_attempts=3, base_delay=0.001, multiplier=2.0, max_delay=1.0, jitter=0)
HI = Request(messages=[UserMessage(content="hi", timestamp=0)])
WEATHER = ToolSpec(
    name="get_weather",
    description="Weather for a city",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


class Note(CustomMessage, tag="test_note"):
    text: str


def delta(content: str | None = None, *, finish: str | None = None, **fields: Any) -> dict[str, Any]:
    d: dict[str, Any] = dict(fields)
    if content is not None:
        d["content"] = content
    return {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


def tool_delta(index: int, *, id: str | None = None, name: str | None = None, args: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index}
    if id is not None:
        call["id"] = id
        call["type"] = "function"
    fn: dict[str, Any] = {}
    if name is not None:
        fn["name"] = name
    if args is not None:
        fn["arguments"] = args
    call["function"] = fn
    return delta(tool_calls=[call])


def usage_chunk(prompt: int, completion: int, cached: int = 0, reasoning: int = 0) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "choices": [],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        },
    }


def text_stream(*pieces: str, finish: str = "stop") -> Reply:
    return sse_reply(*(delta(p) for p in pieces), delta(finish=finish))


def summary(ev: Any) -> tuple[Any, ...]:
    t = ev.type
    if t in ("text_delta", "thinking_delta", "toolcall_delta"):
        return (t, ev.index, ev.delta)
    if t in ("text_start", "thinking_start", "toolcall_start", "text_end", "thinking_end"):
        return (t, ev.index)
    if t == "toolcall_end":
        return (t, ev.index, ev.tool_call.name, ev.tool_call.args)
    if t == "retry":
        return (t, ev.attempt, ev.max_attempts, ev.delay, ev.error_kind, ev.error_message, ev.discard_partial)
    if t == "done":
        return (t, ev.reason)
    if t == "error":
        return (t, ev.reason, ev.error.error_kind, ev.error.error_message)
    return (t,)


def make(server: LoopbackServer, **kwargs: Any) -> OpenAIChatModel:
    kwargs.setdefault("api_key", "sk-test")
    kwargs.setdefault("retry", FAST)
    kwargs.setdefault("base_url", server.url + "/v1")
    return OpenAIChatModel(kwargs.pop("id", "gpt-test"), **kwargs)


async def run(model: OpenAIChatModel, context: Request = HI, options: StreamOptions | None = None) -> list[Any]:
    return [ev async for ev in model.stream(context, options)]


async def run_aborting_on(model: OpenAIChatModel, kind: str) -> list[Any]:
    """The events of a stream whose signal is aborted when the first ``kind`` event arrives."""
    signal = AbortSignal()
    events = []
    async for ev in model.stream(HI, StreamOptions(signal=signal)):
        events.append(ev)
        if ev.type == kind:
            signal.abort()
    return events


# -- streaming -----------------------------------------------------------------------------
async def test_streamed_text_events_request_and_message(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(delta("Hel"), delta("lo"), delta(finish="stop"), usage_chunk(10, 2)))
    model = make(loopback)
    ctx = Request(system_prompt="Be brief.", messages=[UserMessage(content="hi", timestamp=0)])
    events = await run(model, ctx, StreamOptions(max_tokens=50, temperature=0.5))
    assert [summary(e) for e in events] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Hel"),
        ("text_delta", 0, "lo"),
        ("text_end", 0),
        ("done", "stop"),
    ]
    message = events[-1].message
    assert message.content == [TextContent(text="Hello")]
    assert (message.provider, message.api, message.model, message.response_id) == (
        "openai",
        "openai-chat",
        "gpt-test",
        "chatcmpl-1",
    )
    assert message.usage == Usage(input=10, output=2, total_tokens=12)
    [request] = loopback.requests
    assert (request.method, request.path) == ("POST", "/v1/chat/completions")
    assert request.headers["Authorization"] == "Bearer sk-test"
    assert request.headers["Accept"] == "text/event-stream"
    assert request.json == {
        "model": "gpt-test",
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}],
        "max_completion_tokens": 50,
        "temperature": 0.5,
        "stream": True,
        "stream_options": {"include_usage": True},
    }


async def test_every_event_carries_the_same_live_partial(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("a", "b"))
    events = await run(make(loopback))
    final = events[-1].message
    assert all(e.partial is final for e in events[:-1])


async def test_reasoning_then_text(loopback: LoopbackServer) -> None:
    loopback.queue(
        sse_reply(
            delta(reasoning_content="Let me "),
            delta(reasoning_content="think."),
            delta("Answer"),
            delta(finish="stop"),
        )
    )
    events = await run(make(loopback, compat=PRESETS["deepseek"]))
    assert [summary(e) for e in events] == [
        ("start",),
        ("thinking_start", 0),
        ("thinking_delta", 0, "Let me "),
        ("thinking_delta", 0, "think."),
        ("thinking_end", 0),
        ("text_start", 1),
        ("text_delta", 1, "Answer"),
        ("text_end", 1),
        ("done", "stop"),
    ]
    assert events[-1].message.content == [ThinkingContent(thinking="Let me think."), TextContent(text="Answer")]


async def test_reasoning_field_named_reasoning(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(delta(reasoning="hmm"), delta("ok", finish="stop")))
    events = await run(make(loopback, compat=PRESETS["ollama"]))
    assert events[-1].message.content == [ThinkingContent(thinking="hmm"), TextContent(text="ok")]


async def test_streamed_tool_calls(loopback: LoopbackServer) -> None:
    loopback.queue(
        sse_reply(
            delta("Checking."),
            tool_delta(0, id="call_a", name="get_weather", args=""),
            tool_delta(0, args='{"ci'),
            tool_delta(0, args='ty": "Paris"}'),
            tool_delta(1, id="call_b", name="get_weather", args='{"city": "Rome"}'),
            delta(finish="tool_calls"),
        )
    )
    events = await run(make(loopback), Request(messages=[UserMessage(content="w")], tools=[WEATHER]))
    assert [summary(e) for e in events] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Checking."),
        ("text_end", 0),
        ("toolcall_start", 1),
        ("toolcall_delta", 1, '{"ci'),
        ("toolcall_delta", 1, 'ty": "Paris"}'),
        ("toolcall_start", 2),
        ("toolcall_delta", 2, '{"city": "Rome"}'),
        ("toolcall_end", 1, "get_weather", {"city": "Paris"}),
        ("toolcall_end", 2, "get_weather", {"city": "Rome"}),
        ("done", "tool_use"),
    ]
    message = events[-1].message
    assert message.tool_calls == [
        ToolCall(id="call_a", name="get_weather", args={"city": "Paris"}),
        ToolCall(id="call_b", name="get_weather", args={"city": "Rome"}),
    ]
    assert loopback.requests[0].json["tools"] == [
        {"type": "function", "function": {"name": "get_weather", "description": "Weather for a city", "parameters": WEATHER.parameters}}
    ]
    assert loopback.requests[0].json["tool_choice"] == "auto"


async def test_partial_tool_arguments_are_parsed_as_they_stream(loopback: LoopbackServer) -> None:
    loopback.queue(
        sse_reply(
            tool_delta(0, id="c1", name="get_weather"),
            tool_delta(0, args='{"city": "Par'),
            tool_delta(0, args='is"}'),
            delta(finish="tool_calls"),
        )
    )
    seen = []
    async for ev in make(loopback).stream(HI):
        if ev.type == "toolcall_delta":
            seen.append(dict(ev.partial.content[ev.index].args))
    assert seen == [{"city": "Par"}, {"city": "Paris"}]


async def test_repeated_id_and_name_in_every_chunk_is_one_call(loopback: LoopbackServer) -> None:
    # llama-cpp-python repeats id and name in every tool-call chunk.
    loopback.queue(
        sse_reply(
            tool_delta(0, id="call_x", name="get_weather", args="{"),
            tool_delta(0, id="call_x", name="get_weather", args='"city": "Oslo"'),
            tool_delta(0, id="call_x", name="get_weather", args="}"),
            delta(finish="tool_calls"),
        )
    )
    events = await run(make(loopback))
    assert events[-1].message.tool_calls == [ToolCall(id="call_x", name="get_weather", args={"city": "Oslo"})]


async def test_invalid_tool_arguments_are_kept_raw(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(tool_delta(0, id="c1", name="f", args="{not json"), delta(finish="tool_calls")))
    events = await run(make(loopback))
    [call] = events[-1].message.tool_calls
    assert (call.args, call.raw_arguments) == ({}, "{not json")
    assert call.parse_error is not None and call.parse_error.startswith("invalid JSON")


async def test_usage_normalised_with_cache_and_cost(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(delta("x"), delta(finish="stop"), usage_chunk(1000, 300, cached=400, reasoning=100)))
    info = ModelInfo(
        id="gpt-test",
        provider="openai",
        api="openai-chat",
        pricing=Pricing(input=2.0, output=8.0, cache_read=0.5),
    )
    events = await run(make(loopback, info=info))
    usage = events[-1].message.usage
    assert (usage.input, usage.output, usage.cache_read, usage.cache_write, usage.total_tokens) == (600, 300, 400, 0, 1300)
    assert usage.cost.input == pytest.approx(0.0012)
    assert usage.cost.output == pytest.approx(0.0024)
    assert usage.cost.cache_read == pytest.approx(0.0002)
    assert usage.cost.total == pytest.approx(0.0038)


async def test_reasoning_tokens_added_when_not_in_completion_tokens(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(delta("x", finish="stop"), usage_chunk(10, 5, reasoning=20)))
    events = await run(make(loopback, compat=PRESETS["xai"]))
    assert events[-1].message.usage == Usage(input=10, output=25, total_tokens=35)


async def test_deepseek_cache_hit_tokens(loopback: LoopbackServer) -> None:
    chunk = {"choices": [], "usage": {"prompt_tokens": 100, "completion_tokens": 5, "prompt_cache_hit_tokens": 60}}
    loopback.queue(sse_reply(delta("x", finish="stop"), chunk))
    events = await run(make(loopback, compat=PRESETS["deepseek"]))
    assert events[-1].message.usage == Usage(input=40, output=5, cache_read=60, total_tokens=105)


async def test_usage_beyond_context_window_is_overflow(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(delta("x", finish="stop"), usage_chunk(5000, 5)))
    info = ModelInfo(id="gpt-test", provider="openai", api="openai-chat", context_window=4096)
    events = await run(make(loopback, info=info))
    assert summary(events[-1]) == (
        "error",
        "error",
        "context_overflow",
        "The request used 5000 input tokens, more than the 4096-token context window",
    )


async def test_finish_length(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("cut", finish="length"))
    events = await run(make(loopback))
    assert summary(events[-1]) == ("done", "length")


async def test_content_filter_is_an_error_keeping_partial_text(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("Some", finish="content_filter"))
    events = await run(make(loopback))
    assert [summary(e) for e in events][-3:] == [
        ("text_delta", 0, "Some"),
        ("text_end", 0),
        ("error", "error", "content_filter", "The provider's content filter stopped the response"),
    ]
    assert events[-1].error.content == [TextContent(text="Some")]
    assert len(loopback.requests) == 1


async def test_error_object_inside_the_stream(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(delta("par"), {"error": {"message": "The server had an error", "type": "server_error"}}, done=False))
    events = await run(make(loopback, retry=NO_RETRY))
    assert summary(events[-1]) == ("error", "error", "server", "The server had an error")
    assert events[-1].error.content == [TextContent(text="par")]


async def test_end_of_body_after_finish_reason_without_done_is_complete(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(delta("ok"), delta(finish="stop"), done=False))
    events = await run(make(loopback))
    assert summary(events[-1]) == ("done", "stop")
    assert events[-1].message.text == "ok"


async def test_json_answer_to_a_stream_request_is_parsed(loopback: LoopbackServer) -> None:
    loopback.queue(
        json_reply({"id": "r1", "choices": [{"message": {"role": "assistant", "content": "plain"}, "finish_reason": "stop"}]})
    )
    events = await run(make(loopback))
    assert [summary(e) for e in events] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "plain"),
        ("text_end", 0),
        ("done", "stop"),
    ]


# -- the non-streamed fallback -------------------------------------------------------------
async def test_tools_with_auto_choice_unstreamed_when_endpoint_cannot_stream_them(loopback: LoopbackServer) -> None:
    loopback.queue(
        json_reply(
            {
                "id": "chatcmpl-9",
                "choices": [
                    {
                        "message": {
                            "role": "assistant",
                            "content": None,
                            "tool_calls": [
                                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
                            ],
                        },
                        "finish_reason": "tool_calls",
                    }
                ],
                "usage": {"prompt_tokens": 20, "completion_tokens": 9, "total_tokens": 29},
            }
        )
    )
    model = OpenAIChatModel("smol", provider="llama-cpp-python", base_url=loopback.url + "/v1", retry=FAST)
    events = await run(model, Request(messages=[UserMessage(content="w")], tools=[WEATHER]), StreamOptions(max_tokens=30))
    assert [summary(e) for e in events] == [
        ("start",),
        ("toolcall_start", 0),
        ("toolcall_delta", 0, '{"city": "Paris"}'),
        ("toolcall_end", 0, "get_weather", {"city": "Paris"}),
        ("done", "tool_use"),
    ]
    assert events[-1].message.usage == Usage(input=20, output=9, total_tokens=29)
    assert events[-1].message.provider == "llama-cpp-python"
    body = loopback.requests[0].json
    assert (body["stream"], body["tool_choice"], body["max_tokens"]) == (False, "auto", 30)
    assert "stream_options" not in body
    assert "Authorization" not in loopback.requests[0].headers
    assert loopback.requests[0].headers["Accept"] == "application/json"


async def test_forced_tool_still_streams_on_that_endpoint(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(tool_delta(0, id="c", name="get_weather", args="{}"), delta(finish="tool_calls")))
    model = OpenAIChatModel("smol", provider="llama-cpp-python", base_url=loopback.url + "/v1", retry=FAST)
    await run(model, Request(messages=[UserMessage(content="w")], tools=[WEATHER]), StreamOptions(tool_choice="get_weather"))
    body = loopback.requests[0].json
    assert body["stream"] is True
    assert body["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}


# -- request building ----------------------------------------------------------------------
async def test_message_conversion(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("ok"))
    messages = [
        UserMessage(
            content=[
                TextContent(text="look"),
                ImageContent(mime_type="image/jpeg", data="QUJD"),
                ImageContent(url="https://example.com/a.png"),
            ]
        ),
        AssistantMessage(
            content=[
                ThinkingContent(thinking="secret reasoning"),
                TextContent(text="Checking."),
                ToolCall(id="call_1", name="get_weather", args={"city": "Paris"}),
                ToolCall(id="call_2", name="shot", args={}),
            ],
            provider="openai",
            model="gpt-test",
            stop_reason="tool_use",
        ),
        ToolResultMessage(tool_call_id="call_1", tool_name="get_weather", content=[TextContent(text="Sunny")]),
        ToolResultMessage(
            tool_call_id="call_2",
            tool_name="shot",
            content=[ImageContent(mime_type="image/png", data="UE5H")],
        ),
        Note(text="ui only"),
        AssistantMessage(content=[TextContent(text="half")], stop_reason="error", error_message="boom"),
        AssistantMessage(content=[ToolCall(id="call_3", name="get_weather", args={})], stop_reason="aborted"),
        ToolResultMessage(tool_call_id="call_3", tool_name="get_weather", content=[TextContent(text="orphan")]),
        AssistantMessage(
            content=[ToolCall(id="call_4", name="get_weather", args={"city": "Oslo"})], stop_reason="tool_use"
        ),
        UserMessage(content="and now?"),
    ]
    await run(make(loopback), Request(system_prompt="sys", messages=messages))
    assert loopback.requests[0].json["messages"] == [
        {"role": "system", "content": "sys"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image_url", "image_url": {"url": "data:image/jpeg;base64,QUJD"}},
                {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
            ],
        },
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'}},
                {"id": "call_2", "type": "function", "function": {"name": "shot", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "Sunny"},
        {"role": "tool", "tool_call_id": "call_2", "content": "(see the attached image)"},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Images returned by the tools above:"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,UE5H"}},
            ],
        },
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_4", "type": "function", "function": {"name": "get_weather", "arguments": '{"city":"Oslo"}'}}
        ]},
        {"role": "tool", "tool_call_id": "call_4", "content": "No result provided"},
        {"role": "user", "content": "and now?"},
    ]


async def test_compatible_endpoints_send_empty_content_with_tool_calls(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("ok"))
    messages = [
        UserMessage(content="w"),
        AssistantMessage(content=[ToolCall(id="c1", name="get_weather", args={})], stop_reason="tool_use"),
        ToolResultMessage(tool_call_id="c1", tool_name="get_weather", content=[TextContent(text="Sunny")]),
    ]
    await run(make(loopback, compat=PRESETS["llamacpp"]), Request(messages=messages))
    assert loopback.requests[0].json["messages"][1] == {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{}"}}],
    }


async def test_tool_call_ids_normalised_consistently(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("ok"), text_stream("ok"))
    long_id = "call_abc|fc_" + "x" * 60
    messages = [
        UserMessage(content="w"),
        AssistantMessage(content=[ToolCall(id=long_id, name="f", args={})], stop_reason="tool_use"),
        ToolResultMessage(tool_call_id=long_id, tool_name="f", content=[TextContent(text="r")]),
    ]
    await run(make(loopback), Request(messages=messages))
    sent = loopback.requests[0].json["messages"]
    expected = "call_abc_fc_" + "x" * 28
    assert sent[1]["tool_calls"][0]["id"] == expected
    assert sent[2]["tool_call_id"] == expected

    await run(make(loopback, compat=PRESETS["mistral"]), Request(messages=messages))
    sent = loopback.requests[1].json["messages"]
    new_id = sent[1]["tool_calls"][0]["id"]
    assert len(new_id) == 9 and new_id.isalnum()
    assert sent[2] == {"role": "tool", "tool_call_id": new_id, "content": "r", "name": "f"}


async def test_images_replaced_for_a_text_only_model(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("ok"))
    info = ModelInfo(id="gpt-test", provider="openai", api="openai-chat", name="GPT Test", input_modalities=("text",))
    ctx = Request(messages=[UserMessage(content=[TextContent(text="see"), ImageContent(data="QUJD")])])
    await run(make(loopback, info=info), ctx)
    assert loopback.requests[0].json["messages"][0]["content"] == [
        {"type": "text", "text": "see"},
        {"type": "text", "text": "(image omitted: this model does not accept images)"},
    ]


async def test_structured_output_and_tool_choice_mapping(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("{}"), text_stream("{}"), text_stream("{}"))
    schema = {"type": "object", "properties": {"a": {"type": "integer"}}}
    ctx = Request(messages=[UserMessage(content="w")], tools=[WEATHER])
    model = make(loopback)
    await run(model, ctx, StreamOptions(response_format={"name": "answer", "schema": schema}, tool_choice="none"))
    await run(model, ctx, StreamOptions(tool_choice="required"))
    await run(model, ctx, StreamOptions(response_format={"name": "loose", "schema": schema, "strict": False}))
    first, second, third = (r.json for r in loopback.requests)
    assert first["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "answer", "schema": schema, "strict": True},
    }
    assert first["tool_choice"] == "none"
    assert second["tool_choice"] == "required"
    assert third["response_format"]["json_schema"]["strict"] is False


@pytest.mark.parametrize(
    ("level", "expected"),
    [("off", None), ("minimal", "low"), ("low", "low"), ("medium", "medium"), ("high", "high"), ("xhigh", "high")],
)
async def test_thinking_levels_map_to_reasoning_effort(loopback: LoopbackServer, level: str, expected: str | None) -> None:
    loopback.queue(text_stream("ok"))
    info = ModelInfo(
        id="o-test",
        provider="openai",
        api="openai-chat",
        thinking={"low": "low", "medium": "medium", "high": "high"},
        thinking_style="effort",
    )
    await run(make(loopback, info=info, id="o-test"), Request(system_prompt="s", messages=[UserMessage(content="w")]), StreamOptions(thinking=level))  # type: ignore[arg-type]
    body = loopback.requests[0].json
    assert body.get("reasoning_effort") == expected
    assert body["messages"][0] == {"role": "developer", "content": "s"}


async def test_no_reasoning_effort_for_models_without_reasoning(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("ok"))
    await run(make(loopback), Request(system_prompt="s", messages=[UserMessage(content="w")]), StreamOptions(thinking="high"))
    body = loopback.requests[0].json
    assert "reasoning_effort" not in body
    assert body["messages"][0] == {"role": "system", "content": "s"}


async def test_openrouter_reasoning_object(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("ok"))
    info = ModelInfo(id="m", provider="openrouter", api="openai-chat", thinking={"high": "high"})
    model = OpenAIChatModel("m", provider="openrouter", base_url=loopback.url, api_key="k", info=info)
    await run(model, HI, StreamOptions(thinking="high", max_tokens=5))
    body = loopback.requests[0].json
    assert (body["reasoning"], body["max_tokens"]) == ({"effort": "high"}, 5)


async def test_extra_fields_rewrite_and_observer(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("ok"))
    seen: list[HTTPExchange] = []

    async def rewrite(body: dict[str, Any]) -> dict[str, Any]:
        return {**body, "seed": 7}

    model = make(loopback, rewrite=rewrite, observer=seen.append, headers={"x-team": "a"})
    await run(model, HI, StreamOptions(extra={"top_p": 0.9}, headers={"x-trace": "t1"}))
    body = loopback.requests[0].json
    assert (body["top_p"], body["seed"]) == (0.9, 7)
    headers = loopback.requests[0].headers
    assert (headers["x-team"], headers["x-trace"]) == ("a", "t1")
    request, response = seen
    assert (request.phase, request.attempt, request.method, request.url) == (
        "request",
        1,
        "POST",
        loopback.url + "/v1/chat/completions",
    )
    assert request.headers["authorization"] == "***"
    assert request.body == body
    assert (response.phase, response.status, response.error) == ("response", 200, None)
    assert response.response_headers is not None
    assert response.response_headers["Content-Type"] == "text/event-stream"


async def test_rewrite_may_mutate_in_place(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("ok"))

    def rewrite(body: dict[str, Any]) -> None:
        body["user"] = "u1"

    await run(make(loopback, rewrite=rewrite))
    assert loopback.requests[0].json["user"] == "u1"


# -- keys ----------------------------------------------------------------------------------
async def test_key_resolution_order(loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    loopback.queue(*(text_stream("ok") for _ in range(3)))
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    await run(make(loopback, api_key="explicit"), HI, StreamOptions(api_key="per-turn"))
    await run(make(loopback, api_key=None), HI, StreamOptions(api_key="per-turn"))
    await run(make(loopback, api_key=None), HI)
    assert [r.headers["Authorization"] for r in loopback.requests] == [
        "Bearer explicit",
        "Bearer per-turn",
        "Bearer from-env",
    ]


async def test_missing_key_is_an_auth_error_without_a_request(loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    events = await run(make(loopback, api_key=None))
    assert [summary(e) for e in events] == [
        ("start",),
        ("error", "error", "auth", "No API key for provider 'openai': pass api_key or set OPENAI_API_KEY"),
    ]
    assert loopback.requests == []


async def test_api_key_never_leaks(loopback: LoopbackServer, caplog: pytest.LogCaptureFixture) -> None:
    secret = "sk-live-SECRET-1234567890"
    loopback.queue(
        json_reply({"error": {"message": f"Incorrect API key provided: {secret}", "code": "invalid_api_key"}}, 401),
        text_reply(f"upstream said {secret}", 500),
        text_reply(f"upstream said {secret}", 500),
        text_reply(f"upstream said {secret}", 500),
    )
    seen: list[HTTPExchange] = []
    model = make(loopback, api_key=secret, observer=seen.append)
    options = StreamOptions(api_key=secret, headers={"x-api-key": secret})
    first = await run(model, HI, options)
    second = await run(model, HI, options)
    assert summary(first[-1]) == ("error", "error", "auth", "HTTP 401: Incorrect API key provided: ***")
    assert summary(second[-1]) == ("error", "error", "server", "HTTP 500: upstream said ***")
    assert [summary(e)[:5] for e in second if e.type == "retry"] == [
        ("retry", 1, 3, 0.001, "server"),
        ("retry", 2, 3, 0.002, "server"),
    ]
    texts = [repr(model), repr(options), caplog.text]
    texts += [msgspec.json.encode(e).decode() + repr(e) for e in first + second]
    texts += [msgspec.json.encode(x).decode() + repr(x) for x in seen]
    assert loopback.requests[0].headers["Authorization"] == f"Bearer {secret}"  # it was really sent
    assert [t for t in texts if secret in t] == []


# -- faults and retries --------------------------------------------------------------------
async def test_429_with_retry_after_then_success(loopback: LoopbackServer) -> None:
    loopback.queue(json_reply({"error": {"message": "slow down"}}, 429, {"retry-after": "0"}), text_stream("ok"))
    events = await run(make(loopback))
    assert [summary(e) for e in events] == [
        ("start",),
        ("retry", 1, 3, 0.0, "rate_limit", "HTTP 429: slow down", False),
        ("text_start", 0),
        ("text_delta", 0, "ok"),
        ("text_end", 0),
        ("done", "stop"),
    ]
    assert len(loopback.requests) == 2


async def test_a_failed_request_reports_the_servers_retry_after_on_its_error_event(loopback: LoopbackServer) -> None:
    # with retries off (a durable runner retries instead) the delay asked for is kept
    loopback.queue(json_reply({"error": {"message": "slow down"}}, 429, {"retry-after": "7"}))
    events = await run(make(loopback, retry=NO_RETRY))
    assert (events[-1].type, events[-1].error.error_kind, events[-1].retry_after) == ("error", "rate_limit", 7.0)
    loopback.queue(json_reply({"error": {"message": "bad"}}, 400))
    events = await run(make(loopback, retry=NO_RETRY))
    assert (events[-1].type, events[-1].retry_after) == ("error", None)


async def test_429_without_retry_after_uses_backoff(loopback: LoopbackServer) -> None:
    loopback.queue(json_reply({"error": {"message": "slow"}}, 429), json_reply({"error": {"message": "slow"}}, 429), text_stream("ok"))
    events = await run(make(loopback))
    assert [summary(e)[:4] for e in events if e.type == "retry"] == [("retry", 1, 3, 0.001), ("retry", 2, 3, 0.002)]
    assert summary(events[-1]) == ("done", "stop")


async def test_exhausted_quota_is_an_account_error_and_not_retried(loopback: LoopbackServer) -> None:
    quota = {"error": {"message": "You exceeded your current quota.", "type": "insufficient_quota", "code": "insufficient_quota"}}
    loopback.queue(json_reply(quota, 429), text_stream("never sent"))
    events = await run(make(loopback))
    assert [summary(e) for e in events] == [
        ("start",),
        ("error", "error", "auth", "HTTP 429: You exceeded your current quota."),
    ]
    assert len(loopback.requests) == 1


async def test_retry_after_ms(loopback: LoopbackServer) -> None:
    loopback.queue(json_reply({"error": {"message": "slow"}}, 429, {"retry-after-ms": "5"}), text_stream("ok"))
    events = await run(make(loopback))
    assert [summary(e)[:4] for e in events if e.type == "retry"] == [("retry", 1, 3, 0.005)]


@pytest.mark.parametrize(
    ("status", "body", "kind", "message"),
    [
        (500, {"error": {"message": "Internal"}}, "server", "HTTP 500: Internal"),
        (503, {"error": {"message": "Unavailable"}}, "overloaded", "HTTP 503: Unavailable"),
        (529, {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "overloaded", "HTTP 529: Overloaded"),
    ],
)
async def test_server_errors_are_retried(loopback: LoopbackServer, status: int, body: Any, kind: str, message: str) -> None:
    loopback.queue(json_reply(body, status), text_stream("ok"))
    events = await run(make(loopback))
    assert [summary(e) for e in events][:2] == [("start",), ("retry", 1, 3, 0.001, kind, message, False)]
    assert summary(events[-1]) == ("done", "stop")


async def test_attempts_exhausted(loopback: LoopbackServer) -> None:
    loopback.queue(*(json_reply({"error": {"message": "Internal"}}, 500) for _ in range(3)))
    events = await run(make(loopback))
    assert [summary(e) for e in events] == [
        ("start",),
        ("retry", 1, 3, 0.001, "server", "HTTP 500: Internal", False),
        ("retry", 2, 3, 0.002, "server", "HTTP 500: Internal", False),
        ("error", "error", "server", "HTTP 500: Internal"),
    ]
    assert len(loopback.requests) == 3


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (401, {"error": {"message": "bad key", "code": "invalid_api_key"}}, "auth"),
        (400, {"error": {"message": "Unknown parameter", "type": "invalid_request_error"}}, "invalid_request"),
        (
            400,
            {
                "error": {
                    "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.",
                    "type": "invalid_request_error",
                    "code": "context_length_exceeded",
                }
            },
            "context_overflow",
        ),
        (
            400,
            {"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", "type": "exceed_context_size_error"}},
            "context_overflow",
        ),
    ],
)
async def test_no_retry_for_client_errors(loopback: LoopbackServer, status: int, body: Any, kind: str) -> None:
    loopback.queue(json_reply(body, status), text_stream("never"))
    events = await run(make(loopback))
    assert [e.type for e in events] == ["start", "error"]
    assert summary(events[-1])[:3] == ("error", "error", kind)
    assert len(loopback.requests) == 1


async def test_fail_fast_when_retry_after_exceeds_cap(loopback: LoopbackServer) -> None:
    loopback.queue(json_reply({"error": {"message": "quota"}}, 429, {"retry-after": "120"}), text_stream("never"))
    events = await run(make(loopback, retry=RetryPolicy(max_attempts=3, max_delay=10.0)))
    assert [summary(e) for e in events] == [
        ("start",),
        (
            "error",
            "error",
            "rate_limit",
            "HTTP 429: quota (the server asked to retry after 120s, more than the 10s limit)",
        ),
    ]
    assert len(loopback.requests) == 1


async def test_truncated_stream_without_terminal_marker(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(delta("part"), done=False))
    events = await run(make(loopback, retry=NO_RETRY))
    assert [summary(e) for e in events] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "part"),
        ("error", "error", "network", "The stream ended before the response was complete"),
    ]
    assert events[-1].error.content == [TextContent(text="part")]


async def test_connection_cut_mid_body(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(delta("part"), delta("more"), cut_after=1))
    events = await run(make(loopback, retry=NO_RETRY))
    assert [summary(e) for e in events] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "part"),
        ("error", "error", "network", "The connection closed before the response was complete"),
    ]


async def test_empty_ok_response_is_a_network_error(loopback: LoopbackServer) -> None:
    # llama-cpp-python answers 200 and then fails with no body when it cannot stream.
    loopback.queue(Reply(headers={"content-type": "text/event-stream"}))
    events = await run(make(loopback, retry=NO_RETRY))
    assert [summary(e) for e in events] == [
        ("start",),
        ("error", "error", "network", "The stream ended before the response was complete"),
    ]


async def test_idle_stream_times_out(loopback: LoopbackServer) -> None:
    reply = sse_reply(delta("slow"), stall_after=1)
    loopback.queue(reply)
    events = await run(make(loopback, retry=NO_RETRY, idle_timeout=0.2))
    assert [summary(e) for e in events] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "slow"),
        ("error", "error", "stream_idle", "The provider sent no data for 0.2 seconds"),
    ]
    assert reply.stalled.is_set()


async def test_retry_after_partial_output_discards_it(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(delta("first try"), cut_after=1), text_stream("second"))
    events = await run(make(loopback))
    assert [summary(e) for e in events] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "first try"),
        ("retry", 1, 3, 0.001, "network", "The connection closed before the response was complete", True),
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "second"),
        ("text_end", 0),
        ("done", "stop"),
    ]
    assert events[-1].message.content == [TextContent(text="second")]
    assert events[4].partial is events[-1].message
    assert events[1].partial is not events[-1].message


async def test_in_stream_rate_limit_is_retried(loopback: LoopbackServer) -> None:
    loopback.queue(
        sse_reply({"error": {"message": "Rate limit reached", "code": "rate_limit_exceeded"}}, done=False),
        text_stream("ok"),
    )
    events = await run(make(loopback))
    assert [summary(e) for e in events][:2] == [("start",), ("retry", 1, 3, 0.001, "rate_limit", "Rate limit reached", False)]
    assert summary(events[-1]) == ("done", "stop")


# -- abort and cancellation ----------------------------------------------------------------
async def test_abort_mid_stream_keeps_partial_and_closes_connection(loopback: LoopbackServer) -> None:
    reply = sse_reply(delta("partial "), delta("rest"), stall_after=1)
    loopback.queue(reply)
    events = await run_aborting_on(make(loopback), "text_delta")
    assert [summary(e) for e in events] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "partial "),
        ("error", "aborted", None, "Request was aborted"),
    ]
    assert events[-1].error.content == [TextContent(text="partial ")]
    assert events[-1].error.stop_reason == "aborted"
    await asyncio.wait_for(reply.disconnected.wait(), 5)


async def test_abort_during_retry_wait(loopback: LoopbackServer) -> None:
    loopback.queue(json_reply({"error": {"message": "slow"}}, 429, {"retry-after": "30"}))
    events = await run_aborting_on(make(loopback, retry=RetryPolicy(max_attempts=3, max_delay=60)), "retry")
    assert [summary(e) for e in events] == [
        ("start",),
        ("retry", 1, 3, 30.0, "rate_limit", "HTTP 429: slow", False),
        ("error", "aborted", None, "Request was aborted"),
    ]


async def test_abort_stops_the_rest_of_a_read_at_once(loopback: LoopbackServer) -> None:
    # All four deltas arrive in one read; the abort on the first ends the stream there.
    chunks = sse_reply(delta("a"), delta("b"), delta("c"), delta(finish="stop"), done=True).chunks
    loopback.queue(Reply(headers={"content-type": "text/event-stream"}, chunks=[b"".join(chunks)]))
    events = await run_aborting_on(make(loopback), "text_delta")
    assert [summary(e) for e in events] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "a"),
        ("error", "aborted", None, "Request was aborted"),
    ]
    assert events[-1].error.content == [TextContent(text="a")]


async def test_abort_during_a_retry_wait_after_discarded_output_starts_a_fresh_message(
    loopback: LoopbackServer,
) -> None:
    loopback.queue(sse_reply(delta("first try"), cut_after=1))
    events = await run_aborting_on(make(loopback, retry=RetryPolicy(max_attempts=3, base_delay=30, max_delay=60, jitter=0)), "retry")
    assert [summary(e) for e in events] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "first try"),
        ("retry", 1, 3, 30.0, "network", "The connection closed before the response was complete", True),
        ("start",),
        ("error", "aborted", None, "Request was aborted"),
    ]
    assert events[-1].error.content == []


async def test_abort_interrupts_a_request_hook(loopback: LoopbackServer) -> None:
    signal = AbortSignal()
    entered = asyncio.Event()

    async def rewrite(body: dict[str, Any]) -> None:
        entered.set()
        await asyncio.Event().wait()  # a hook that never returns

    async def abort_when_entered() -> None:
        await entered.wait()
        signal.abort()

    aborter = asyncio.create_task(abort_when_entered())
    events = [ev async for ev in make(loopback, rewrite=rewrite).stream(HI, StreamOptions(signal=signal))]
    await aborter
    assert [summary(e) for e in events] == [("start",), ("error", "aborted", None, "Request was aborted")]
    assert loopback.requests == []


async def test_pre_aborted_signal_sends_nothing(loopback: LoopbackServer) -> None:
    signal = AbortSignal()
    signal.abort()
    message = await complete(make(loopback), HI, StreamOptions(signal=signal))
    assert (message.stop_reason, message.content) == ("aborted", [])
    assert loopback.requests == []


async def test_aborted_message_can_be_sent_back(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("fine"))
    aborted = AssistantMessage(content=[TextContent(text="half")], stop_reason="aborted")
    ctx = Request(messages=[UserMessage(content="a"), aborted, UserMessage(content="b")])
    message = await complete(make(loopback), ctx)
    assert message.text == "fine"
    assert loopback.requests[0].json["messages"] == [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]


def test_presets_are_quirks_of_registered_providers() -> None:
    assert set(PRESETS) == {
        "openai",
        "deepseek",
        "groq",
        "openrouter",
        "together",
        "mistral",
        "xai",
        "ollama",
        "vllm",
        "lmstudio",
        "llamacpp",
        "llama-cpp-python",
    }
    assert PRESETS["llama-cpp-python"] == Compat(
        max_tokens_field="max_tokens", stream_usage=False, stream_tool_choice_auto=False
    )
    # Every preset's provider is registered, and the registry alone says where it is and
    # where its key comes from: a model built directly and one from get_model agree.
    for name in PRESETS:
        provider = get_provider(name)
        assert provider is not None, name
        direct = OpenAIChatModel("m", provider=name)
        resolved = get_model(f"{name}:m", api="openai-chat")
        assert isinstance(resolved, OpenAIChatModel)
        assert (direct.base_url, direct.env_keys, direct.requires_key, direct.compat) == (
            provider.base_url.rstrip("/"),
            provider.api_key_env,
            provider.requires_key,
            PRESETS[name],
        ), name
        assert (resolved.base_url, resolved.env_keys, resolved.requires_key, resolved.compat) == (
            direct.base_url,
            direct.env_keys,
            direct.requires_key,
            direct.compat,
        ), name
    groq = OpenAIChatModel("llama-3.3-70b-versatile", provider="groq")
    assert (groq.base_url, groq.env_keys) == ("https://api.groq.com/openai/v1", ("GROQ_API_KEY",))
    ollama = OpenAIChatModel("qwen3", provider="ollama")
    assert (ollama.base_url, ollama.env_keys, ollama.requires_key) == (
        "http://127.0.0.1:11434/v1",
        ("OLLAMA_API_KEY",),
        False,
    )


def test_an_unknown_provider_needs_a_base_url_and_reads_no_key_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError) as info:
        OpenAIChatModel("m", provider="house")
    assert str(info.value) == (
        "No base_url for provider 'house': pass base_url, or register the provider (ketch.llm.register_provider)"
    )
    # Given a URL, it does not send another provider's key there.
    monkeypatch.setenv("OPENAI_API_KEY", "sk-openai-secret")
    model = OpenAIChatModel("m", provider="house", base_url="http://127.0.0.1:9/v1/")
    assert (model.base_url, model.env_keys, model.requires_key) == ("http://127.0.0.1:9/v1", (), True)
    assert model.resolve_api_key() is None
    assert model.compat == Compat()  # no quirks: not OpenAI's


async def test_total_timeout(loopback: LoopbackServer) -> None:
    loopback.queue(sse_reply(delta("slow"), stall_after=1))
    events = await run(make(loopback, retry=NO_RETRY, idle_timeout=None, timeout=0.2))
    assert [summary(e) for e in events] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "slow"),
        ("error", "error", "timeout", "The request timed out"),
    ]


async def test_session_id_becomes_prompt_cache_key_for_openai_only(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("ok"), text_stream("ok"))
    await run(make(loopback), HI, StreamOptions(session_id="s-1"))
    await run(make(loopback, compat=PRESETS["groq"], provider="groq"), HI, StreamOptions(session_id="s-1"))
    assert loopback.requests[0].json["prompt_cache_key"] == "s-1"
    assert "prompt_cache_key" not in loopback.requests[1].json


async def test_stop_sequences_are_sent_as_stop(loopback: LoopbackServer) -> None:
    loopback.queue(text_stream("ok"))
    await run(make(loopback), HI, StreamOptions(stop_sequences=["END", "###"]))
    assert loopback.requests[0].json["stop"] == ["END", "###"]
    loopback.queue(text_stream("ok"))
    await run(make(loopback), HI, StreamOptions())
    assert "stop" not in loopback.requests[1].json
