"""White-box test: imports ketch implementation modules (private) directly.

The Anthropic Messages adapter: request conversion, and recorded-format streams replayed
byte for byte by a loopback server (text, thinking, tool calls, usage, every failure)."""

from __future__ import annotations

import asyncio
from typing import Any

import anthropic_streams as an
import msgspec
import pytest
from loopback import LoopbackServer
from loopback import Reply
from loopback import body_reply as error
from loopback import recorded_reply as sse

from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import Cost
from ketch.llm import ImageContent
from ketch.llm import MessageBuilder
from ketch.llm import ModelError
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
from ketch.llm._handoff import LEADING_USER_TEXT
from ketch.llm._handoff import MISSING_TOOL_RESULT
from ketch.llm._providers.anthropic import IMAGE_OMITTED
from ketch.llm._providers.anthropic import AnthropicModel
from ketch.llm._providers.anthropic import AnthropicStreamState
from ketch.llm._providers.anthropic import build_request
from ketch.llm._providers.anthropic import cache_control
from ketch.llm._providers.anthropic import convert_messages
from ketch.llm._providers.anthropic import convert_tool_choice
from ketch.llm._providers.anthropic import convert_tools
from ketch.llm._providers.anthropic import map_stop_reason
from ketch.llm._providers.anthropic import normalize_tool_call_id
from ketch.llm._providers.anthropic import parse_response
from ketch.llm._providers.base import HTTPExchange
from ketch.llm._registry import ModelInfo
from ketch.llm._registry import Pricing
from ketch.llm._registry import lookup
from ketch.llm._retry import RetryPolicy
from support import final
from support import plain
from support import run
from support import trace

KEY = "sk-ant-test-S3CRET-abcdef1234567890"
ONE_SHOT = RetryPolicy(max_attempts=1)
QUICK = RetryPolicy(max_attempts=3, base_delay=0.001, multiplier=2.0, jitter=0.0)

_BUDGETS: dict[Any, str | int] = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768}

SONNET = ModelInfo(
    id="claude-sonnet-4-5",
    provider="anthropic",
    api="anthropic-messages",
    context_window=200_000,
    max_output_tokens=64_000,
    input_modalities=("text", "image"),
    pricing=Pricing(input=3.0, output=15.0, cache_read=0.3, cache_write=3.75),
    thinking=_BUDGETS,
    thinking_style="budget",
)
ADAPTIVE = ModelInfo(
    id="claude-opus-4-6",
    provider="anthropic",
    api="anthropic-messages",
    max_output_tokens=128_000,
    input_modalities=("text", "image"),
    thinking={"low": "low", "medium": "medium", "high": "high", "xhigh": "max"},
    thinking_style="adaptive",
)
PLAIN = ModelInfo(id="claude-3-5-haiku-latest", provider="anthropic", api="anthropic-messages", max_output_tokens=8192)

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
CONTACT = {
    "name": "contact",
    "schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
}
EPHEMERAL = {"type": "ephemeral"}






def model_for(server: LoopbackServer, **kwargs: Any) -> AnthropicModel:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("retry", ONE_SHOT)
    kwargs.setdefault("info", SONNET)
    return AnthropicModel(kwargs["info"].id, base_url=server.url + "/v1", **kwargs)







def cost(usage: Usage, p: Pricing) -> Cost:
    c = Cost(
        input=p.input * usage.input / 1e6,
        output=p.output * usage.output / 1e6,
        cache_read=p.cache_read * usage.cache_read / 1e6,
        cache_write=p.cache_write * usage.cache_write / 1e6,
    )
    c.total = c.input + c.output + c.cache_read + c.cache_write
    return c


def body_for(context: Request, options: StreamOptions | None = None, **kwargs: Any) -> dict[str, Any]:
    kwargs.setdefault("cache_retention", "none")
    return build_request(kwargs.pop("info", SONNET), context, options or StreamOptions(), **kwargs)


HELLO = Request(system_prompt="Be brief.", messages=[UserMessage(content="Hi")])
SAME = {"provider": "anthropic", "api": "anthropic-messages", "model": "claude-sonnet-4-5"}


# -- conversion: messages -----------------------------------------------------------------


def test_user_text_and_images_base64_and_url() -> None:
    assert convert_messages(
        [
            UserMessage(content="plain"),
            UserMessage(
                content=[
                    TextContent(text="What is this?"),
                    ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
                    ImageContent(url="https://example.com/cat.jpg", mime_type="image/jpeg"),
                ]
            ),
            UserMessage(content=[TextContent(text="  \n")]),
            UserMessage(content=[]),
        ]
    ) == [
        {"role": "user", "content": [{"type": "text", "text": "plain"}]},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is this?"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
            ],
        },
    ]


def test_assistant_blocks_replay_thinking_signatures_verbatim() -> None:
    message = AssistantMessage(
        content=[
            ThinkingContent(thinking="Plan: check.", signature=an.THINKING_SIGNATURE),
            ThinkingContent(thinking="", redacted=True, signature=an.REDACTED_DATA),
            ThinkingContent(thinking="", signature="EqsigOnly"),
            ThinkingContent(thinking="never signed"),
            TextContent(text=""),
            TextContent(text=" "),
            TextContent(text="Checking."),
            ToolCall(id="toolu_01", name="get_weather", args={"city": "Oslo"}),
            ToolCall(id="toolu_02", name="get_weather", raw_arguments='{"city": Oslo', parse_error="invalid JSON"),
        ],
        **SAME,
    )
    assert convert_messages([message]) == [
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "Plan: check.", "signature": an.THINKING_SIGNATURE},
                {"type": "redacted_thinking", "data": an.REDACTED_DATA},
                {"type": "thinking", "thinking": "", "signature": "EqsigOnly"},
                {"type": "text", "text": "Checking."},
                {"type": "tool_use", "id": "toolu_01", "name": "get_weather", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "toolu_02", "name": "get_weather", "input": {}},
            ],
        }
    ]


def test_an_assistant_message_with_nothing_to_send_is_left_out() -> None:
    empty = AssistantMessage(content=[TextContent(text=""), ThinkingContent(thinking="unsigned")], **SAME)
    assert convert_messages([UserMessage(content="a"), empty, UserMessage(content="b")]) == [
        {"role": "user", "content": [{"type": "text", "text": "a"}]},
        {"role": "user", "content": [{"type": "text", "text": "b"}]},
    ]


