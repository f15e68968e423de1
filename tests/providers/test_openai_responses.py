"""White-box test: imports ketch implementation modules (private) directly.

The OpenAI Responses adapter: request conversion, and recorded-format streams replayed
byte for byte by a loopback server (text, reasoning, tool calls, usage, every failure)."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest
import responses_streams as rs
from loopback import LoopbackServer
from loopback import Reply
from loopback import body_reply as error
from loopback import recorded_reply as sse
from transcripts import with_images

from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import Cost
from ketch.llm import CustomMessage
from ketch.llm import ImageContent
from ketch.llm import MessageBuilder
from ketch.llm import ModelError
from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import TextContent
from ketch.llm import ThinkingContent
from ketch.llm import ThinkingLevel
from ketch.llm import ToolCall
from ketch.llm import ToolResultMessage
from ketch.llm import ToolSpec
from ketch.llm import Usage
from ketch.llm import UserMessage
from ketch.llm import complete
from ketch.llm import get_model
from ketch.llm import messages_from_json
from ketch.llm import messages_to_json
from ketch.llm._providers.base import HTTPExchange
from ketch.llm._providers.openai_responses import OpenAIResponsesModel
from ketch.llm._providers.openai_responses import ResponsesStreamState
from ketch.llm._providers.openai_responses import build_request
from ketch.llm._providers.openai_responses import classify_failure
from ketch.llm._providers.openai_responses import convert_messages
from ketch.llm._providers.openai_responses import convert_tool_choice
from ketch.llm._providers.openai_responses import convert_tools
from ketch.llm._providers.openai_responses import reasoning_signature
from ketch.llm._providers.openai_responses import text_signature
from ketch.llm._registry import ModelInfo
from ketch.llm._registry import Pricing
from ketch.llm._registry import lookup
from ketch.llm._retry import RetryPolicy
from support import final
from support import plain
from support import run
from support import trace

KEY = "sk-test-S3CRET-abcdef1234567890"
ONE_SHOT = RetryPolicy(max_attempts=1)
QUICK = RetryPolicy(max_attempts=3, base_delay=0.001, multiplier=2.0, jitter=0.0)

GPT5 = ModelInfo(
    id="gpt-5",
    provider="openai",
    api="openai-responses",
    context_window=400_000,
    max_output_tokens=128_000,
    input_modalities=("text", "image"),
    pricing=Pricing(input=1.25, output=10.0, cache_read=0.125),
    thinking={"minimal": "minimal", "low": "low", "medium": "medium", "high": "high"},
    thinking_style="effort",
)

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)






def model_for(server: LoopbackServer, **kwargs: Any) -> OpenAIResponsesModel:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("retry", ONE_SHOT)
    kwargs.setdefault("info", GPT5)
    return OpenAIResponsesModel("gpt-5", base_url=server.url + "/v1", **kwargs)







HELLO = Request(system_prompt="Be brief.", messages=[UserMessage(content="Hi")])


# -- conversion: messages -----------------------------------------------------------------


def test_user_text_and_images_become_input_parts() -> None:
    items = convert_messages(
        [
            UserMessage(content="plain"),
            UserMessage(
                content=[
                    TextContent(text="What is this?"),
                    ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
                    ImageContent(url="https://example.com/cat.jpg", mime_type="image/jpeg"),
                ]
            ),
            UserMessage(content=[]),
        ]
    )
    assert items == [
        {"role": "user", "content": [{"type": "input_text", "text": "plain"}]},
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "What is this?"},
                {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
                {"type": "input_image", "image_url": "https://example.com/cat.jpg", "detail": "auto"},
            ],
        },
    ]


def test_assistant_items_replay_reasoning_text_and_calls_with_their_ids() -> None:
    message = AssistantMessage(
        content=[
            ThinkingContent(
                thinking="**Plan**\n\nCheck the weather.", signature=reasoning_signature("rs_1", "gAAAA-enc")
            ),
            ThinkingContent(thinking="", signature=reasoning_signature("rs_2", "gAAAA-enc2")),
            TextContent(text="Checking.", signature=text_signature("msg_1", "commentary")),
            TextContent(text=""),
            ToolCall(id="call_1", name="get_weather", args={"city": "Oslo"}, signature="fc_1"),
            ToolCall(
                id="call_2",
                name="get_weather",
                args={},
                raw_arguments='{"city": Oslo}',
                parse_error="invalid JSON",
                signature="fc_2",
            ),
        ],
        provider="openai",
        api="openai-responses",
        model="gpt-5",
    )
    assert convert_messages([message]) == [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "**Plan**\n\nCheck the weather."}],
            "encrypted_content": "gAAAA-enc",
        },
        {"type": "reasoning", "id": "rs_2", "summary": [], "encrypted_content": "gAAAA-enc2"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Checking.", "annotations": []}],
            "status": "completed",
            "id": "msg_1",
            "phase": "commentary",
        },
        {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": '{"city":"Oslo"}', "id": "fc_1"},
        {"type": "function_call", "call_id": "call_2", "name": "get_weather", "arguments": '{"city": Oslo}', "id": "fc_2"},
    ]


def test_foreign_signatures_are_never_sent_as_provider_ids() -> None:
    message = AssistantMessage(
        content=[
            ThinkingContent(thinking="Anthropic thoughts", signature="EqQBCkgIARABGAIiQL"),
            ThinkingContent(thinking="no signature"),
            ThinkingContent(thinking="json, wrong id", signature='{"id":"x_1","encrypted_content":"e"}'),
            TextContent(text="Hello.", signature="sig-from-elsewhere"),
            TextContent(text="Again.", signature='["msg_1"]'),
            ToolCall(id="toolu_01", name="get_weather", args={"city": "Rome"}, signature="gemini-thought"),
        ],
        provider="anthropic",
        api="anthropic-messages",
        model="claude",
    )
    assert convert_messages([message]) == [
        {"type": "message", "role": "assistant", "content": "Hello."},
        {"type": "message", "role": "assistant", "content": "Again."},
        {"type": "function_call", "call_id": "toolu_01", "name": "get_weather", "arguments": '{"city":"Rome"}'},
    ]


def test_reasoning_that_no_output_follows_is_not_replayed() -> None:
    cut_short = AssistantMessage(
        content=[
            ThinkingContent(thinking="", signature=reasoning_signature("rs_1", "e1")),
            TextContent(text="Partial answer", signature=text_signature("msg_1")),
            ThinkingContent(thinking="more", signature=reasoning_signature("rs_2", "e2")),
            TextContent(text=""),
        ],
        stop_reason="length",
    )
    only_reasoning = AssistantMessage(
        content=[ThinkingContent(thinking="t", signature=reasoning_signature("rs_3", "e3"))], stop_reason="length"
    )
    assert convert_messages([cut_short, only_reasoning]) == [
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e1"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Partial answer", "annotations": []}],
            "status": "completed",
            "id": "msg_1",
        },
    ]


def test_tool_results_become_function_call_outputs() -> None:
    class Note(CustomMessage, tag="rsp_note"):
        text: str

    items = convert_messages(
        [
            ToolResultMessage(
                tool_call_id="call_1",
                tool_name="get_weather",
                content=[TextContent(text="12°C, "), TextContent(text="rain")],
            ),
            ToolResultMessage(tool_call_id="call_2", tool_name="get_weather", content=[], is_error=True),
            Note(text="ui only"),
            ToolResultMessage(
                tool_call_id="call_3",
                tool_name="screenshot",
                content=[TextContent(text="Screen:"), ImageContent(data="AAAA", mime_type="image/jpeg")],
            ),
        ]
    )
    assert items == [
        {"type": "function_call_output", "call_id": "call_1", "output": "12°C, rain"},
        {"type": "function_call_output", "call_id": "call_2", "output": ""},
        {
            "type": "function_call_output",
            "call_id": "call_3",
            "output": [
                {"type": "input_text", "text": "Screen:"},
                {"type": "input_image", "image_url": "data:image/jpeg;base64,AAAA", "detail": "auto"},
            ],
        },
    ]


def test_tools_and_tool_choice() -> None:
    assert convert_tools([WEATHER]) == [
        {
            "type": "function",
            "name": "get_weather",
            "description": "Current weather for a city.",
            "parameters": WEATHER.parameters,
            "strict": False,
        }
    ]
    assert [convert_tool_choice(c) for c in ("auto", "none", "required", "get_weather")] == [
        "auto",
        "none",
        "required",
        {"type": "function", "name": "get_weather"},
    ]


# -- conversion: request body ---------------------------------------------------------------


def test_minimal_request_body() -> None:
    assert build_request("gpt-4.1", Request(messages=[UserMessage(content="Hi")]), StreamOptions()) == {
        "model": "gpt-4.1",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
        "store": False,
        "stream": True,
    }


def test_request_body_options() -> None:
    context = Request(system_prompt="Answer in JSON.", messages=[UserMessage(content="Hi")], tools=[WEATHER])
    options = StreamOptions(
        temperature=0.2,
        max_tokens=500,
        tool_choice="get_weather",
        response_format={"name": "answer", "schema": {"type": "object"}, "strict": True, "description": "d"},
        session_id="session-1",
    )
    body = build_request("gpt-5", context, options, effort="low", reasoning=True, stream=False)
    assert body == {
        "model": "gpt-5",
        "instructions": "Answer in JSON.",
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "Hi"}]}],
        "store": False,
        "stream": False,
        "tools": convert_tools([WEATHER]),
        "tool_choice": {"type": "function", "name": "get_weather"},
        "max_output_tokens": 500,
        "temperature": 0.2,
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "text": {
            "format": {
                "type": "json_schema",
                "name": "answer",
                "schema": {"type": "object"},
                "strict": True,
                "description": "d",
            }
        },
        "prompt_cache_key": "session-1",
    }


def test_response_format_defaults_to_strict_and_may_be_the_bare_schema() -> None:
    schema = {"type": "object", "properties": {}, "additionalProperties": False}
    body = build_request("gpt-5", HELLO, StreamOptions(response_format={"name": "empty", "schema": schema}))
    assert body["text"] == {"format": {"type": "json_schema", "name": "empty", "schema": schema, "strict": True}}
    body = build_request("gpt-5", HELLO, StreamOptions(response_format=schema))
    assert body["text"] == {"format": {"type": "json_schema", "name": "response", "schema": schema, "strict": True}}


def test_effort_none_asks_for_no_summary_and_tool_choice_needs_tools() -> None:
    body = build_request(
        "gpt-5.1", HELLO, StreamOptions(tool_choice="required", cache_key="k"), effort="none", reasoning=True
    )
    assert body["reasoning"] == {"effort": "none"}
    assert "tool_choice" not in body and "tools" not in body
    assert body["prompt_cache_key"] == "k"


# -- conversion: failures -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "message", "kind", "retry_after"),
    [
        ("server_error", "The model failed to generate a response.", "server", None),
        ("rate_limit_exceeded", "Rate limit reached. Please try again in 20ms.", "rate_limit", 0.02),
        ("context_length_exceeded", "Your input exceeds the context window of this model.", "context_overflow", None),
        ("invalid_prompt", "Invalid prompt.", "invalid_request", None),
        ("invalid_image_url", "Bad image.", "invalid_request", None),
        ("image_too_large", "Too large.", "invalid_request", None),
        ("bio_policy", "Refused.", "content_filter", None),
        ("vector_store_timeout", "Slow store.", "timeout", None),
        ("insufficient_quota", "Out of quota.", "auth", None),
        ("server_is_overloaded", "Busy.", "overloaded", None),
        ("data_residency_mismatch", "Wrong region.", "invalid_request", None),
        (None, "Something broke.", "server", None),
        (None, None, "server", None),
    ],
)
def test_failure_codes_are_classified(code: str | None, message: str | None, kind: str, retry_after: float | None) -> None:
    error = classify_failure(code, message)
    assert (error.kind, error.message, error.retry_after) == (kind, message or "The response failed", retry_after)


# -- stream state (no transport) ------------------------------------------------------------


def feed_all(payloads: list[dict[str, Any]]) -> tuple[list[tuple[Any, ...]], AssistantMessage]:
    builder = MessageBuilder(provider="openai", api="openai-responses", model="m")
    state = ResponsesStreamState(builder)
    events: list[Any] = []
    for payload in payloads:
        events.extend(state.feed(msgspec.json.encode(payload)))
    return trace(events), builder.message


def test_items_delivered_whole_and_unknown_events_are_handled() -> None:
    events, message = feed_all(
        [
            {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
            {"type": "response.output_item.added", "output_index": 0, "item": {"type": "image_generation_call", "id": "ig_1"}},
            {"type": "response.image_generation_call.completed", "output_index": 0, "item_id": "ig_1"},
            {"type": "response.output_item.done", "output_index": 0, "item": {"type": "image_generation_call", "id": "ig_1"}},
            {
                "type": "response.output_item.done",
                "output_index": 1,
                "item": {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "A"}, {"type": "summary_text", "text": "B"}]},
            },
            {"type": "response.output_item.added", "output_index": 2, "item": {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": ""}},
            {"type": "response.function_call_arguments.done", "output_index": 2, "arguments": '{"a":1}'},
            {"type": "response.output_item.done", "output_index": 2, "item": {"type": "function_call", "id": "fc_1", "call_id": "c1", "name": "f", "arguments": '{"a":1}'}},
            {"type": "response.output_text.delta", "output_index": 3, "delta": "late"},
            {"type": "response.output_item.done", "output_index": 3, "item": {"type": "message", "id": "msg_1", "content": [{"type": "output_text", "text": "late"}]}},
            {"type": "response.completed", "response": {"id": "resp_1", "status": "completed"}},
        ]
    )
    assert events == [
        ("thinking_start", 0),
        ("thinking_delta", 0, "A\n\nB"),
        ("thinking_end", 0, "A\n\nB"),
        ("toolcall_start", 1),
        ("toolcall_delta", 1, '{"a":1}'),
        ("toolcall_end", 1, "c1", "f", {"a": 1}),
        ("text_start", 2),
        ("text_delta", 2, "late"),
        ("text_end", 2, "late"),
        ("done", "tool_use"),
    ]
    assert message.content == [
        ThinkingContent(thinking="A\n\nB", signature='{"id":"rs_1"}'),
        ToolCall(id="c1", name="f", args={"a": 1}, signature="fc_1"),
        TextContent(text="late", signature='{"id":"msg_1"}'),
    ]
    assert message.response_id == "resp_1"


def test_raw_reasoning_text_and_refusals_stream_as_thinking_and_text() -> None:
    events, message = feed_all(
        [
            {"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_9", "summary": []}},
            {"type": "response.reasoning_text.delta", "output_index": 0, "content_index": 0, "delta": "think"},
            {"type": "response.output_item.done", "output_index": 0, "item": {"type": "reasoning", "id": "rs_9", "summary": [], "content": [{"type": "reasoning_text", "text": "think"}]}},
            {"type": "response.output_item.added", "output_index": 1, "item": {"type": "message", "id": "msg_9", "content": []}},
            {"type": "response.refusal.delta", "output_index": 1, "content_index": 0, "delta": "I can't help."},
            {"type": "response.output_item.done", "output_index": 1, "item": {"type": "message", "id": "msg_9", "content": [{"type": "refusal", "refusal": "I can't help."}]}},
            {"type": "response.completed", "response": {"id": "r", "status": "completed"}},
        ]
    )
    assert events == [
        ("thinking_start", 0),
        ("thinking_delta", 0, "think"),
        ("thinking_end", 0, "think"),
        ("text_start", 1),
        ("text_delta", 1, "I can't help."),
        ("text_end", 1, "I can't help."),
        ("done", "stop"),
    ]
    assert message.text == "I can't help."


def test_reasoning_text_given_only_in_the_finished_item() -> None:
    events, message = feed_all(
        [
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": {"type": "reasoning", "id": "rs_5", "summary": [], "content": [{"type": "reasoning_text", "text": "raw"}]},
            },
            {"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}},
        ]
    )
    assert events == [("thinking_start", 0), ("thinking_delta", 0, "raw"), ("thinking_end", 0, "raw"), ("done", "length")]
    assert message.content == [ThinkingContent(thinking="raw", signature='{"id":"rs_5"}')]


# -- recorded streams -------------------------------------------------------------------


async def test_text_stream(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.TEXT))
    events = await run(model_for(loopback), HELLO)
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Hello"),
        ("text_delta", 0, " from the café"),
        ("text_delta", 0, " ☕."),
        ("text_end", 0, "Hello from the café ☕."),
        ("done", "stop"),
    ]
    message = final(events)
    assert message == AssistantMessage(
        content=[TextContent(text="Hello from the café ☕.", signature='{"id":"msg_68af0a1b9a8b7c6d"}')],
        provider="openai",
        api="openai-responses",
        model="gpt-5",
        usage=Usage(
            input=21,
            output=7,
            total_tokens=28,
            cost=Cost(input=1.25 * 21 / 1e6, output=10.0 * 7 / 1e6, total=1.25 * 21 / 1e6 + 10.0 * 7 / 1e6),
        ),
        stop_reason="stop",
        response_id="resp_68af0a1b2c3d4e5f",
        timestamp=message.timestamp,
    )


async def test_stream_split_at_arbitrary_bytes_gives_the_same_message(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.TEXT), Reply(headers={"content-type": "text/event-stream"}, chunks=rs.chunks(rs.TEXT, 7)))
    whole = final(await run(model_for(loopback), HELLO))
    split = final(await run(model_for(loopback), HELLO))
    assert plain(split) == plain(whole)


async def test_reasoning_then_text_with_usage_and_cost(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.REASONING_TEXT))
    events = await run(model_for(loopback), HELLO)
    assert trace(events) == [
        ("start",),
        ("thinking_start", 0),
        ("thinking_delta", 0, "**Converting units**\n\n"),
        ("thinking_delta", 0, "100 km/h is 27.78 m/s."),
        ("thinking_delta", 0, "\n\n"),
        ("thinking_delta", 0, "**Checking**\n\n"),
        ("thinking_delta", 0, "Rounded to two decimals."),
        ("thinking_end", 0, "**Converting units**\n\n100 km/h is 27.78 m/s.\n\n**Checking**\n\nRounded to two decimals."),
        ("text_start", 1),
        ("text_delta", 1, "It is "),
        ("text_delta", 1, "27.78 m/s."),
        ("text_end", 1, "It is 27.78 m/s."),
        ("done", "stop"),
    ]
    message = final(events)
    assert message.content == [
        ThinkingContent(
            thinking="**Converting units**\n\n100 km/h is 27.78 m/s.\n\n**Checking**\n\nRounded to two decimals.",
            signature='{"id":"rs_68af1c2d77aa88bb","encrypted_content":"gAAAAABor_x1Yk9uZ2VuY3J5cHRlZC1yZWFzb25pbmctYmxvYg=="}',
        ),
        TextContent(text="It is 27.78 m/s.", signature='{"id":"msg_68af1c2e00112233","phase":"final_answer"}'),
    ]
    # input_tokens 1200 include 1024 cached; output_tokens 340 include 256 reasoning tokens.
    cost = Cost(input=1.25 * 176 / 1e6, output=10.0 * 340 / 1e6, cache_read=0.125 * 1024 / 1e6)
    cost.total = cost.input + cost.output + cost.cache_read
    assert message.usage == Usage(input=176, output=340, cache_read=1024, total_tokens=1540, cost=cost)


async def test_parallel_function_calls_with_argument_deltas(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.PARALLEL_CALLS))
    events: list[Any] = []
    partials: list[dict[str, Any]] = []
    model = model_for(loopback)
    async for event in model.stream(Request(messages=[UserMessage(content="Paris?")], tools=[WEATHER])):
        events.append(event)
        if event.type == "toolcall_delta" and event.index == 1:
            partials.append(dict(event.partial.content[1].args))
    assert trace(events) == [
        ("start",),
        ("thinking_start", 0),
        ("thinking_end", 0, ""),
        ("toolcall_start", 1),
        ("toolcall_delta", 1, '{"ci'),
        ("toolcall_delta", 1, 'ty":"Par'),
        ("toolcall_delta", 1, 'is","unit":"c"}'),
        ("toolcall_end", 1, "call_Wq3bN0pK", "get_weather", {"city": "Paris", "unit": "c"}),
        ("toolcall_start", 2),
        ("toolcall_delta", 2, '{"tz":'),
        ("toolcall_delta", 2, '"Europe/Paris"}'),
        ("toolcall_end", 2, "call_Ty7mZ2xR", "get_time", {"tz": "Europe/Paris"}),
        ("done", "tool_use"),
    ]
    # The partial arguments are parsed as they stream.
    assert partials == [{}, {"city": "Par"}, {"city": "Paris", "unit": "c"}]
    message = final(events)
    assert message.content == [
        ThinkingContent(thinking="", signature='{"id":"rs_68af2d3e11223344","encrypted_content":"gAAAAABor_Y2FsbHMtcmVhc29uaW5n"}'),
        ToolCall(id="call_Wq3bN0pK", name="get_weather", args={"city": "Paris", "unit": "c"}, signature="fc_68af2d3e55667788"),
        ToolCall(id="call_Ty7mZ2xR", name="get_time", args={"tz": "Europe/Paris"}, signature="fc_68af2d3e99aabbcc"),
    ]
    assert (message.stop_reason, message.usage.input, message.usage.output) == ("tool_use", 310, 96)


async def test_incomplete_max_output_tokens_is_length(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.INCOMPLETE_LENGTH))
    events = await run(model_for(loopback), HELLO, StreamOptions(max_tokens=16))
    assert trace(events)[-2:] == [("text_end", 0, "Once upon a time"), ("done", "length")]
    message = final(events)
    assert (message.stop_reason, message.text, message.usage.output) == ("length", "Once upon a time", 16)
    assert loopback.requests[0].json["max_output_tokens"] == 16


async def test_incomplete_content_filter_is_an_error(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.INCOMPLETE_FILTER))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events)[-2:] == [
        ("text_end", 0, "I can"),
        ("error", "error", "content_filter", "The response was stopped by the content filter"),
    ]
    assert (final(events).text, len(loopback.requests)) == ("I can", 1)


async def test_non_streaming_response(loopback: LoopbackServer) -> None:
    loopback.queue(
        Reply(headers={"content-type": "application/json"}, chunks=[rs.NON_STREAMING], chunked=False)
    )
    events = await run(model_for(loopback, stream=False), HELLO)
    assert trace(events) == [
        ("start",),
        ("thinking_start", 0),
        ("thinking_delta", 0, "**Plan**\n\nLook up the weather."),
        ("thinking_end", 0, "**Plan**\n\nLook up the weather."),
        ("text_start", 1),
        ("text_delta", 1, "Checking the weather."),
        ("text_end", 1, "Checking the weather."),
        ("toolcall_start", 2),
        ("toolcall_delta", 2, '{"city":"Oslo"}'),
        ("toolcall_end", 2, "call_Nn1", "get_weather", {"city": "Oslo"}),
        ("done", "tool_use"),
    ]
    message = final(events)
    assert message.content == [
        ThinkingContent(thinking="**Plan**\n\nLook up the weather.", signature='{"id":"rs_68af6071aa","encrypted_content":"gAAAAABor_bm9uLXN0cmVhbWluZw=="}'),
        TextContent(text="Checking the weather.", signature='{"id":"msg_68af6071bb"}'),
        ToolCall(id="call_Nn1", name="get_weather", args={"city": "Oslo"}, signature="fc_68af6071cc"),
    ]
    assert (message.usage.input, message.usage.cache_read, message.usage.output) == (372, 128, 80)
    assert message.response_id == "resp_68af60718293a4b5"
    request = loopback.requests[0]
    assert (request.json["stream"], request.headers["Accept"]) == (False, "application/json")


# -- the request on the wire ------------------------------------------------------------


def representative_context() -> Request:
    return Request(
        system_prompt="You are a careful assistant.",
        messages=[
            UserMessage(
                content=[
                    TextContent(text="Where is this, and what's the weather?"),
                    ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
                ]
            ),
            AssistantMessage(
                content=[
                    ThinkingContent(
                        thinking="**Looking**\n\nA harbour in Oslo.",
                        signature=reasoning_signature("rs_01", "gAAAAABenc01"),
                    ),
                    TextContent(text="That is Oslo. Checking.", signature=text_signature("msg_01")),
                    ToolCall(id="call_01", name="get_weather", args={"city": "Oslo"}, signature="fc_01"),
                ],
                provider="openai",
                api="openai-responses",
                model="gpt-5",
                stop_reason="tool_use",
            ),
            ToolResultMessage(tool_call_id="call_01", tool_name="get_weather", content=[TextContent(text="12°C, rain")]),
            UserMessage(content="And tomorrow?"),
        ],
        tools=[WEATHER],
    )


async def test_exact_request_for_a_representative_context(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.TEXT))
    model = model_for(loopback)
    await run(model, representative_context(), StreamOptions(thinking="high", tool_choice="auto", max_tokens=4096))
    request = loopback.requests[0]
    assert (request.method, request.path) == ("POST", "/v1/responses")
    assert request.headers["Authorization"] == f"Bearer {KEY}"
    assert request.headers["Accept"] == "text/event-stream"
    assert request.headers["Content-Type"] == "application/json"
    assert request.json == {
        "model": "gpt-5",
        "instructions": "You are a careful assistant.",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "Where is this, and what's the weather?"},
                    {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo=", "detail": "auto"},
                ],
            },
            {
                "type": "reasoning",
                "id": "rs_01",
                "summary": [{"type": "summary_text", "text": "**Looking**\n\nA harbour in Oslo."}],
                "encrypted_content": "gAAAAABenc01",
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "That is Oslo. Checking.", "annotations": []}],
                "status": "completed",
                "id": "msg_01",
            },
            {"type": "function_call", "call_id": "call_01", "name": "get_weather", "arguments": '{"city":"Oslo"}', "id": "fc_01"},
            {"type": "function_call_output", "call_id": "call_01", "output": "12°C, rain"},
            {"role": "user", "content": [{"type": "input_text", "text": "And tomorrow?"}]},
        ],
        "store": False,
        "stream": True,
        "tools": [
            {
                "type": "function",
                "name": "get_weather",
                "description": "Current weather for a city.",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
                "strict": False,
            }
        ],
        "tool_choice": "auto",
        "max_output_tokens": 4096,
        "reasoning": {"effort": "high", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
    }


async def test_a_streamed_turn_replays_verbatim_after_a_json_round_trip(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.PARALLEL_CALLS), sse(rs.TEXT))
    model = model_for(loopback)
    context = Request(messages=[UserMessage(content="Paris?")], tools=[WEATHER])
    turn = final(await run(model, context))
    restored = messages_from_json(messages_to_json(turn))
    context.messages += [
        restored,
        ToolResultMessage(tool_call_id="call_Wq3bN0pK", tool_name="get_weather", content=[TextContent(text="18°C")]),
        ToolResultMessage(tool_call_id="call_Ty7mZ2xR", tool_name="get_time", content=[TextContent(text="14:05")]),
    ]
    await run(model, context)
    assert loopback.requests[1].json["input"][1:] == [
        {"type": "reasoning", "id": "rs_68af2d3e11223344", "summary": [], "encrypted_content": "gAAAAABor_Y2FsbHMtcmVhc29uaW5n"},
        {"type": "function_call", "call_id": "call_Wq3bN0pK", "name": "get_weather", "arguments": '{"city":"Paris","unit":"c"}', "id": "fc_68af2d3e55667788"},
        {"type": "function_call", "call_id": "call_Ty7mZ2xR", "name": "get_time", "arguments": '{"tz":"Europe/Paris"}', "id": "fc_68af2d3e99aabbcc"},
        {"type": "function_call_output", "call_id": "call_Wq3bN0pK", "output": "18°C"},
        {"type": "function_call_output", "call_id": "call_Ty7mZ2xR", "output": "14:05"},
    ]


async def test_structured_output_and_thinking_off(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.TEXT))
    schema = {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"], "additionalProperties": False}
    await run(model_for(loopback), HELLO, StreamOptions(response_format={"name": "answer", "schema": schema, "strict": True}))
    body = loopback.requests[0].json
    assert body["text"] == {"format": {"type": "json_schema", "name": "answer", "schema": schema, "strict": True}}
    assert "reasoning" not in body
    assert body["include"] == ["reasoning.encrypted_content"]


async def test_a_model_without_reasoning_gets_no_reasoning_fields(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.TEXT))
    info = ModelInfo(id="gpt-4.1", provider="openai", api="openai-responses")
    await run(model_for(loopback, info=info), HELLO, StreamOptions(thinking="high"))
    body = loopback.requests[0].json
    assert "reasoning" not in body and "include" not in body


# -- keys -------------------------------------------------------------------------------


async def test_key_order_explicit_then_options_then_environment(
    loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    loopback.queue(sse(rs.TEXT), sse(rs.TEXT), sse(rs.TEXT))
    await run(model_for(loopback, api_key="sk-explicit"), HELLO, StreamOptions(api_key="sk-option"))
    await run(model_for(loopback, api_key=None), HELLO, StreamOptions(api_key="sk-option"))
    await run(model_for(loopback, api_key=None), HELLO)
    assert [r.headers["Authorization"] for r in loopback.requests] == [
        "Bearer sk-explicit",
        "Bearer sk-option",
        "Bearer sk-from-env",
    ]


async def test_missing_key_fails_without_a_request(loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    events = await run(model_for(loopback, api_key=None), HELLO)
    assert trace(events) == [
        ("start",),
        ("error", "error", "auth", "No API key for provider 'openai': pass api_key or set OPENAI_API_KEY"),
    ]
    assert loopback.requests == []


async def test_the_key_never_shows_in_reprs_errors_or_observed_exchanges(loopback: LoopbackServer) -> None:
    echoed = rs.ERROR_401.replace(b"sk-test-********************7890", KEY.encode())
    loopback.queue(error(401, echoed))
    seen: list[HTTPExchange] = []
    model = model_for(loopback, observer=seen.append)
    events = await run(model, HELLO, StreamOptions(api_key="sk-other"))
    message = final(events)
    assert trace(events)[-1] == (
        "error",
        "error",
        "auth",
        "HTTP 401: Incorrect API key provided: ***. You can find your API key at https://platform.openai.com/account/api-keys.",
    )
    dumped = repr(model) + repr(StreamOptions(api_key=KEY)) + messages_to_json(message).decode() + repr(seen)
    assert KEY not in dumped
    assert [(x.phase, x.headers["authorization"]) for x in seen] == [("request", "***"), ("response", "***")]


# -- HTTP failures ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "kind", "message"),
    [
        (
            500,
            rs.ERROR_500,
            "server",
            "HTTP 500: The server had an error while processing your request. Sorry about that!",
        ),
        (503, rs.ERROR_503, "overloaded", "HTTP 503: The engine is currently overloaded, please try again later"),
    ],
)
async def test_server_errors_are_retried_then_reported(
    loopback: LoopbackServer, status: int, body: bytes, kind: str, message: str
) -> None:
    loopback.queue(error(status, body), error(status, body), error(status, body))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events) == [
        ("start",),
        ("retry", 1, 3, 0.001, kind, message, False),
        ("retry", 2, 3, 0.002, kind, message, False),
        ("error", "error", kind, message),
    ]
    assert len(loopback.requests) == 3


@pytest.mark.parametrize(
    ("status", "body", "kind", "message"),
    [
        (
            401,
            rs.ERROR_401,
            "auth",
            "HTTP 401: Incorrect API key provided: sk-test-********************7890. "
            "You can find your API key at https://platform.openai.com/account/api-keys.",
        ),
        (
            400,
            rs.ERROR_400_CONTEXT,
            "context_overflow",
            "HTTP 400: Your input exceeds the context window of this model. Please adjust your input and try again.",
        ),
        (
            429,
            rs.ERROR_429_QUOTA,
            "auth",
            "HTTP 429: You exceeded your current quota, please check your plan and billing details.",
        ),
    ],
)
async def test_client_errors_are_not_retried(
    loopback: LoopbackServer, status: int, body: bytes, kind: str, message: str
) -> None:
    loopback.queue(error(status, body), sse(rs.TEXT))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events) == [("start",), ("error", "error", kind, message)]
    assert len(loopback.requests) == 1


async def test_rate_limit_honours_retry_after_then_succeeds(loopback: LoopbackServer) -> None:
    loopback.queue(error(429, rs.ERROR_429, {"retry-after": "0.004"}), sse(rs.TEXT))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    message = (
        "HTTP 429: Rate limit reached for gpt-5 in organization org-test on requests per min (RPM): "
        "Limit 500, Used 500, Requested 1. Please try again in 120ms."
    )
    assert trace(events)[:3] == [("start",), ("retry", 1, 3, 0.004, "rate_limit", message, False), ("text_start", 0)]
    assert (trace(events)[-1], final(events).text) == (("done", "stop"), "Hello from the café ☕.")
    assert len(loopback.requests) == 2
    assert loopback.requests[0].body == loopback.requests[1].body


async def test_rate_limit_without_header_uses_the_wait_in_the_body(loopback: LoopbackServer) -> None:
    loopback.queue(error(429, rs.ERROR_429))
    events = await run(model_for(loopback, retry=RetryPolicy(max_attempts=2, max_delay=0.05)), HELLO)
    # 120ms is over this policy's limit, so it fails at once and says why.
    assert trace(events)[-1] == (
        "error",
        "error",
        "rate_limit",
        "HTTP 429: Rate limit reached for gpt-5 in organization org-test on requests per min (RPM): "
        "Limit 500, Used 500, Requested 1. Please try again in 120ms. "
        "(the server asked to retry after 0.12s, more than the 0.05s limit)",
    )
    assert len(loopback.requests) == 1


# -- in-stream failures -------------------------------------------------------------------


async def test_response_failed_server_error_is_retried(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.FAILED_SERVER), sse(rs.TEXT))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events)[:3] == [
        ("start",),
        ("retry", 1, 3, 0.001, "server", "The model failed to generate a response.", False),
        ("text_start", 0),
    ]
    assert final(events).stop_reason == "stop"


async def test_response_failed_rate_limit_waits_as_told(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.FAILED_RATE_LIMIT), sse(rs.TEXT))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    message = "Rate limit reached for gpt-4.1 in organization org-test on tokens per min (TPM). Please try again in 20ms."
    assert trace(events)[:2] == [("start",), ("retry", 1, 3, 0.02, "rate_limit", message, False)]
    assert final(events).text == "Hello from the café ☕."


async def test_response_failed_invalid_prompt_keeps_partial_output(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.FAILED_INVALID_PROMPT))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    message = "Invalid prompt: your prompt was flagged as potentially violating our usage policy."
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Partial"),
        ("text_end", 0, "Partial"),
        ("error", "error", "invalid_request", message),
    ]
    failed = final(events)
    assert (failed.text, failed.usage.input, failed.usage.output, failed.response_id) == (
        "Partial",
        40,
        1,
        "resp_68af4f50617283b6",
    )
    assert len(loopback.requests) == 1


async def test_error_event_context_overflow(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.ERROR_EVENT))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events) == [
        ("start",),
        (
            "error",
            "error",
            "context_overflow",
            "Your input exceeds the context window of this model. Please adjust your input and try again.",
        ),
    ]


async def test_connection_cut_mid_event_keeps_partial_then_retry_discards_it(loopback: LoopbackServer) -> None:
    chunks = rs.events(rs.TEXT)
    half = chunks[5][: len(chunks[5]) // 2]
    cut = Reply(headers={"content-type": "text/event-stream"}, chunks=[*chunks[:5], half], cut_after=6)
    loopback.queue(cut)
    events = await run(model_for(loopback), HELLO)
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Hello"),
        ("error", "error", "network", "The connection closed before the response was complete"),
    ]
    assert final(events).content == [TextContent(text="Hello")]

    loopback.queue(
        Reply(headers={"content-type": "text/event-stream"}, chunks=[*chunks[:5], half], cut_after=6), sse(rs.TEXT)
    )
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events)[:6] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Hello"),
        ("retry", 1, 3, 0.001, "network", "The connection closed before the response was complete", True),
        ("start",),
        ("text_start", 0),
    ]
    assert final(events).text == "Hello from the café ☕."


async def test_stream_ending_without_a_terminal_event_is_a_network_error(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.TEXT.split(b"event: response.completed")[0]))
    events = await run(model_for(loopback), HELLO)
    assert trace(events)[-2:] == [
        ("text_end", 0, "Hello from the café ☕."),
        ("error", "error", "network", "The stream ended before the response was complete"),
    ]


async def test_idle_stall_is_a_stream_idle_error(loopback: LoopbackServer) -> None:
    stalled = sse(rs.TEXT, stall_after=5)
    loopback.queue(stalled)
    events = await run(model_for(loopback, idle_timeout=0.05), HELLO)
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Hello"),
        ("error", "error", "stream_idle", "The provider sent no data for 0.05 seconds"),
    ]
    assert stalled.stalled.is_set()


async def test_abort_during_a_stall_keeps_the_partial_message(loopback: LoopbackServer) -> None:
    stalled = sse(rs.REASONING_TEXT, stall_after=6)
    loopback.queue(stalled)
    signal = AbortSignal()
    events: list[Any] = []
    seen = asyncio.Event()

    async def consume() -> None:
        async for event in model_for(loopback).stream(HELLO, StreamOptions(signal=signal)):
            events.append(event)
            if event.type == "thinking_delta" and event.delta == "100 km/h is 27.78 m/s.":
                seen.set()

    task = asyncio.create_task(consume())
    await seen.wait()
    await stalled.stalled.wait()
    signal.abort()
    await task
    assert trace(events) == [
        ("start",),
        ("thinking_start", 0),
        ("thinking_delta", 0, "**Converting units**\n\n"),
        ("thinking_delta", 0, "100 km/h is 27.78 m/s."),
        ("error", "aborted", None, "Request was aborted"),
    ]
    await asyncio.wait_for(stalled.disconnected.wait(), 5)


async def test_complete_returns_the_final_message(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.INCOMPLETE_LENGTH))
    message = await complete(model_for(loopback), HELLO)
    assert (message.stop_reason, message.text) == ("length", "Once upon a time")


# -- thinking levels, registry, handoff --------------------------------------------------


@pytest.mark.parametrize(
    ("thinking", "levels", "reasoning"),
    [
        ("high", GPT5.thinking, {"effort": "high", "summary": "auto"}),
        ("xhigh", GPT5.thinking, {"effort": "high", "summary": "auto"}),
        ("xhigh", {**GPT5.thinking, "xhigh": "xhigh"}, {"effort": "xhigh", "summary": "auto"}),
        ("minimal", {"low": "low", "medium": "medium", "high": "high"}, {"effort": "low", "summary": "auto"}),
        ("off", {"off": "none", "low": "low", "high": "high"}, {"effort": "none"}),
        ("off", GPT5.thinking, None),
    ],
)
async def test_thinking_levels_are_clamped_to_the_model(
    loopback: LoopbackServer, thinking: ThinkingLevel, levels: dict[ThinkingLevel, str], reasoning: dict[str, str] | None
) -> None:
    loopback.queue(sse(rs.TEXT))
    info = msgspec.structs.replace(GPT5, thinking=levels)
    await run(model_for(loopback, info=info), HELLO, StreamOptions(thinking=thinking))
    body = loopback.requests[0].json
    assert body.get("reasoning") == reasoning
    assert body["include"] == ["reasoning.encrypted_content"]


async def test_registry_info_is_used_when_none_is_given(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.REASONING_TEXT))
    model = OpenAIResponsesModel("gpt-5", base_url=loopback.url + "/v1", api_key=KEY, retry=ONE_SHOT)
    message = final(await run(model, HELLO, StreamOptions(thinking="low")))
    body = loopback.requests[0].json
    assert (body["reasoning"], body["include"]) == ({"effort": "low", "summary": "auto"}, ["reasoning.encrypted_content"])
    assert model.info == lookup("openai", "gpt-5")
    expected = Usage(input=176, output=340, cache_read=1024, total_tokens=1540)
    model.info.pricing.apply(expected)
    assert message.usage == expected


async def test_messages_from_other_models_are_cleaned_before_conversion(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.TEXT))
    context = Request(
        messages=[
            UserMessage(content="Weather in Oslo and Rome?"),
            AssistantMessage(
                content=[
                    ThinkingContent(thinking="mini's reasoning", signature=reasoning_signature("rs_m", "enc-m")),
                    TextContent(text="Looking.", signature=text_signature("msg_m")),
                    ToolCall(id="call_m", name="get_weather", args={"city": "Oslo"}, signature="fc_m"),
                ],
                provider="openai",
                api="openai-responses",
                model="gpt-5-mini",
                stop_reason="tool_use",
            ),
            ToolResultMessage(tool_call_id="call_m", tool_name="get_weather", content=[TextContent(text="12°C")]),
            AssistantMessage(
                content=[
                    ThinkingContent(thinking="Claude thinks", signature="EqQBCkgIARAB"),
                    ToolCall(id="toolu_01|abc", name="get_weather", args={"city": "Rome"}),
                ],
                provider="anthropic",
                api="anthropic-messages",
                model="claude-sonnet-4-5",
                stop_reason="tool_use",
            ),
            AssistantMessage(
                content=[TextContent(text="half an answ")], provider="openai", api="openai-responses",
                model="gpt-5", stop_reason="aborted",
            ),
            UserMessage(content="Go on."),
        ],
        tools=[WEATHER],
    )
    await run(model_for(loopback), context)
    assert loopback.requests[0].json["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Weather in Oslo and Rome?"}]},
        {"type": "message", "role": "assistant", "content": "Looking."},
        {"type": "function_call", "call_id": "call_m", "name": "get_weather", "arguments": '{"city":"Oslo"}'},
        {"type": "function_call_output", "call_id": "call_m", "output": "12°C"},
        {"type": "function_call", "call_id": "toolu_01_abc", "name": "get_weather", "arguments": '{"city":"Rome"}'},
        {"type": "function_call_output", "call_id": "toolu_01_abc", "output": "No result provided"},
        {"role": "user", "content": [{"type": "input_text", "text": "Go on."}]},
    ]


async def test_images_become_a_note_for_a_text_only_model(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.TEXT))
    info = ModelInfo(id="gpt-5", provider="openai", api="openai-responses", name="Text only", input_modalities=("text",))
    context = with_images("openai", "openai-responses", "gpt-5")
    await run(model_for(loopback, info=info), context)
    note = {"type": "input_text", "text": "(image omitted: this model does not accept images)"}
    assert loopback.requests[0].json["input"] == [
        {"role": "user", "content": [{"type": "input_text", "text": "Look:"}, note]},
        {"type": "function_call", "call_id": "call_1", "name": "shot", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": [note]},
    ]


async def test_prompt_cache_key_only_for_openai_and_extra_fields_win(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.TEXT), sse(rs.TEXT))
    options = StreamOptions(session_id="s-1", extra={"store": True, "text": {"verbosity": "low"}})
    await run(model_for(loopback), HELLO, options)
    await run(model_for(loopback, provider="azure"), HELLO, options)
    first, second = (r.json for r in loopback.requests)
    assert (first["prompt_cache_key"], first["store"], first["text"]) == ("s-1", True, {"verbosity": "low"})
    assert "prompt_cache_key" not in second


def test_null_fields_from_compatible_servers_are_accepted() -> None:
    events, message = feed_all(
        [
            {"type": "response.output_item.added", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": None, "encrypted_content": None}},
            {"type": "response.output_item.done", "output_index": 0, "item": {"type": "reasoning", "id": "rs_1", "summary": None, "content": None}},
            {"type": "response.output_item.added", "output_index": 1, "item": {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": None}},
            {"type": "response.output_item.done", "output_index": 1, "item": {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "f", "arguments": None}},
            {"type": "response.completed", "response": {"status": "completed", "usage": {"input_tokens": 5, "output_tokens": 2, "input_tokens_details": {"cached_tokens": None}}}},
        ]
    )
    assert events[-1] == ("done", "tool_use")
    assert message.content == [
        ThinkingContent(thinking="", signature='{"id":"rs_1"}'),
        ToolCall(id="c", name="f", args={}, signature="fc_1"),
    ]
    assert (message.usage.input, message.usage.output, message.usage.cache_read) == (5, 2, 0)


@pytest.mark.parametrize(
    ("payload", "kind", "message"),
    [
        ({"type": "error", "code": 500, "message": "upstream failed"}, "server", "upstream failed"),
        ({"type": "error", "code": 429, "message": "busy"}, "rate_limit", "busy"),
        (
            {"type": "error", "error": {"type": "invalid_request_error", "code": "rate_limit_exceeded", "message": "Slow down."}},
            "rate_limit",
            "Slow down.",
        ),
        (
            {"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": {"reason": "content_filter"}}},
            "content_filter",
            "The response was stopped by the content filter",
        ),
        (
            {"type": "response.incomplete", "response": {"status": "incomplete", "incomplete_details": None}},
            "unknown",
            "The response is incomplete (no reason given)",
        ),
        ({"type": "response.failed", "response": {"status": "failed", "error": None}}, "server", "The response failed"),
    ],
)
def test_in_stream_failures_raise_classified_errors(payload: dict[str, Any], kind: str, message: str) -> None:
    state = ResponsesStreamState(MessageBuilder())
    with pytest.raises(ModelError) as caught:
        state.feed(msgspec.json.encode(payload))
    assert (caught.value.kind, caught.value.message) == (kind, message)


async def test_get_model_builds_this_adapter_and_unknown_models_may_take_images(loopback: LoopbackServer) -> None:
    loopback.queue(sse(rs.TEXT), sse(rs.TEXT))
    known = get_model("openai:gpt-5", base_url=loopback.url + "/v1", api_key=KEY, retry=ONE_SHOT)
    unknown = get_model("openai:gpt-next", base_url=loopback.url + "/v1", api_key=KEY, retry=ONE_SHOT)
    assert type(known) is OpenAIResponsesModel and type(unknown) is OpenAIResponsesModel
    context = Request(messages=[UserMessage(content=[ImageContent(url="https://example.com/a.png")])])
    await run(known, context, StreamOptions(thinking="medium"))
    await run(unknown, context, StreamOptions(thinking="medium"))
    image = {"type": "input_image", "image_url": "https://example.com/a.png", "detail": "auto"}
    first, second = (r.json for r in loopback.requests)
    assert first["input"] == second["input"] == [{"role": "user", "content": [image]}]
    assert (first["reasoning"], first["include"]) == ({"effort": "medium", "summary": "auto"}, ["reasoning.encrypted_content"])
    assert "reasoning" not in second and "include" not in second