def test_consecutive_tool_results_share_one_user_turn() -> None:
    results = convert_messages(
        [
            ToolResultMessage(tool_call_id="toolu_01", tool_name="t", content=[TextContent(text="1"), TextContent(text="2")]),
            ToolResultMessage(
                tool_call_id="toolu_02",
                tool_name="t",
                content=[TextContent(text="see"), ImageContent(data="R0lGODlh", mime_type="image/gif")],
                is_error=True,
            ),
            ToolResultMessage(tool_call_id="toolu_03", tool_name="t"),
            UserMessage(content="next"),
            ToolResultMessage(tool_call_id="call.4", tool_name="t", content=[TextContent(text="late")]),
        ]
    )
    assert results == [
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_01", "content": "12"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_02",
                    "content": [
                        {"type": "text", "text": "see"},
                        {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "R0lGODlh"}},
                    ],
                    "is_error": True,
                },
                {"type": "tool_result", "tool_use_id": "toolu_03"},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "next"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "call_4", "content": "late"}]},
    ]


def test_images_become_a_note_when_the_model_takes_no_images() -> None:
    messages = [
        UserMessage(content=[ImageContent(data="AAAA")]),
        ToolResultMessage(tool_call_id="t1", tool_name="x", content=[ImageContent(url="https://e.com/a.png")]),
    ]
    assert convert_messages(messages, images=False) == [
        {"role": "user", "content": [{"type": "text", "text": IMAGE_OMITTED}]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": IMAGE_OMITTED}]}],
        },
    ]


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("toolu_01A09q90qw90lq917835lq9", "toolu_01A09q90qw90lq917835lq9"),
        ("call_abc|fc_123", "call_abc_fc_123"),
        ("a.b:c d", "a_b_c_d"),
        ("", "_"),
        ("x" * 64, "x" * 64),
    ],
)
def test_tool_call_ids_are_normalised(raw: str, expected: str) -> None:
    assert normalize_tool_call_id(raw) == expected
    assert normalize_tool_call_id(expected) == expected


def test_long_tool_call_ids_stay_distinct_and_valid() -> None:
    a = normalize_tool_call_id("fc_" + "y" * 70 + "|1")
    b = normalize_tool_call_id("fc_" + "y" * 70 + "|2")
    assert len(a) == len(b) == 64
    assert a != b
    assert a[:56] == b[:56] == "fc_" + "y" * 52 + "_"
    assert normalize_tool_call_id(a) == a


def test_tools_and_tool_choice() -> None:
    assert convert_tools([WEATHER]) == [
        {"name": "get_weather", "description": "Current weather for a city.", "input_schema": WEATHER.parameters}
    ]
    assert [convert_tool_choice(c) for c in ("auto", "required", "any", "none", "get_weather")] == [
        {"type": "auto"},
        {"type": "any"},
        {"type": "any"},
        {"type": "none"},
        {"type": "tool", "name": "get_weather"},
    ]


# -- conversion: request bodies -------------------------------------------------------------


async def test_a_transcript_starting_with_an_assistant_turn_gets_a_user_turn_first(loopback: LoopbackServer) -> None:
    # A trimmed history can start with the assistant; the Messages API wants the user first.
    loopback.queue(sse(an.TEXT))
    greeting = AssistantMessage(content=[TextContent(text="Hello, how can I help?")], provider="anthropic", model="m")
    context = Request(messages=[greeting, UserMessage(content="Hi")])
    await complete(model_for(loopback, cache_retention="none"), context)
    assert loopback.requests[0].json["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": LEADING_USER_TEXT}]},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello, how can I help?"}]},
        {"role": "user", "content": [{"type": "text", "text": "Hi"}]},
    ]


def test_minimal_request_body() -> None:
    assert body_for(HELLO) == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 32_000,
        "stream": True,
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
    }


def test_temperature_and_max_tokens_without_thinking() -> None:
    body = body_for(
        Request(messages=[UserMessage(content="Hi")], tools=[WEATHER]),
        StreamOptions(temperature=0.2, max_tokens=100, tool_choice="get_weather"),
        stream=False,
    )
    assert body == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 100,
        "stream": False,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
        "tools": convert_tools([WEATHER]),
        "tool_choice": {"type": "tool", "name": "get_weather"},
        "temperature": 0.2,
    }


def test_tool_choice_needs_tools() -> None:
    assert "tool_choice" not in body_for(HELLO, StreamOptions(tool_choice="required"))


@pytest.mark.parametrize(
    ("info", "level", "max_tokens", "thinking", "limit"),
    [
        (SONNET, "medium", None, {"type": "enabled", "budget_tokens": 8192}, 40_192),
        (SONNET, "high", 4096, {"type": "enabled", "budget_tokens": 16384}, 20_480),
        (SONNET, "xhigh", 60_000, {"type": "enabled", "budget_tokens": 32768}, 64_000),
        (SONNET, "off", None, None, 32_000),
        (PLAIN, "high", None, None, 8192),
    ],
)
def test_budget_thinking_raises_max_tokens_and_drops_temperature(
    info: ModelInfo, level: Any, max_tokens: int | None, thinking: dict[str, Any] | None, limit: int
) -> None:
    body = body_for(HELLO, StreamOptions(thinking=level, max_tokens=max_tokens, temperature=0.7), info=info)
    assert body.get("thinking") == thinking
    assert body["max_tokens"] == limit
    assert body.get("temperature") == (None if thinking else 0.7)


def test_a_budget_below_the_minimum_turns_thinking_off() -> None:
    small = msgspec.structs.replace(SONNET, max_output_tokens=1500)
    body = body_for(HELLO, StreamOptions(thinking="high"), info=small)
    assert "thinking" not in body
    assert body["max_tokens"] == 1500


def test_adaptive_thinking_sends_an_effort() -> None:
    body = body_for(HELLO, StreamOptions(thinking="xhigh", temperature=1.0), info=ADAPTIVE)
    assert body["thinking"] == {"type": "adaptive"}
    assert body["output_config"] == {"effort": "max"}
    assert body["max_tokens"] == 32_000
    assert "temperature" not in body
    clamped = body_for(HELLO, StreamOptions(thinking="minimal"), info=ADAPTIVE)
    assert (clamped["thinking"], clamped["output_config"]) == ({"type": "adaptive"}, {"effort": "low"})
    assert "thinking" not in body_for(HELLO, StreamOptions(thinking="off"), info=ADAPTIVE)


def test_forcing_a_tool_turns_thinking_off() -> None:
    context = Request(messages=[UserMessage(content="Hi")], tools=[WEATHER])
    for choice in ("required", "get_weather"):
        body = body_for(context, StreamOptions(thinking="high", tool_choice=choice, temperature=0.5))
        assert "thinking" not in body
        assert body["temperature"] == 0.5
        assert body["max_tokens"] == 32_000
    kept = body_for(context, StreamOptions(thinking="high", tool_choice="auto"))
    assert kept["thinking"] == {"type": "enabled", "budget_tokens": 16384}
    assert kept["tool_choice"] == {"type": "auto"}


def test_structured_output_json_schema_mode() -> None:
    body = body_for(HELLO, StreamOptions(response_format=CONTACT, thinking="high"), info=ADAPTIVE)
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": CONTACT["schema"]}, "effort": "high"}
    assert body["thinking"] == {"type": "adaptive"}
    bare = body_for(HELLO, StreamOptions(response_format=CONTACT["schema"]))
    assert bare["output_config"] == {"format": {"type": "json_schema", "schema": CONTACT["schema"]}}


def test_structured_output_tool_mode_forces_the_schema_tool() -> None:
    context = Request(messages=[UserMessage(content="Jane Doe, jane@x.org")], tools=[WEATHER])
    body = body_for(context, StreamOptions(response_format=CONTACT, thinking="high"), structured_output="tool")
    assert body["tools"] == [
        *convert_tools([WEATHER]),
        {
            "name": "contact",
            "description": "Respond with JSON matching this schema.",
            "input_schema": CONTACT["schema"],
        },
    ]
    assert body["tool_choice"] == {"type": "tool", "name": "contact"}
    assert "thinking" not in body
    assert "output_config" not in body


def test_cache_markers() -> None:
    assert cache_control("none") is None
    assert cache_control("short") == EPHEMERAL
    assert cache_control("long") == {"type": "ephemeral", "ttl": "1h"}
    context = Request(
        system_prompt="Sys",
        messages=[
            UserMessage(content="q"),
            AssistantMessage(
                content=[TextContent(text="a"), ThinkingContent(thinking="t", signature="s")], **SAME
            ),
        ],
        tools=[WEATHER],
    )
    body = body_for(context, cache_retention="long")
    long = {"type": "ephemeral", "ttl": "1h"}
    assert body["system"] == [{"type": "text", "text": "Sys", "cache_control": long}]
    assert body["messages"][-1]["content"] == [
        {"type": "text", "text": "a", "cache_control": long},
        {"type": "thinking", "thinking": "t", "signature": "s"},
    ]
    assert "cache_control" not in body["tools"][0]
    no_system = body_for(Request(messages=context.messages, tools=[WEATHER]), cache_retention="short")
    assert no_system["tools"][-1]["cache_control"] == EPHEMERAL
    assert "system" not in no_system
    system_only = body_for(context, cache_retention="short", cache_last_message=False)
    assert system_only["system"][0]["cache_control"] == EPHEMERAL
    assert all("cache_control" not in b for m in system_only["messages"] for b in m["content"])


def test_stop_reasons() -> None:
    assert [map_stop_reason(r) for r in ("end_turn", None, "new_reason")] == ["stop"] * 3
    assert map_stop_reason("pause_turn") == "pause"
    assert map_stop_reason("stop_sequence") == "stop_sequence"
    assert map_stop_reason("max_tokens") == "length"
    assert map_stop_reason("model_context_window_exceeded") == "length"
    assert map_stop_reason("tool_use") == "tool_use"
    for reason in ("refusal", "sensitive"):
        with pytest.raises(ModelError) as info:
            map_stop_reason(reason)
        assert (info.value.kind, info.value.message) == (
            "content_filter",
            f"The model declined to respond (stop reason: {reason})",
        )


# -- parsing without a server -----------------------------------------------------------------


def feed_all(state: AnthropicStreamState, stream: bytes) -> list[Any]:
    out: list[Any] = []
    for chunk in an.events(stream):
        data = chunk.split(b"data: ", 1)[1].rstrip(b"\n")
        out.extend(state.feed(data))
    return out


def test_unknown_blocks_and_deltas_are_skipped_and_server_tools_kept() -> None:
    b = MessageBuilder(provider="anthropic", api="anthropic-messages", model="m")
    state = AnthropicStreamState(b)
    payloads = [
        b'{"type":"message_start","message":{"id":"msg_1","content":[],"usage":{"input_tokens":5,"output_tokens":1}}}',
        b'{"type":"content_block_start","index":0,"content_block":{"type":"server_tool_use","id":"srvtoolu_1","name":"web_search","input":{}}}',
        b'{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"q\\":1}"}}',
        b'{"type":"content_block_stop","index":0}',
        b'{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"Pre"}}',
        b'{"type":"content_block_delta","index":1,"delta":{"type":"citations_delta","citation":{"type":"char_location"}}}',
        b'{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"fix"}}',
        b'{"type":"content_block_delta","index":7,"delta":{"type":"text_delta","text":"orphan"}}',
        b'{"type":"content_block_stop","index":1}',
        b'{"type":"some_future_event"}',
        b'{"type":"message_delta","delta":{"stop_reason":null},"usage":{"output_tokens":null}}',
        b'{"type":"message_delta","delta":{"stop_reason":"pause_turn"},"usage":{"output_tokens":9}}',
        b'{"type":"message_stop"}',
    ]
    events = [e for p in payloads for e in state.feed(p)]
    # a server tool's call is a hosted tool block (see test_hosted_tools.py)
    assert trace(events) == [
        ("hosted_tool", 0, "HostedToolCall", "web_search"),
        ("text_start", 1),
        ("text_delta", 1, "Pre"),
        ("text_delta", 1, "fix"),
        ("text_end", 1, "Prefix"),
        ("done", "pause"),
    ]
    assert b.message.usage == Usage(input=5, output=9, total_tokens=14)
    assert b.message.response_id == "msg_1"


def test_null_fields_from_compatible_servers_are_accepted() -> None:
    b = MessageBuilder()
    state = AnthropicStreamState(b)
    payloads = [
        b'{"type":"message_start","message":{"id":null,"content":null,"stop_reason":null,"usage":{"input_tokens":3,"output_tokens":null,"cache_creation_input_tokens":null,"cache_read_input_tokens":null}}}',
        b'{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":null,"signature":null}}',
        b'{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":null}}',
        b'{"type":"content_block_stop","index":0}',
        b'{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"t1","name":"f","input":null}}',
        b'{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":null}}',
        b'{"type":"content_block_stop","index":1}',
        b'{"type":"message_delta","delta":{"stop_reason":"tool_use","stop_sequence":null},"usage":null}',
        b'{"type":"message_stop"}',
    ]
    events = [e for p in payloads for e in state.feed(p)]
    assert trace(events)[-1] == ("done", "tool_use")
    assert b.message.content == [ThinkingContent(thinking=""), ToolCall(id="t1", name="f", args={})]
    assert b.message.usage == Usage(input=3, total_tokens=3)


def test_tool_input_given_whole_at_block_start() -> None:
    b = MessageBuilder()
    state = AnthropicStreamState(b)
    events = [
        e
        for p in (
            b'{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}}',
            b'{"type":"content_block_stop","index":0}',
            b'{"type":"message_delta","delta":{"stop_reason":"tool_use"}}',
            b'{"type":"message_stop"}',
        )
        for e in state.feed(p)
    ]
    assert trace(events) == [("toolcall_start", 0), ("toolcall_end", 0, "t1", "f", {"a": 1}), ("done", "tool_use")]


def test_streamed_tool_input_wins_over_the_input_at_block_start() -> None:
    b = MessageBuilder()
    state = AnthropicStreamState(b)
    events = [
        e
        for p in (
            b'{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t1","name":"f","input":{"a":1}}}',
            b'{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\\"b\\": 2}"}}',
            b'{"type":"content_block_stop","index":0}',
        )
        for e in state.feed(p)
    ]
    assert trace(events) == [("toolcall_start", 0), ("toolcall_delta", 0, '{"b": 2}'), ("toolcall_end", 0, "t1", "f", {"b": 2})]


@pytest.mark.parametrize(
    ("error", "kind", "message"),
    [
        ({"type": "overloaded_error", "message": "Overloaded"}, "overloaded", "Overloaded"),
        ({"type": "api_error", "message": "Internal server error"}, "server", "Internal server error"),
        ({"type": "rate_limit_error", "message": "Slow down"}, "rate_limit", "Slow down"),
        ({"type": "invalid_request_error", "message": "bad"}, "invalid_request", "bad"),
        (
            {"type": "invalid_request_error", "message": "prompt is too long: 201000 tokens > 200000 maximum"},
            "context_overflow",
            "prompt is too long: 201000 tokens > 200000 maximum",
        ),
        ({"type": "timeout_error", "message": "Request timed out"}, "timeout", "Request timed out"),
        ({"type": "billing_error", "message": "No credit"}, "auth", "No credit"),
        ({"type": "not_found_error", "message": "model: x"}, "invalid_request", "model: x"),
        ({"type": "authentication_error", "message": "invalid x-api-key"}, "auth", "invalid x-api-key"),
        ({"type": "mystery", "message": "Odd"}, "server", "Odd"),
    ],
)
def test_in_stream_error_events_are_classified(error: dict[str, str], kind: str, message: str) -> None:
    state = AnthropicStreamState(MessageBuilder())
    with pytest.raises(ModelError) as info:
        state.feed(msgspec.json.encode({"type": "error", "error": error}))
    assert (info.value.kind, info.value.message) == (kind, message)


def test_complete_message_body_is_parsed_into_events() -> None:
    b = MessageBuilder(pricing=SONNET.pricing.apply)
    events = parse_response(an.MESSAGE_JSON, b)
    assert trace(events) == [
        ("thinking_start", 0),
        ("thinking_delta", 0, "The user wants the weather."),
        ("thinking_end", 0, "The user wants the weather."),
        ("text_start", 1),
        ("text_delta", 1, "Checking Paris."),
        ("text_end", 1, "Checking Paris."),
        ("toolcall_start", 2),
        ("toolcall_end", 2, "toolu_01A09q90qw90lq917835lq9", "get_weather", {"city": "Paris"}),
        ("done", "tool_use"),
    ]
    assert b.message.content[0] == ThinkingContent(thinking="The user wants the weather.", signature="EqQBCgIYAhIMsig")
    assert b.message.response_id == "msg_01NsTr3am8Kq2Wx4Ez6Rc8Tv"
    usage = Usage(input=400, output=50, cache_read=300, cache_write=100, total_tokens=850)
    usage.cost = cost(usage, SONNET.pricing)
    assert b.message.usage == usage


def test_complete_message_with_the_format_tool_and_a_refusal() -> None:
    body = (
        b'{"id":"msg_2","content":[{"type":"tool_use","id":"toolu_9","name":"contact","input":{"name":"Jane"}}],'
        b'"stop_reason":"tool_use","usage":{"input_tokens":1,"output_tokens":2}}'
    )
    b = MessageBuilder()
    assert trace(parse_response(body, b, "contact")) == [
        ("text_start", 0),
        ("text_delta", 0, '{"name":"Jane"}'),
        ("text_end", 0, '{"name":"Jane"}'),
        ("done", "stop"),
    ]
    refused = b'{"id":"msg_3","content":[],"stop_reason":"refusal","usage":{"input_tokens":1,"output_tokens":0}}'
    with pytest.raises(ModelError) as info:
        parse_response(refused, MessageBuilder())
    assert info.value.kind == "content_filter"


# -- recorded streams over HTTP -------------------------------------------------------------


async def test_text_stream(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.TEXT))
    events = await run(model_for(loopback), HELLO)
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Hello from the café"),
        ("text_delta", 0, " ☕."),
        ("text_end", 0, "Hello from the café ☕."),
        ("done", "stop"),
    ]
    usage = Usage(input=25, output=12, total_tokens=37)
    usage.cost = cost(usage, SONNET.pricing)
    assert plain(final(events)) == plain(
        AssistantMessage(
            content=[TextContent(text="Hello from the café ☕.")],
            provider="anthropic",
            api="anthropic-messages",
            model="claude-sonnet-4-5",
            usage=usage,
            stop_reason="stop",
            response_id="msg_01XFDUDYJgAACzvnptvVoYEL",
        )
    )
    request = loopback.requests[0]
    assert (request.method, request.path) == ("POST", "/v1/messages")
    assert request.headers["x-api-key"] == KEY
    assert request.headers["anthropic-version"] == "2023-06-01"
    assert request.headers["Content-Type"] == "application/json"
    assert request.headers["Accept"] == "text/event-stream"
    assert "anthropic-beta" not in request.headers
    assert "authorization" not in {k.lower() for k in request.headers}


async def test_stream_split_at_arbitrary_bytes_gives_the_same_message(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.TEXT), Reply(headers={"content-type": "text/event-stream"}, chunks=an.chunks(an.TEXT, 7)))
    whole = final(await run(model_for(loopback), HELLO))
    split = final(await run(model_for(loopback), HELLO))
    assert plain(split) == plain(whole)


async def test_thinking_with_signature_then_text(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.THINKING_TEXT))
    events = await run(model_for(loopback), HELLO, StreamOptions(thinking="medium"))
    thought = "I need to find the GCD of 1071 and 462.\n\n1071 = 2×462 + 147, 462 = 3×147 + 21, 147 = 7×21."
    answer = "The greatest common divisor of 1071 and 462 is **21**."
    assert trace(events) == [
        ("start",),
        ("thinking_start", 0),
        ("thinking_delta", 0, "I need to find the GCD of 1071 and 462.\n\n"),
        ("thinking_delta", 0, "1071 = 2×462 + 147, 462 = 3×147 + 21, 147 = 7×21."),
        ("thinking_end", 0, thought),
        ("text_start", 1),
        ("text_delta", 1, "The greatest common divisor"),
        ("text_delta", 1, " of 1071 and 462 is **21**."),
        ("text_end", 1, answer),
        ("done", "stop"),
    ]
    message = final(events)
    assert message.content == [
        ThinkingContent(thinking=thought, signature=an.THINKING_SIGNATURE),
        TextContent(text=answer),
    ]
    assert (message.usage.input, message.usage.output) == (85, 196)
    body = loopback.requests[0].json
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 8192}
    assert body["max_tokens"] == 40_192
    assert "anthropic-beta" not in loopback.requests[0].headers  # no tools: nothing to interleave

    # The same model gets its thinking back verbatim on the next turn.
    loopback.queue(sse(an.TEXT))
    follow = Request(messages=[*HELLO.messages, message, UserMessage(content="Why?")])
    await run(model_for(loopback), follow, StreamOptions(thinking="medium"))
    assert loopback.requests[1].json["messages"][1] == {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": thought, "signature": an.THINKING_SIGNATURE},
            {"type": "text", "text": answer},
        ],
    }


async def test_redacted_thinking(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.REDACTED_THINKING))
    info = msgspec.structs.replace(SONNET, id="claude-3-7-sonnet-latest")
    events = await run(model_for(loopback, info=info), HELLO)
    assert trace(events) == [
        ("start",),
        ("thinking_start", 0),
        ("thinking_end", 0, ""),
        ("thinking_start", 1),
        ("thinking_delta", 1, "Some of my reasoning was flagged."),
        ("thinking_end", 1, "Some of my reasoning was flagged."),
        ("text_start", 2),
        ("text_delta", 2, "I can help with the safe part."),
        ("text_end", 2, "I can help with the safe part."),
        ("done", "stop"),
    ]
    message = final(events)
    assert message.content == [
        ThinkingContent(thinking="", signature=an.REDACTED_DATA, redacted=True),
        ThinkingContent(thinking="Some of my reasoning was flagged.", signature="ErUBCkYIBRgCIkDz"),
        TextContent(text="I can help with the safe part."),
    ]
    assert message.model == "claude-3-7-sonnet-latest"
    loopback.queue(sse(an.TEXT))
    await run(model_for(loopback, info=info), Request(messages=[*HELLO.messages, message, UserMessage(content="ok")]))
    assert loopback.requests[1].json["messages"][1]["content"][:2] == [
        {"type": "redacted_thinking", "data": an.REDACTED_DATA},
        {"type": "thinking", "thinking": "Some of my reasoning was flagged.", "signature": "ErUBCkYIBRgCIkDz"},
    ]


async def test_parallel_tool_calls_accumulate_input_json(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.PARALLEL_TOOLS))
    context = Request(messages=[UserMessage(content="Weather in SF and Munich?")], tools=[WEATHER])
    seen: list[tuple[int, dict[str, Any]]] = []
    events = []
    async for e in model_for(loopback).stream(context):
        events.append(e)
        if e.type == "toolcall_delta":
            block = e.partial.content[e.index]
            seen.append((e.index, dict(block.args)))
    sf = {"city": "San Francisco, CA", "unit": "fahrenheit"}
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "I'll check both cities."),
        ("text_end", 0, "I'll check both cities."),
        ("toolcall_start", 1),
        ("toolcall_delta", 1, '{"city": "San Fra'),
        ("toolcall_delta", 1, 'ncisco, CA", "unit": "fahrenheit"}'),
        ("toolcall_end", 1, "toolu_01T1x1fJ34qAmk2tNTrN7Up6", "get_weather", sf),
        ("toolcall_start", 2),
        ("toolcall_delta", 2, '{"city": '),
        ("toolcall_delta", 2, '"München"}'),
        ("toolcall_end", 2, "toolu_01VGKkxjCn1dcfpX3Bbpx6jo", "get_weather", {"city": "München"}),
        ("done", "tool_use"),
    ]
    assert seen == [(1, {"city": "San Fra"}), (1, sf), (2, {}), (2, {"city": "München"})]
    message = final(events)
    assert message.stop_reason == "tool_use"
    assert message.tool_calls == [
        ToolCall(id="toolu_01T1x1fJ34qAmk2tNTrN7Up6", name="get_weather", args=sf),
        ToolCall(id="toolu_01VGKkxjCn1dcfpX3Bbpx6jo", name="get_weather", args={"city": "München"}),
    ]


async def test_usage_from_message_start_overwritten_by_message_delta_with_cost(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.CACHED_USAGE))
    events = await run(model_for(loopback), HELLO)
    assert trace(events)[-1] == ("done", "length")
    usage = Usage(input=15, output=1000, cache_read=50_000, cache_write=2048, total_tokens=53_063)
    usage.cost = cost(usage, SONNET.pricing)
    assert final(events).usage == usage
    assert usage.cost == Cost(input=4.5e-05, output=0.015, cache_read=0.015, cache_write=0.00768, total=usage.cost.total)
    assert usage.cost.total == pytest.approx(0.037725)


async def test_structured_output_through_the_forced_tool_is_text(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.FORMAT_TOOL))
    model = model_for(loopback, structured_output="tool")
    events = await run(model, Request(messages=[UserMessage(content="Jane Doe")]), StreamOptions(response_format=CONTACT))
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, '{"name": "Jane'),
        ("text_delta", 0, ' Doe"}'),
        ("text_end", 0, '{"name": "Jane Doe"}'),
        ("done", "stop"),
    ]
    body = loopback.requests[0].json
    assert body["tool_choice"] == {"type": "tool", "name": "contact"}
    assert body["tools"][0]["name"] == "contact"


async def test_non_streaming_response(loopback: LoopbackServer) -> None:
    loopback.queue(
        Reply(headers={"content-type": "application/json"}, chunks=[an.MESSAGE_JSON], chunked=False)
    )
    events = await run(model_for(loopback, stream=False), HELLO)
    assert [e.type for e in events] == [
        "start",
        "thinking_start",
        "thinking_delta",
        "thinking_end",
        "text_start",
        "text_delta",
        "text_end",
        "toolcall_start",
        "toolcall_end",
        "done",
    ]
    assert final(events).tool_calls == [
        ToolCall(id="toolu_01A09q90qw90lq917835lq9", name="get_weather", args={"city": "Paris"})
    ]
    assert loopback.requests[0].json["stream"] is False
    assert loopback.requests[0].headers["Accept"] == "application/json"


async def test_exact_request_for_a_representative_context(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.TEXT))
    context = Request(
        system_prompt="You are a weather assistant.",
        messages=[
            UserMessage(
                content=[
                    TextContent(text="What's the weather in these cities?"),
                    ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
                    ImageContent(url="https://example.com/munich.jpg", mime_type="image/jpeg"),
                ]
            ),
            AssistantMessage(
                content=[
                    ThinkingContent(thinking="Paris and Munich.", signature="EqQBsig-1"),
                    ThinkingContent(thinking="", redacted=True, signature="EmwKredacted"),
                    TextContent(text="Checking both."),
                    ToolCall(id="toolu_01A", name="get_weather", args={"city": "Paris"}),
                    ToolCall(id="toolu_01B", name="get_weather", args={"city": "München"}),
                ],
                stop_reason="tool_use",
                **SAME,
            ),
            ToolResultMessage(tool_call_id="toolu_01A", tool_name="get_weather", content=[TextContent(text="18°C")]),
            ToolResultMessage(
                tool_call_id="toolu_01B",
                tool_name="get_weather",
                content=[TextContent(text="Radar:"), ImageContent(data="R0lGODlh", mime_type="image/gif")],
                is_error=True,
            ),
            UserMessage(content="Which is warmer?"),
        ],
        tools=[WEATHER],
    )
    options = StreamOptions(thinking="medium", max_tokens=4096, temperature=0.3, tool_choice="auto")
    await run(model_for(loopback), context, options)
    request = loopback.requests[0]
    assert request.json == {
        "model": "claude-sonnet-4-5",
        "max_tokens": 12_288,
        "stream": True,
        "system": [{"type": "text", "text": "You are a weather assistant.", "cache_control": EPHEMERAL}],
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What's the weather in these cities?"},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
                    {"type": "image", "source": {"type": "url", "url": "https://example.com/munich.jpg"}},
                ],
            },
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "Paris and Munich.", "signature": "EqQBsig-1"},
                    {"type": "redacted_thinking", "data": "EmwKredacted"},
                    {"type": "text", "text": "Checking both."},
                    {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}},
                    {"type": "tool_use", "id": "toolu_01B", "name": "get_weather", "input": {"city": "München"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_01A", "content": "18°C"},
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01B",
                        "content": [
                            {"type": "text", "text": "Radar:"},
                            {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": "R0lGODlh"}},
                        ],
                        "is_error": True,
                    },
                ],
            },
            {"role": "user", "content": [{"type": "text", "text": "Which is warmer?", "cache_control": EPHEMERAL}]},
        ],
        "tools": [
            {
                "name": "get_weather",
                "description": "Current weather for a city.",
                "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            }
        ],
        "tool_choice": {"type": "auto"},
        "thinking": {"type": "enabled", "budget_tokens": 8192},
    }
    assert list(request.json) == ["model", "max_tokens", "stream", "system", "messages", "tools", "tool_choice", "thinking"]
    assert request.headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"


async def test_messages_from_other_models_lose_thinking_and_get_valid_ids(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.TEXT))
    foreign = AssistantMessage(
        content=[
            ThinkingContent(thinking="OpenAI reasoning", signature='{"id":"rs_1","encrypted_content":"e"}'),
            TextContent(text="Let me look.", signature='{"id":"msg_1"}'),
            ToolCall(id="call_abc|fc_123", name="get_weather", args={"city": "Rome"}, signature="fc_123"),
            ToolCall(id="call_def", name="get_weather", args={"city": "Oslo"}),
        ],
        provider="openai",
        api="openai-responses",
        model="gpt-5",
        stop_reason="tool_use",
    )
    failed = AssistantMessage(content=[TextContent(text="half")], stop_reason="error", **SAME)
    context = Request(
        messages=[
            UserMessage(content="Rome and Oslo?"),
            foreign,
            ToolResultMessage(tool_call_id="call_abc|fc_123", tool_name="get_weather", content=[TextContent(text="20")]),
            UserMessage(content="and?"),
            failed,
            UserMessage(content="again"),
        ]
    )
    await run(model_for(loopback, cache_retention="none"), context)
    assert loopback.requests[0].json["messages"] == [
        {"role": "user", "content": [{"type": "text", "text": "Rome and Oslo?"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "text", "text": "Let me look."},
                {"type": "tool_use", "id": "call_abc_fc_123", "name": "get_weather", "input": {"city": "Rome"}},
                {"type": "tool_use", "id": "call_def", "name": "get_weather", "input": {"city": "Oslo"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "call_abc_fc_123", "content": "20"},
                {"type": "tool_result", "tool_use_id": "call_def", "content": MISSING_TOOL_RESULT, "is_error": True},
            ],
        },
        {"role": "user", "content": [{"type": "text", "text": "and?"}]},
        {"role": "user", "content": [{"type": "text", "text": "again"}]},
    ]


async def test_cache_options_per_request_are_read_and_not_sent(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.TEXT), sse(an.TEXT), sse(an.TEXT))
    model = model_for(loopback)
    await run(model, HELLO, StreamOptions(extra={"cache_last_message": False, "metadata": {"user_id": "u-1"}}))
    await run(model, HELLO, StreamOptions(extra={"cache_retention": "none"}))
    await run(model, HELLO, StreamOptions(extra={"cache_retention": "long", "cache_last_message": True}))
    first, second, third = (r.json for r in loopback.requests)
    assert first["metadata"] == {"user_id": "u-1"}
    assert first["system"] == [{"type": "text", "text": "Be brief.", "cache_control": EPHEMERAL}]
    assert first["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]
    assert second["system"] == [{"type": "text", "text": "Be brief."}]
    assert second["messages"] == first["messages"]
    long = {"type": "ephemeral", "ttl": "1h"}
    assert third["system"][0]["cache_control"] == long
    assert third["messages"][0]["content"][0]["cache_control"] == long
    for body in (first, second, third):
        assert not {"cache_retention", "cache_last_message"} & set(body)


async def test_key_order_explicit_then_options_then_environment(
    loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "env-key")
    loopback.queue(sse(an.TEXT), sse(an.TEXT), sse(an.TEXT))
    await run(model_for(loopback, api_key="explicit-key"), HELLO, StreamOptions(api_key="option-key"))
    await run(model_for(loopback, api_key=None), HELLO, StreamOptions(api_key="option-key"))
    await run(model_for(loopback, api_key=None), HELLO)
    assert [r.headers["x-api-key"] for r in loopback.requests] == ["explicit-key", "option-key", "env-key"]


async def test_missing_key_fails_without_a_request(loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    events = await run(model_for(loopback, api_key=None), HELLO)
    assert trace(events) == [
        ("start",),
        ("error", "error", "auth", "No API key for provider 'anthropic': pass api_key or set ANTHROPIC_API_KEY"),
    ]
    assert loopback.requests == []


async def test_the_key_never_shows_in_reprs_errors_or_observed_exchanges(loopback: LoopbackServer) -> None:
    seen: list[HTTPExchange] = []
    body = b'{"type":"error","error":{"type":"authentication_error","message":"invalid x-api-key ' + KEY.encode() + b'"}}'
    loopback.queue(error(401, body))
    model = model_for(loopback, observer=seen.append)
    events = await run(model, HELLO, StreamOptions(api_key="other"))
    message = final(events)
    assert trace(events)[-1] == ("error", "error", "auth", "HTTP 401: invalid x-api-key ***")
    assert KEY not in repr(model)
    assert KEY not in repr(message)
    assert [x.phase for x in seen] == ["request", "response"]
    for exchange in seen:
        assert exchange.headers["x-api-key"] == "***"
        assert KEY not in repr(exchange)


# -- failures -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "kind", "message"),
    [
        (529, an.OVERLOADED, "overloaded", "HTTP 529: Overloaded"),
        (500, an.API_ERROR, "server", "HTTP 500: Internal server error"),
        (504, an.TIMEOUT, "timeout", "HTTP 504: Request timed out"),
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


async def test_a_server_error_then_success(loopback: LoopbackServer) -> None:
    loopback.queue(error(500, an.API_ERROR), sse(an.TEXT))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events)[:2] == [("start",), ("retry", 1, 3, 0.001, "server", "HTTP 500: Internal server error", False)]
    assert final(events).text == "Hello from the café ☕."
    assert loopback.requests[0].json == loopback.requests[1].json


async def test_rate_limit_honours_retry_after_then_succeeds(loopback: LoopbackServer) -> None:
    loopback.queue(error(429, an.RATE_LIMIT, {"retry-after": "0"}), sse(an.TEXT))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    message = "HTTP 429: This request would exceed the rate limit for your organization of 50,000 input tokens per minute."
    assert trace(events)[:3] == [("start",), ("retry", 1, 3, 0.0, "rate_limit", message, False), ("text_start", 0)]
    assert trace(events)[-1] == ("done", "stop")
    assert len(loopback.requests) == 2


async def test_rate_limit_asking_for_too_long_a_wait_fails_at_once(loopback: LoopbackServer) -> None:
    loopback.queue(error(429, an.RATE_LIMIT, {"retry-after": "3600"}))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events)[-1][:3] == ("error", "error", "rate_limit")
    assert "asked to retry after 3600s" in final(events).error_message  # type: ignore[operator]
    assert len(loopback.requests) == 1


@pytest.mark.parametrize(
    ("status", "body", "kind", "message"),
    [
        (401, an.AUTHENTICATION, "auth", "HTTP 401: invalid x-api-key"),
        (403, an.PERMISSION, "auth", "HTTP 403: Your API key does not have permission to use the specified resource."),
        (402, an.BILLING, "auth", "HTTP 402: Your credit balance is too low to access the Anthropic API."),
        (400, an.PROMPT_TOO_LONG, "context_overflow", "HTTP 400: prompt is too long: 208431 tokens > 200000 maximum"),
        (
            400,
            an.INVALID_REQUEST,
            "invalid_request",
            'HTTP 400: messages: roles must alternate between "user" and "assistant", '
            'but found multiple "user" roles in a row',
        ),
        (413, an.REQUEST_TOO_LARGE, "context_overflow", "HTTP 413: Request exceeds the maximum allowed number of bytes."),
        (404, an.NOT_FOUND, "invalid_request", "HTTP 404: model: claude-nonexistent"),
    ],
)
async def test_client_errors_are_not_retried(
    loopback: LoopbackServer, status: int, body: bytes, kind: str, message: str
) -> None:
    loopback.queue(error(status, body))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events) == [("start",), ("error", "error", kind, message)]
    assert len(loopback.requests) == 1


async def test_connection_cut_mid_event_keeps_partial_and_usage(loopback: LoopbackServer) -> None:
    raw = an.events(an.TEXT)
    head = b"".join(raw[:4])  # message_start, block start, ping, first delta
    cut = Reply(
        headers={"content-type": "text/event-stream"},
        chunks=[head, raw[4][:30], raw[4][30:]],
        cut_after=2,
    )
    loopback.queue(cut)
    events = await run(model_for(loopback), HELLO)
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Hello from the café"),
        ("error", "error", "network", "The connection closed before the response was complete"),
    ]
    message = final(events)
    assert message.content == [TextContent(text="Hello from the café")]
    assert (message.usage.input, message.usage.output, message.stop_reason) == (25, 1, "error")


async def test_connection_cut_then_retry_discards_the_partial(loopback: LoopbackServer) -> None:
    raw = an.events(an.TEXT)
    loopback.queue(
        Reply(headers={"content-type": "text/event-stream"}, chunks=[b"".join(raw[:4]), raw[4][:30]], cut_after=2),
        sse(an.TEXT),
    )
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events)[:5] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Hello from the café"),
        ("retry", 1, 3, 0.001, "network", "The connection closed before the response was complete", True),
        ("start",),
    ]
    assert final(events).content == [TextContent(text="Hello from the café ☕.")]


async def test_stream_ending_without_message_stop_is_a_network_error(loopback: LoopbackServer) -> None:
    raw = an.events(an.TEXT)
    loopback.queue(Reply(headers={"content-type": "text/event-stream"}, chunks=raw[:-1]))
    events = await run(model_for(loopback), HELLO)
    assert trace(events)[-1] == ("error", "error", "network", "The stream ended before the response was complete")
    assert final(events).usage.output == 12


async def test_idle_stall_is_a_stream_idle_error(loopback: LoopbackServer) -> None:
    stalled = sse(an.TEXT, stall_after=4)
    loopback.queue(stalled)
    events = await run(model_for(loopback, idle_timeout=0.2), HELLO)
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Hello from the café"),
        ("error", "error", "stream_idle", "The provider sent no data for 0.2 seconds"),
    ]
    assert stalled.stalled.is_set()
    assert final(events).content == [TextContent(text="Hello from the café")]


async def test_abort_during_a_stall_keeps_thinking_usage_and_drops_the_connection(loopback: LoopbackServer) -> None:
    stalled = sse(an.THINKING_TEXT, stall_after=4)
    loopback.queue(stalled)
    signal = AbortSignal()
    events: list[Any] = []
    seen = asyncio.Event()

    async def consume() -> None:
        async for event in model_for(loopback).stream(HELLO, StreamOptions(signal=signal, thinking="low")):
            events.append(event)
            if event.type == "thinking_delta":
                seen.set()

    task = asyncio.create_task(consume())
    await seen.wait()
    await stalled.stalled.wait()
    signal.abort()
    await task
    assert trace(events) == [
        ("start",),
        ("thinking_start", 0),
        ("thinking_delta", 0, "I need to find the GCD of 1071 and 462.\n\n"),
        ("error", "aborted", None, "Request was aborted"),
    ]
    message = final(events)
    assert message.content == [ThinkingContent(thinking="I need to find the GCD of 1071 and 462.\n\n")]
    assert (message.usage.input, message.stop_reason) == (85, "aborted")
    await asyncio.wait_for(stalled.disconnected.wait(), 5)


async def test_in_stream_overloaded_error_keeps_partial(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.OVERLOADED_MID_STREAM))
    events = await run(model_for(loopback), HELLO)
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Let me"),
        ("error", "error", "overloaded", "Overloaded"),
    ]
    assert final(events).usage.input == 30


async def test_in_stream_overloaded_error_is_retried(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.OVERLOADED_MID_STREAM), sse(an.TEXT))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events)[3:5] == [("retry", 1, 3, 0.001, "overloaded", "Overloaded", True), ("start",)]
    message = final(events)
    assert (message.text, message.usage.input, message.stop_reason) == ("Hello from the café ☕.", 25, "stop")


async def test_refusal_is_a_content_filter_error_with_partial(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.REFUSAL))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events)[-1] == (
        "error",
        "error",
        "content_filter",
        "The model declined to respond (stop reason: refusal)",
    )
    message = final(events)
    assert message.content == [TextContent(text="I can't")]
    assert message.usage.output == 3
    assert len(loopback.requests) == 1


# -- the model object ---------------------------------------------------------------------------


async def test_registry_info_is_used_when_none_is_given(loopback: LoopbackServer) -> None:
    loopback.queue(sse(an.TEXT))
    model = AnthropicModel("claude-sonnet-4-5", base_url=loopback.url + "/v1", api_key=KEY, retry=ONE_SHOT)
    registered = lookup("anthropic", "claude-sonnet-4-5")
    assert registered is not None
    assert model.info == registered
    message = await complete(model, HELLO, StreamOptions(thinking="low"))
    assert message.usage.cost == cost(message.usage, registered.pricing)
    assert loopback.requests[0].json["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    unknown = AnthropicModel("claude-future-9", api_key=KEY)
    assert (unknown.info.id, unknown.info.thinking, unknown.base_url) == (
        "claude-future-9",
        {},
        "https://api.anthropic.com/v1",
    )


async def test_get_model_builds_this_adapter(monkeypatch: pytest.MonkeyPatch) -> None:
    from ketch.llm import get_model

    monkeypatch.setenv("ANTHROPIC_API_KEY", KEY)
    model = get_model("anthropic:claude-haiku-4-5")
    assert isinstance(model, AnthropicModel)
    assert (model.provider, model.api, model.id, model.base_url) == (
        "anthropic",
        "anthropic-messages",
        "claude-haiku-4-5",
        "https://api.anthropic.com/v1",
    )
    assert model.resolve_api_key() == KEY
    assert KEY not in repr(model)


def test_stop_sequences_are_sent() -> None:
    context = Request(messages=[UserMessage(content="Hi")])
    assert body_for(context, StreamOptions(stop_sequences=["END"]))["stop_sequences"] == ["END"]
    assert "stop_sequences" not in body_for(context)


def test_system_prompt_blocks_carry_their_own_cache_markers() -> None:
    from ketch.llm import SystemBlock
    from ketch.llm import SystemPrompt

    messages = [UserMessage(content="Hi")]
    prompt = SystemPrompt([SystemBlock("rules", cache=True), SystemBlock("tools", cache=True), "today is Monday"])
    assert prompt == "rules\n\ntools\n\ntoday is Monday"
    body = body_for(Request.of(prompt, messages, []), cache_retention="short")
    assert body["system"] == [
        {"type": "text", "text": "rules", "cache_control": EPHEMERAL},
        {"type": "text", "text": "tools", "cache_control": EPHEMERAL},
        {"type": "text", "text": "today is Monday"},
    ]
    assert body["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL  # the last message's marker
    unmarked = body_for(
        Request.of(SystemPrompt(["a", "b"]), messages, []), cache_retention="short", cache_last_message=False
    )
    assert unmarked["system"] == [
        {"type": "text", "text": "a"}, {"type": "text", "text": "b", "cache_control": EPHEMERAL},
    ]
    assert all("cache_control" not in b for m in unmarked["messages"] for b in m["content"])
    off = body_for(Request.of(prompt, messages, []), cache_retention="none")
    assert [b.get("cache_control") for b in off["system"]] == [None, None, None]
    plain = Request.of("just text", messages, [])
    assert (type(plain.system_prompt), plain.system_blocks) == (str, None)


async def test_an_agent_with_a_system_prompt_of_blocks_sends_them_over_http(loopback: LoopbackServer) -> None:
    from ketch import Agent
    from ketch.llm import SystemBlock
    from ketch.llm import SystemPrompt

    loopback.queue(sse(an.TEXT))
    prompt = SystemPrompt([SystemBlock("stable rules", cache=True), "Today is Monday."])
    result = await Agent(model_for(loopback), system_prompt=prompt).prompt("Hi")
    assert result.end_reason == "stop"
    body = loopback.requests[0].json
    assert body["system"] == [
        {"type": "text", "text": "stable rules", "cache_control": EPHEMERAL},
        {"type": "text", "text": "Today is Monday."},
    ]
    assert body["messages"][-1]["content"][-1]["cache_control"] == EPHEMERAL
