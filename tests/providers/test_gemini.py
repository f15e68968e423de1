"""White-box test: imports ketch implementation modules (private) directly.

The Gemini adapter: request conversion, schema cleaning, error classification, and
recorded-format streams replayed byte for byte by a loopback server (text, thinking
with signatures, function calls, usage, safety stops, every failure)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

import gemini_streams as gs
import msgspec
import pytest
from loopback import LoopbackServer
from loopback import Reply
from loopback import body_reply as error
from loopback import recorded_reply
from transcripts import with_images

from ketch.llm import AbortSignal
from ketch.llm import AssistantMessage
from ketch.llm import Cost
from ketch.llm import CustomMessage
from ketch.llm import ImageContent
from ketch.llm import MessageBuilder
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
from ketch.llm import messages_from_json
from ketch.llm import messages_to_json
from ketch.llm._handoff import LEADING_USER_TEXT
from ketch.llm._handoff import MISSING_TOOL_RESULT
from ketch.llm._providers.base import HTTPExchange
from ketch.llm._providers.gemini import SKIP_SIGNATURE
from ketch.llm._providers.gemini import GeminiModel
from ketch.llm._providers.gemini import GeminiStreamState
from ketch.llm._providers.gemini import build_request
from ketch.llm._providers.gemini import classify_error
from ketch.llm._providers.gemini import convert_messages
from ketch.llm._providers.gemini import convert_tool_choice
from ketch.llm._providers.gemini import convert_tools
from ketch.llm._providers.gemini import gemini_schema
from ketch.llm._providers.gemini import thinking_config
from ketch.llm._registry import ModelInfo
from ketch.llm._registry import Pricing
from ketch.llm._retry import RetryPolicy
from support import final
from support import plain
from support import run
from support import trace

KEY = "AIzaSyTEST-S3CRET-abcdef1234567890"
ONE_SHOT = RetryPolicy(max_attempts=1)
QUICK = RetryPolicy(max_attempts=3, base_delay=0.001, multiplier=2.0, jitter=0.0)

_FLASH_LEVELS: dict[Any, str | int] = {
    "off": 0,
    "minimal": 1024,
    "low": 2048,
    "medium": 8192,
    "high": 16384,
    "xhigh": 24576,
}
FLASH = ModelInfo(
    id="gemini-2.5-flash",
    provider="google",
    api="gemini",
    context_window=1_048_576,
    max_output_tokens=65_536,
    input_modalities=("text", "image"),
    pricing=Pricing(input=0.3, output=2.5, cache_read=0.03),
    thinking=_FLASH_LEVELS,
    thinking_style="budget",
)
PRO = ModelInfo(
    id="gemini-2.5-pro",
    provider="google",
    api="gemini",
    max_output_tokens=65_536,
    thinking={"minimal": 1024, "low": 2048, "medium": 8192, "high": 16384, "xhigh": 32768},
    thinking_style="budget",
)
GEMINI3 = ModelInfo(
    id="gemini-3-pro-preview",
    provider="google",
    api="gemini",
    max_output_tokens=65_536,
    thinking={"low": "low", "high": "high"},
    thinking_style="effort",
)
NO_THINKING = ModelInfo(id="gemini-2.0-flash", provider="google", api="gemini", max_output_tokens=8_192)

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather for a city.",
    parameters={
        "type": "object",
        "properties": {"city": {"type": "string"}, "unit": {"enum": ["c", "f"]}},
        "required": ["city"],
        "additionalProperties": False,
    },
)
CLEAN_WEATHER = {
    "type": "OBJECT",
    "properties": {"city": {"type": "STRING"}, "unit": {"type": "STRING", "enum": ["c", "f"], "format": "enum"}},
    "required": ["city"],
}







def sse(stream: bytes, **kwargs: Any) -> Reply:
    """A recorded Gemini stream (CRLF line ends) sent one event per chunk."""
    return recorded_reply(stream, b"\r\n\r\n", **kwargs)

def model_for(server: LoopbackServer, id: str = "gemini-2.5-flash", **kwargs: Any) -> GeminiModel:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("retry", ONE_SHOT)
    kwargs.setdefault("info", FLASH)
    return GeminiModel(id, base_url=server.url + "/v1beta", **kwargs)







def cost(info: ModelInfo, usage: Usage) -> Cost:
    p = info.pricing
    c = Cost(
        input=p.input * usage.input / 1e6,
        output=p.output * usage.output / 1e6,
        cache_read=p.cache_read * usage.cache_read / 1e6,
    )
    c.total = c.input + c.output + c.cache_read
    return c


HELLO = Request(system_prompt="Be brief.", messages=[UserMessage(content="Hi")])


# -- schemas ------------------------------------------------------------------------------



def test_a_transcript_starting_with_a_model_turn_gets_a_user_turn_first() -> None:
    greeting = AssistantMessage(content=[TextContent(text="Hello!")], provider="google", model="m")
    body = build_request(Request(messages=[greeting, UserMessage(content="Hi")]), StreamOptions(), info=NO_THINKING)
    assert body["contents"] == [
        {"role": "user", "parts": [{"text": LEADING_USER_TEXT}]},
        {"role": "model", "parts": [{"text": "Hello!"}]},
        {"role": "user", "parts": [{"text": "Hi"}]},
    ]

def test_schema_is_rewritten_into_the_openapi_subset() -> None:
    schema: dict[str, Any] = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "Args",
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "File path.", "minLength": 1, "pattern": "^/"},
            "url": {"type": "string", "format": "uri"},
            "when": {"type": "string", "format": "date-time"},
            "limit": {"anyOf": [{"type": "integer", "minimum": 1, "exclusiveMaximum": 100}, {"type": "null"}]},
            "tags": {"type": ["array", "null"], "items": {"type": "string"}, "minItems": 1, "uniqueItems": True},
            "mode": {"const": "fast"},
            "level": {"enum": [1, 2, 3], "description": "How hard."},
            "flag": {"enum": ["on", None]},
            "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
            "pair": {"type": "array", "prefixItems": [{"type": "string"}, {"type": "integer"}]},
            "extra": {"type": "object", "additionalProperties": {"type": "string"}},
            "implicit": {"properties": {"a": {"type": "boolean"}}, "required": ["a", "ghost"]},
            "anything": {},
            "merged": {
                "allOf": [
                    {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
                    {"properties": {"y": {"type": "number"}}, "required": ["y"]},
                ]
            },
        },
        "required": ["path", "missing"],
        "additionalProperties": False,
        "examples": [{"path": "/"}],
    }
    original = copy.deepcopy(schema)
    assert gemini_schema(schema) == {
        "title": "Args",
        "type": "OBJECT",
        "properties": {
            "path": {"type": "STRING", "description": "File path.", "minLength": 1, "pattern": "^/"},
            "url": {"type": "STRING"},
            "when": {"type": "STRING", "format": "date-time"},
            "limit": {"type": "INTEGER", "minimum": 1, "nullable": True},
            "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "minItems": 1, "nullable": True},
            "mode": {"type": "STRING", "enum": ["fast"], "format": "enum"},
            "level": {"type": "INTEGER", "description": "How hard. (one of: 1, 2, 3)"},
            "flag": {"type": "STRING", "enum": ["on"], "format": "enum", "nullable": True},
            "either": {"anyOf": [{"type": "STRING"}, {"type": "NUMBER"}]},
            "pair": {"type": "ARRAY", "items": {"anyOf": [{"type": "STRING"}, {"type": "INTEGER"}]}},
            "extra": {"type": "OBJECT"},
            "implicit": {"type": "OBJECT", "properties": {"a": {"type": "BOOLEAN"}}, "required": ["a"]},
            "anything": {},
            "merged": {
                "type": "OBJECT",
                "properties": {"x": {"type": "NUMBER"}, "y": {"type": "NUMBER"}},
                "required": ["x", "y"],
            },
        },
        "required": ["path"],
    }
    assert schema == original


def test_schema_refs_are_inlined_and_recursion_stops_as_an_open_object() -> None:
    schema = {
        "type": "object",
        "properties": {
            "home": {"$ref": "#/$defs/Address", "description": "Where they live."},
            "tree": {"$ref": "#/$defs/Node"},
            "lost": {"$ref": "#/$defs/Nowhere"},
        },
        "$defs": {
            "Address": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
            "Node": {
                "type": "object",
                "properties": {"value": {"type": "integer"}, "children": {"type": "array", "items": {"$ref": "#/$defs/Node"}}},
            },
        },
    }
    assert gemini_schema(schema) == {
        "type": "OBJECT",
        "properties": {
            "home": {
                "type": "OBJECT",
                "description": "Where they live.",
                "properties": {"city": {"type": "STRING"}},
                "required": ["city"],
            },
            "tree": {
                "type": "OBJECT",
                "properties": {"value": {"type": "INTEGER"}, "children": {"type": "ARRAY", "items": {"type": "OBJECT"}}},
            },
            "lost": {"type": "OBJECT"},
        },
    }


class Point(msgspec.Struct):
    x: float
    y: float


def test_a_schema_from_the_tool_decorator_converts() -> None:
    from ketch._schema import function_schema

    def plot(points: list[Point], label: str | None = None, style: str = "line") -> str:
        """Plot points.

        Args:
            points: The points.
            label: Optional label.
            style: Line style.
        """
        return ""

    parameters = function_schema(plot).parameters
    assert gemini_schema(parameters) == {
        "type": "OBJECT",
        "properties": {
            "points": {
                "type": "ARRAY",
                "description": "The points.",
                "items": {
                    "type": "OBJECT",
                    "title": "Point",
                    "properties": {"x": {"type": "NUMBER"}, "y": {"type": "NUMBER"}},
                    "required": ["x", "y"],
                },
            },
            "label": {"type": "STRING", "description": "Optional label.", "nullable": True},
            "style": {"type": "STRING", "description": "Line style.", "default": "line"},
        },
        "required": ["points"],
    }


# -- conversion: messages -----------------------------------------------------------------


def test_user_text_and_images_become_parts() -> None:
    contents = convert_messages(
        [
            UserMessage(content="plain"),
            UserMessage(content=[]),
            AssistantMessage(content=[TextContent(text="ok")], provider="google", api="gemini", model="m"),
            UserMessage(
                content=[
                    TextContent(text="What are these?"),
                    TextContent(text=""),
                    ImageContent(data="iVBORw0KGgo=", mime_type="image/png"),
                    ImageContent(url="https://example.com/cat.jpg", mime_type="image/jpeg"),
                    ImageContent(url="data:image/webp;base64,UklGRg==", mime_type="image/png"),
                ]
            ),
        ]
    )
    assert contents == [
        {"role": "user", "parts": [{"text": "plain"}]},
        {"role": "model", "parts": [{"text": "ok"}]},
        {
            "role": "user",
            "parts": [
                {"text": "What are these?"},
                {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://example.com/cat.jpg"}},
                {"inlineData": {"mimeType": "image/webp", "data": "UklGRg=="}},
            ],
        },
    ]


def test_model_turns_replay_thoughts_signatures_and_gemini_call_ids() -> None:
    turn = AssistantMessage(
        content=[
            ThinkingContent(thinking="**Plan**\n\nLook it up.", signature="sig-thought"),
            ThinkingContent(thinking=""),
            TextContent(text="Checking."),
            TextContent(text="", signature="sig-empty-text"),
            TextContent(text=""),
            ToolCall(
                id="get_weather_qpc2afWVFJK4vr0Pq6WiyAU_0",
                name="get_weather",
                args={"city": "Oslo"},
                signature="sig-call",
            ),
            ToolCall(id="wq6f0y2k", name="get_time", args={}),
        ],
        provider="google",
        api="gemini",
        model="gemini-2.5-flash",
    )
    results = [
        ToolResultMessage(
            tool_call_id="get_weather_qpc2afWVFJK4vr0Pq6WiyAU_0",
            tool_name="get_weather",
            content=[TextContent(text="12°C"), TextContent(text="rain")],
        ),
        ToolResultMessage(
            tool_call_id="wq6f0y2k",
            tool_name="get_time",
            content=[TextContent(text="clock broke"), ImageContent(data="AAAA", mime_type="image/jpeg")],
            is_error=True,
        ),
    ]
    assert convert_messages([turn, *results, UserMessage(content="Thanks")]) == [
        {
            "role": "model",
            "parts": [
                {"text": "**Plan**\n\nLook it up.", "thought": True, "thoughtSignature": "sig-thought"},
                {"text": "Checking."},
                {"text": "", "thoughtSignature": "sig-empty-text"},
                {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}, "thoughtSignature": "sig-call"},
                {"functionCall": {"name": "get_time", "args": {}, "id": "wq6f0y2k"}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"name": "get_weather", "response": {"output": "12°C\nrain"}}},
                {"functionResponse": {"name": "get_time", "response": {"error": "clock broke"}, "id": "wq6f0y2k"}},
                {"inlineData": {"mimeType": "image/jpeg", "data": "AAAA"}},
                {"text": "Thanks"},
            ],
        },
    ]


def test_calls_from_another_api_are_sent_without_ids_and_custom_messages_are_skipped() -> None:
    class Note(CustomMessage, tag="gem_note"):
        text: str

    turn = AssistantMessage(
        content=[ToolCall(id="call_abc", name="get_weather", args={"city": "Rome"})],
        provider="openai",
        api="openai-responses",
        model="gpt-5",
    )
    result = ToolResultMessage(tool_call_id="call_abc", tool_name="get_weather", content=[TextContent(text="sun")])
    assert convert_messages([Note(text="ui only"), turn, result]) == [
        {"role": "model", "parts": [{"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "get_weather", "response": {"output": "sun"}}}]},
    ]


def test_signature_placeholder_goes_on_the_first_unsigned_call_of_each_turn() -> None:
    unsigned = AssistantMessage(
        content=[
            TextContent(text="Two lookups."),
            ToolCall(id="a_0", name="a", args={}),
            ToolCall(id="b_1", name="b", args={}),
        ]
    )
    signed = AssistantMessage(
        content=[ToolCall(id="a_0", name="a", args={}, signature="real"), ToolCall(id="b_1", name="b")]
    )
    contents = convert_messages([unsigned, signed], signature_placeholder=True)
    assert contents == [
        {
            "role": "model",
            "parts": [
                {"text": "Two lookups."},
                {"functionCall": {"name": "a", "args": {}}, "thoughtSignature": SKIP_SIGNATURE},
                {"functionCall": {"name": "b", "args": {}}},
                {"functionCall": {"name": "a", "args": {}}, "thoughtSignature": "real"},
                {"functionCall": {"name": "b", "args": {}}},
            ],
        }
    ]
    assert "thoughtSignature" not in convert_messages([unsigned])[0]["parts"][1]


def test_tools_and_tool_choice() -> None:
    no_args = ToolSpec(name="list_files", description="List files.", parameters={"type": "object", "properties": {}})
    assert convert_tools([WEATHER, no_args]) == [
        {
            "functionDeclarations": [
                {"name": "get_weather", "description": "Current weather for a city.", "parameters": CLEAN_WEATHER},
                {"name": "list_files", "description": "List files."},
            ]
        }
    ]
    assert convert_tools([WEATHER], json_schema=True) == [
        {
            "functionDeclarations": [
                {
                    "name": "get_weather",
                    "description": "Current weather for a city.",
                    "parametersJsonSchema": WEATHER.parameters,
                }
            ]
        }
    ]
    assert [convert_tool_choice(c) for c in ("auto", "none", "required", "get_weather")] == [
        {"functionCallingConfig": {"mode": "AUTO"}},
        {"functionCallingConfig": {"mode": "NONE"}},
        {"functionCallingConfig": {"mode": "ANY"}},
        {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["get_weather"]}},
    ]


# -- conversion: thinking and request body ------------------------------------------------


@pytest.mark.parametrize(
    ("info", "level", "max_tokens", "budgets", "expected"),
    [
        (FLASH, "off", None, None, ({"thinkingBudget": 0}, None)),
        (FLASH, "off", 800, None, ({"thinkingBudget": 0}, 800)),
        (PRO, "off", None, None, (None, None)),
        (FLASH, "high", None, None, ({"thinkingBudget": 16384, "includeThoughts": True}, None)),
        (FLASH, "high", 1000, None, ({"thinkingBudget": 16384, "includeThoughts": True}, 17384)),
        (FLASH, "low", 1000, {"low": 512}, ({"thinkingBudget": 512, "includeThoughts": True}, 1512)),
        (PRO, "xhigh", 40_000, None, ({"thinkingBudget": 32768, "includeThoughts": True}, 65_536)),
        (GEMINI3, "medium", 500, None, ({"thinkingLevel": "high", "includeThoughts": True}, 500)),
        (GEMINI3, "minimal", None, None, ({"thinkingLevel": "low", "includeThoughts": True}, None)),
        (GEMINI3, "off", None, None, (None, None)),
        (NO_THINKING, "high", 300, None, (None, 300)),
    ],
)
def test_thinking_levels_map_to_thinking_config(
    info: ModelInfo,
    level: str,
    max_tokens: int | None,
    budgets: dict[str, int] | None,
    expected: tuple[dict[str, Any] | None, int | None],
) -> None:
    assert thinking_config(info, level, max_tokens, budgets=budgets) == expected


def test_minimal_request_body() -> None:
    body = build_request(Request(messages=[UserMessage(content="Hi")]), StreamOptions(), info=NO_THINKING)
    assert body == {"contents": [{"role": "user", "parts": [{"text": "Hi"}]}]}


def test_request_body_options_and_structured_output() -> None:
    context = Request(system_prompt="Answer in JSON.", messages=[UserMessage(content="Hi")], tools=[WEATHER])
    answer = {"type": "object", "properties": {"city": {"type": "string"}}, "additionalProperties": False}
    options = StreamOptions(
        temperature=0.2,
        max_tokens=500,
        thinking="minimal",
        tool_choice="required",
        response_format={"name": "answer", "schema": answer},
    )
    assert build_request(context, options, info=FLASH) == {
        "contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
        "systemInstruction": {"parts": [{"text": "Answer in JSON."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {"name": "get_weather", "description": "Current weather for a city.", "parameters": CLEAN_WEATHER}
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY"}},
        "generationConfig": {
            "temperature": 0.2,
            "maxOutputTokens": 1524,
            "thinkingConfig": {"thinkingBudget": 1024, "includeThoughts": True},
            "responseMimeType": "application/json",
            "responseSchema": {"type": "OBJECT", "properties": {"city": {"type": "STRING"}}},
        },
    }
    raw = build_request(context, options, info=FLASH, json_schema=True)["generationConfig"]
    assert raw["responseJsonSchema"] == answer and "responseSchema" not in raw
    # A tool choice needs tools; a format without a schema only asks for JSON.
    bare = build_request(
        Request(messages=[UserMessage(content="Hi")]),
        StreamOptions(tool_choice="none", response_format={"name": "x"}),
        info=NO_THINKING,
    )
    assert bare == {
        "contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
        "generationConfig": {"responseMimeType": "application/json"},
    }


# -- conversion: failures -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "headers", "kind", "message", "retry_after"),
    [
        (
            429,
            gs.ERROR_429,
            None,
            "rate_limit",
            "HTTP 429: You exceeded your current quota, please check your plan and billing details. For more "
            "information on this error, head to: https://ai.google.dev/gemini-api/docs/rate-limits.\n* Quota "
            "exceeded for metric: generativelanguage.googleapis.com/generate_content_free_tier_requests, limit: "
            "10, model: gemini-2.5-flash\nPlease retry in 20.372613s.",
            20.0,
        ),
        (429, gs.ERROR_429_SHORT, {"retry-after": "3"}, "rate_limit", None, 3.0),
        (503, gs.ERROR_503, None, "overloaded", "HTTP 503: The model is overloaded. Please try again later.", None),
        (
            500,
            gs.ERROR_500,
            None,
            "server",
            "HTTP 500: An internal error has occurred. Please retry or report in "
            "https://developers.generativeai.google/guide/troubleshooting",
            None,
        ),
        (
            401,
            gs.ERROR_401,
            None,
            "auth",
            "HTTP 401: Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie "
            "or other valid authentication credential. See "
            "https://developers.google.com/identity/sign-in/web/devconsole-project.",
            None,
        ),
        (
            403,
            gs.ERROR_403,
            None,
            "auth",
            "HTTP 403: Method doesn't allow unregistered callers (callers without established identity). Please use "
            "API Key or other form of API consumer identity to call this API.",
            None,
        ),
        (400, gs.ERROR_400_KEY, None, "auth", "HTTP 400: API key not valid. Please pass a valid API key.", None),
        (
            400,
            gs.ERROR_400_OVERFLOW,
            None,
            "context_overflow",
            "HTTP 400: The input token count (1310720) exceeds the maximum number of tokens allowed (1048576).",
            None,
        ),
        (
            400,
            gs.ERROR_400_INVALID,
            None,
            "invalid_request",
            "HTTP 400: * GenerateContentRequest.contents: contents is not specified\n",
            None,
        ),
        (404, gs.ERROR_404, None, "invalid_request", None, None),
        (502, b"<html><body>Bad Gateway</body></html>", None, "server", "HTTP 502: <html><body>Bad Gateway</body></html>", None),
    ],
)
def test_error_bodies_are_classified(
    status: int,
    body: bytes,
    headers: dict[str, str] | None,
    kind: str,
    message: str | None,
    retry_after: float | None,
) -> None:
    error = classify_error(status, body, headers)
    assert (error.kind, error.status, error.retry_after) == (kind, status, retry_after)
    if message is not None:
        assert error.message == message


# -- stream state (no transport) ------------------------------------------------------------


def feed_all(chunks: list[dict[str, Any]]) -> tuple[list[tuple[Any, ...]], AssistantMessage]:
    builder = MessageBuilder(provider="google", api="gemini", model="m")
    state = GeminiStreamState(builder)
    events: list[Any] = []
    for chunk in chunks:
        events.extend(state.feed(msgspec.json.encode(chunk)))
    return trace(events), builder.message


def parts(*items: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"parts": list(items), "role": "model"}, "index": 0}
    if finish is not None:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "responseId": "r1"}


def test_signatures_attach_to_the_block_their_part_belongs_to() -> None:
    events, message = feed_all(
        [
            parts({"text": "Thinking", "thought": True}),
            parts({"text": "", "thought": True, "thoughtSignature": "sig-1"}),
            parts({"thoughtSignature": "sig-2"}),
            parts({"inlineData": {"mimeType": "image/png", "data": "AAAA"}}, {"fileData": {"fileUri": "gs://b/x"}}),
            parts({"text": "Answer"}, {"text": " more", "thoughtSignature": "sig-3"}),
            parts({"functionCall": {"name": "f"}}, {"functionCall": {"name": "f", "args": {"n": 1}}}),
            parts({"text": ""}, finish="STOP"),
        ]
    )
    assert events == [
        ("thinking_start", 0),
        ("thinking_delta", 0, "Thinking"),
        ("thinking_end", 0, "Thinking"),
        ("text_start", 1),
        ("text_end", 1, ""),
        ("text_start", 2),
        ("text_delta", 2, "Answer"),
        ("text_delta", 2, " more"),
        ("text_end", 2, "Answer more"),
        ("toolcall_start", 3),
        ("toolcall_delta", 3, "{}"),
        ("toolcall_end", 3, "f_r1_0", "f", {}),
        ("toolcall_start", 4),
        ("toolcall_delta", 4, '{"n":1}'),
        ("toolcall_end", 4, "f_r1_1", "f", {"n": 1}),
        ("done", "tool_use"),
    ]
    assert message.content == [
        ThinkingContent(thinking="Thinking", signature="sig-1"),
        TextContent(text="", signature="sig-2"),
        TextContent(text="Answer more", signature="sig-3"),
        ToolCall(id="f_r1_0", name="f", args={}),
        ToolCall(id="f_r1_1", name="f", args={"n": 1}),
    ]


def test_generated_call_ids_are_unique_across_responses_without_a_response_id() -> None:
    def call_ids() -> list[str]:
        chunk = parts({"functionCall": {"name": "f"}}, {"functionCall": {"name": "f"}}, finish="STOP")
        del chunk["responseId"]
        return [c.id for c in feed_all([chunk])[1].tool_calls]

    first, second = call_ids(), call_ids()
    token = first[0][len("f_") : -len("_0")]
    assert len(token) == 12 and first == [f"f_{token}_0", f"f_{token}_1"]
    assert set(first).isdisjoint(second)


@pytest.mark.parametrize(
    ("reason", "finish_message", "kind", "message"),
    [
        ("RECITATION", None, "content_filter", "The response was flagged for reciting training data (RECITATION)"),
        ("PROHIBITED_CONTENT", None, "content_filter", "The response was flagged for prohibited content (PROHIBITED_CONTENT)"),
        ("BLOCKLIST", None, "content_filter", "The response was stopped by a blocklisted term (BLOCKLIST)"),
        ("SPII", None, "content_filter", "The response was flagged for sensitive personal information (SPII)"),
        (
            "MALFORMED_FUNCTION_CALL",
            "Malformed function call: print(default_api.f(x=))",
            "unknown",
            "The response ended with finish reason MALFORMED_FUNCTION_CALL: "
            "Malformed function call: print(default_api.f(x=))",
        ),
        (
            "MISSING_THOUGHT_SIGNATURE",
            None,
            "invalid_request",
            "The response ended with finish reason MISSING_THOUGHT_SIGNATURE",
        ),
        ("OTHER", None, "unknown", "The response ended with finish reason OTHER"),
    ],
)
def test_other_finish_reasons_are_errors(reason: str, finish_message: str | None, kind: str, message: str) -> None:
    chunk = parts({"text": "Some"}, finish=reason)
    if finish_message is not None:
        chunk["candidates"][0]["finishMessage"] = finish_message
    builder = MessageBuilder(provider="google", api="gemini", model="m")
    state = GeminiStreamState(builder)
    with pytest.raises(Exception) as caught:
        state.feed(msgspec.json.encode(chunk))
    assert (getattr(caught.value, "kind", None), str(caught.value)) == (kind, message)
    assert builder.message.content == [TextContent(text="Some")]


# -- recorded streams -------------------------------------------------------------------


async def test_text_in_several_chunks(loopback: LoopbackServer) -> None:
    loopback.queue(sse(gs.TEXT))
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
    usage = Usage(input=21, output=7, total_tokens=28)
    usage.cost = cost(FLASH, usage)
    assert message == AssistantMessage(
        content=[TextContent(text="Hello from the café ☕.")],
        provider="google",
        api="gemini",
        model="gemini-2.5-flash",
        usage=usage,
        stop_reason="stop",
        response_id="X2rOaJ-3BfWm1dkP0YqW8Aw",
        timestamp=message.timestamp,
    )
    request = loopback.requests[0]
    assert (request.method, request.path, request.query) == (
        "POST",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        {"alt": "sse"},
    )
    assert (request.headers["x-goog-api-key"], request.headers["Accept"]) == (KEY, "text/event-stream")
    assert request.json == {
        "contents": [{"role": "user", "parts": [{"text": "Hi"}]}],
        "systemInstruction": {"parts": [{"text": "Be brief."}]},
        "generationConfig": {"thinkingConfig": {"thinkingBudget": 0}},
    }


async def test_stream_split_at_arbitrary_bytes_gives_the_same_message(loopback: LoopbackServer) -> None:
    loopback.queue(
        sse(gs.THINKING_TEXT),
        Reply(headers={"content-type": "text/event-stream"}, chunks=gs.chunks(gs.THINKING_TEXT, 7)),
    )
    whole = final(await run(model_for(loopback), HELLO))
    split = final(await run(model_for(loopback), HELLO))
    assert plain(split) == plain(whole)
    assert whole.text == "It is 27.78 m/s."


async def test_thinking_with_signature_then_text_usage_and_cost(loopback: LoopbackServer) -> None:
    loopback.queue(sse(gs.THINKING_TEXT))
    events = await run(model_for(loopback), HELLO, StreamOptions(thinking="medium"))
    assert trace(events) == [
        ("start",),
        ("thinking_start", 0),
        ("thinking_delta", 0, "**Converting units**\n\n100 km/h is 100000 m per 3600 s."),
        ("thinking_delta", 0, " That is 27.78 m/s."),
        ("thinking_end", 0, "**Converting units**\n\n100 km/h is 100000 m per 3600 s. That is 27.78 m/s."),
        ("text_start", 1),
        ("text_delta", 1, "It is "),
        ("text_delta", 1, "27.78 m/s."),
        ("text_end", 1, "It is 27.78 m/s."),
        ("done", "stop"),
    ]
    message = final(events)
    assert message.content == [
        ThinkingContent(thinking="**Converting units**\n\n100 km/h is 100000 m per 3600 s. That is 27.78 m/s."),
        TextContent(text="It is 27.78 m/s.", signature="CiQB0e2Kb7mR3Xq9vS1kTn2yZl0QyQ4sYw8cX1e2pW6uM3dXZ5s="),
    ]
    # 1200 prompt tokens of which 1024 cached; 84 answer tokens plus 256 thought tokens.
    usage = Usage(input=176, output=340, cache_read=1024, total_tokens=1540)
    usage.cost = cost(FLASH, usage)
    assert message.usage == usage
    assert message.usage.cost.total == pytest.approx(0.3 * 176 / 1e6 + 2.5 * 340 / 1e6 + 0.03 * 1024 / 1e6)
    assert loopback.requests[0].json["generationConfig"] == {
        "thinkingConfig": {"thinkingBudget": 8192, "includeThoughts": True}
    }


async def test_parallel_function_calls_in_one_chunk(loopback: LoopbackServer) -> None:
    loopback.queue(sse(gs.PARALLEL_CALLS))
    context = Request(messages=[UserMessage(content="Paris?")], tools=[WEATHER])
    events: list[Any] = []
    partials: list[dict[str, Any]] = []
    async for event in model_for(loopback).stream(context, StreamOptions(tool_choice="auto")):
        events.append(event)
        if event.type == "toolcall_delta":
            partials.append(dict(event.partial.content[event.index].args))
    assert trace(events) == [
        ("start",),
        ("toolcall_start", 0),
        ("toolcall_delta", 0, '{"city":"Paris","unit":"c"}'),
        ("toolcall_end", 0, "get_weather_qpc2afWVFJK4vr0Pq6WiyAU_0", "get_weather", {"city": "Paris", "unit": "c"}),
        ("toolcall_start", 1),
        ("toolcall_delta", 1, '{"tz":"Europe/Paris"}'),
        ("toolcall_end", 1, "get_time_qpc2afWVFJK4vr0Pq6WiyAU_1", "get_time", {"tz": "Europe/Paris"}),
        ("done", "tool_use"),
    ]
    # The arguments arrive whole: the one delta already holds all of them.
    assert partials == [{"city": "Paris", "unit": "c"}, {"tz": "Europe/Paris"}]
    message = final(events)
    assert message.content == [
        ToolCall(
            id="get_weather_qpc2afWVFJK4vr0Pq6WiyAU_0",
            name="get_weather",
            args={"city": "Paris", "unit": "c"},
            signature="CikBcsjafFK168IbtVtoxVV0Tsn8O+eU45rzJahz",
        ),
        ToolCall(id="get_time_qpc2afWVFJK4vr0Pq6WiyAU_1", name="get_time", args={"tz": "Europe/Paris"}),
    ]
    usage = Usage(input=83, output=118, total_tokens=201)
    usage.cost = cost(FLASH, usage)
    assert (message.stop_reason, message.usage) == ("tool_use", usage)
    sent = loopback.requests[0].json
    assert (sent["tools"], sent["toolConfig"]) == (
        [{"functionDeclarations": [{"name": "get_weather", "description": "Current weather for a city.", "parameters": CLEAN_WEATHER}]}],
        {"functionCallingConfig": {"mode": "AUTO"}},
    )


async def test_a_call_turn_replays_with_its_id_and_signature_after_a_json_round_trip(
    loopback: LoopbackServer,
) -> None:
    lister = ToolSpec(name="list_files", description="List files.", parameters={"type": "object", "properties": {}})
    loopback.queue(sse(gs.CALL_WITH_ID), sse(gs.TEXT))
    model = model_for(loopback, "gemini-3-pro-preview", info=GEMINI3)
    question = UserMessage(content="What is here?")
    events = await run(model, Request(messages=[question], tools=[lister]), StreamOptions(thinking="high"))
    turn = final(events)
    assert trace(events)[-4:] == [
        ("toolcall_start", 1),
        ("toolcall_delta", 1, "{}"),
        ("toolcall_end", 1, "wq6f0y2k", "list_files", {}),
        ("done", "tool_use"),
    ]
    result = ToolResultMessage(tool_call_id="wq6f0y2k", tool_name="list_files", content=[TextContent(text="a.txt")])
    history = messages_from_json(messages_to_json([question, turn, result]))
    await run(model, Request(messages=history, tools=[lister]), StreamOptions(thinking="high"))
    assert loopback.requests[1].json == {
        "contents": [
            {"role": "user", "parts": [{"text": "What is here?"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "**Listing files**\n\nI will look first.", "thought": True},
                    {
                        "functionCall": {"name": "list_files", "args": {}, "id": "wq6f0y2k"},
                        "thoughtSignature": "EpYCCpMCAdHtim9x2Y3Q",
                    },
                ],
            },
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "list_files", "response": {"output": "a.txt"}, "id": "wq6f0y2k"}}],
            },
        ],
        "tools": [{"functionDeclarations": [{"name": "list_files", "description": "List files."}]}],
        "generationConfig": {"thinkingConfig": {"thinkingLevel": "high", "includeThoughts": True}},
    }


async def test_max_tokens_is_length(loopback: LoopbackServer) -> None:
    loopback.queue(sse(gs.MAX_TOKENS))
    events = await run(model_for(loopback, info=NO_THINKING), HELLO, StreamOptions(max_tokens=16))
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Once upon"),
        ("text_delta", 0, " a time"),
        ("text_end", 0, "Once upon a time"),
        ("done", "length"),
    ]
    message = final(events)
    assert (message.stop_reason, message.text, message.usage.output) == ("length", "Once upon a time", 16)
    assert loopback.requests[0].json["generationConfig"] == {"maxOutputTokens": 16}


async def test_safety_finish_is_a_content_filter_error_keeping_the_partial_text(loopback: LoopbackServer) -> None:
    loopback.queue(sse(gs.SAFETY), sse(gs.TEXT))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    message = "The response was flagged by the safety filters (SAFETY)"
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Here is how"),
        ("error", "error", "content_filter", message),
    ]
    failed = final(events)
    assert (failed.content, failed.stop_reason, failed.usage.input, failed.usage.output, failed.response_id) == (
        [TextContent(text="Here is how")],
        "error",
        12,
        3,
        "c2FmZXR5LXN0b3AtMDE",
    )
    assert len(loopback.requests) == 1


async def test_a_blocked_prompt_is_a_content_filter_error(loopback: LoopbackServer) -> None:
    loopback.queue(sse(gs.PROMPT_BLOCKED))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events) == [("start",), ("error", "error", "content_filter", "The prompt was blocked (PROHIBITED_CONTENT)")]
    assert final(events).usage.input == 31


async def test_non_streaming_response(loopback: LoopbackServer) -> None:
    loopback.queue(
        Reply(headers={"content-type": "application/json; charset=UTF-8"}, chunks=[gs.NON_STREAMING], chunked=False)
    )
    events = await run(model_for(loopback, stream=False), HELLO, StreamOptions(thinking="low"))
    assert trace(events) == [
        ("start",),
        ("thinking_start", 0),
        ("thinking_delta", 0, "**Answering**\n\nA greeting needs no tools."),
        ("thinking_end", 0, "**Answering**\n\nA greeting needs no tools."),
        ("text_start", 1),
        ("text_delta", 1, "Hi there!"),
        ("text_end", 1, "Hi there!"),
        ("done", "stop"),
    ]
    message = final(events)
    assert message.content == [
        ThinkingContent(thinking="**Answering**\n\nA greeting needs no tools."),
        TextContent(text="Hi there!", signature="Cp8BAdHtim8nQ2"),
    ]
    assert (message.usage.input, message.usage.output, message.response_id) == (6, 35, "bm9uLXN0cmVhbWluZy0x")
    request = loopback.requests[0]
    assert (request.path, request.query, request.headers["Accept"]) == (
        "/v1beta/models/gemini-2.5-flash:generateContent",
        {},
        "application/json",
    )


async def test_a_json_reply_to_a_streaming_request_is_parsed_whole(loopback: LoopbackServer) -> None:
    # Without alt=sse the endpoint answers with a JSON array of chunks.
    array = b"[" + b",\n".join(e[len(b"data: ") : -4] for e in gs.events(gs.TEXT)) + b"]"
    loopback.queue(Reply(headers={"content-type": "application/json"}, chunks=[array], chunked=False))
    events = await run(model_for(loopback), HELLO)
    assert (trace(events)[-1], final(events).text, final(events).usage.output) == (
        ("done", "stop"),
        "Hello from the café ☕.",
        7,
    )


async def test_exact_request_for_a_representative_context(loopback: LoopbackServer) -> None:
    loopback.queue(sse(gs.TEXT))
    search = ToolSpec(
        name="search",
        description="Search the notes.",
        parameters={
            "type": "object",
            "properties": {
                "query": {"type": "string", "description": "Words to find."},
                "filter": {"$ref": "#/$defs/Filter"},
                "limit": {"anyOf": [{"type": "integer"}, {"type": "null"}], "default": None},
            },
            "required": ["query"],
            "additionalProperties": False,
            "$defs": {
                "Filter": {
                    "type": "object",
                    "properties": {"tag": {"type": "string"}, "since": {"type": "string", "format": "date-time"}},
                    "additionalProperties": False,
                }
            },
        },
    )
    context = Request(
        system_prompt="You are a careful assistant.",
        messages=[
            UserMessage(content=[TextContent(text="What is in this picture?"), ImageContent(data="iVBORw0KGgo=")]),
            AssistantMessage(
                content=[
                    ThinkingContent(thinking="**Looking**\n\nA cat; search the notes."),
                    TextContent(text="Let me check."),
                    ToolCall(
                        id="search_b3TOaKmUOsOx1dkPhPG-wQ4_0",
                        name="search",
                        args={"query": "cat"},
                        signature="EqQBCkgIARABGAI=",
                    ),
                ],
                provider="google",
                api="gemini",
                model="gemini-2.5-flash",
            ),
            ToolResultMessage(
                tool_call_id="search_b3TOaKmUOsOx1dkPhPG-wQ4_0",
                tool_name="search",
                content=[TextContent(text="Found: cat.png"), ImageContent(data="R0lGOD", mime_type="image/gif")],
            ),
        ],
        tools=[search],
    )
    options = StreamOptions(temperature=0.5, max_tokens=2000, thinking="high", tool_choice="search")
    await run(model_for(loopback), context, options)
    assert loopback.requests[0].json == {
        "contents": [
            {
                "role": "user",
                "parts": [
                    {"text": "What is in this picture?"},
                    {"inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}},
                ],
            },
            {
                "role": "model",
                "parts": [
                    {"text": "**Looking**\n\nA cat; search the notes.", "thought": True},
                    {"text": "Let me check."},
                    {"functionCall": {"name": "search", "args": {"query": "cat"}}, "thoughtSignature": "EqQBCkgIARABGAI="},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "search", "response": {"output": "Found: cat.png"}}},
                    {"inlineData": {"mimeType": "image/gif", "data": "R0lGOD"}},
                ],
            },
        ],
        "systemInstruction": {"parts": [{"text": "You are a careful assistant."}]},
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "search",
                        "description": "Search the notes.",
                        "parameters": {
                            "type": "OBJECT",
                            "properties": {
                                "query": {"type": "STRING", "description": "Words to find."},
                                "filter": {
                                    "type": "OBJECT",
                                    "properties": {
                                        "tag": {"type": "STRING"},
                                        "since": {"type": "STRING", "format": "date-time"},
                                    },
                                },
                                "limit": {"type": "INTEGER", "default": None, "nullable": True},
                            },
                            "required": ["query"],
                        },
                    }
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["search"]}},
        "generationConfig": {
            "temperature": 0.5,
            "maxOutputTokens": 18384,
            "thinkingConfig": {"thinkingBudget": 16384, "includeThoughts": True},
        },
    }


async def test_turns_of_other_models_lose_thinking_and_signatures(loopback: LoopbackServer) -> None:
    loopback.queue(sse(gs.TEXT), sse(gs.TEXT))
    foreign = AssistantMessage(
        content=[
            ThinkingContent(thinking="Anthropic thoughts", signature="EqQBCkgIARABGAIiQL"),
            TextContent(text="Checking.", signature='{"id":"msg_1"}'),
            ToolCall(id="toolu_01", name="get_weather", args={"city": "Rome"}, signature="fc_1"),
        ],
        provider="anthropic",
        api="anthropic-messages",
        model="claude-sonnet-4-5",
    )
    failed = AssistantMessage(content=[TextContent(text="half")], stop_reason="error", provider="google", api="gemini")
    history = [UserMessage(content="Weather in Rome?"), failed, foreign, UserMessage(content="Go on")]
    await run(model_for(loopback), Request(messages=history, tools=[WEATHER]))
    expected_model_turn = {
        "role": "model",
        "parts": [
            {"text": "Checking."},
            {"functionCall": {"name": "get_weather", "args": {"city": "Rome"}}},
        ],
    }
    missing = {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "get_weather", "response": {"error": MISSING_TOOL_RESULT}}},
            {"text": "Go on"},
        ],
    }
    assert loopback.requests[0].json["contents"] == [
        {"role": "user", "parts": [{"text": "Weather in Rome?"}]},
        expected_model_turn,
        missing,
    ]
    # Gemini 3 rejects unsigned calls in the current turn: they get the placeholder.
    await run(model_for(loopback, "gemini-3-pro-preview", info=GEMINI3), Request(messages=history, tools=[WEATHER]))
    signed = loopback.requests[1].json["contents"][1]["parts"][1]
    assert signed == {
        "functionCall": {"name": "get_weather", "args": {"city": "Rome"}},
        "thoughtSignature": SKIP_SIGNATURE,
    }


# -- keys -------------------------------------------------------------------------------


async def test_key_order_explicit_then_options_then_environment(
    loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GOOGLE_API_KEY", "from-google-env")
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    loopback.queue(*(sse(gs.TEXT) for _ in range(4)))
    await run(model_for(loopback, api_key="explicit"), HELLO, StreamOptions(api_key="per-request"))
    await run(model_for(loopback, api_key=None), HELLO, StreamOptions(api_key="per-request"))
    await run(model_for(loopback, api_key=None), HELLO)
    monkeypatch.setenv("GEMINI_API_KEY", "from-gemini-env")
    await run(model_for(loopback, api_key=None), HELLO)
    assert [r.headers["x-goog-api-key"] for r in loopback.requests] == [
        "explicit",
        "per-request",
        "from-google-env",
        "from-gemini-env",
    ]
    assert all("key" not in r.query for r in loopback.requests)


async def test_missing_key_fails_without_a_request(loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    events = await run(model_for(loopback, api_key=None), HELLO)
    assert trace(events) == [
        (
            "start",
        ),
        (
            "error",
            "error",
            "auth",
            "No API key for provider 'google': pass api_key or set GEMINI_API_KEY or GOOGLE_API_KEY",
        ),
    ]
    assert loopback.requests == []


async def test_the_key_never_shows_in_urls_reprs_errors_or_observed_exchanges(loopback: LoopbackServer) -> None:
    seen: list[HTTPExchange] = []
    echo = gs.ERROR_403.replace(b"Method doesn't allow", b"Key " + KEY.encode() + b" doesn't allow")
    loopback.queue(error(403, echo))
    model = model_for(loopback, observer=seen.append)
    events = await run(model, HELLO, StreamOptions(api_key=KEY))
    failed = final(events)
    assert failed.error_kind == "auth"
    assert KEY not in (failed.error_message or "") and "***" in (failed.error_message or "")
    assert KEY not in repr(model) and KEY not in repr(StreamOptions(api_key=KEY))
    assert [(x.phase, x.headers["x-goog-api-key"]) for x in seen] == [("request", "***"), ("response", "***")]
    assert all(KEY not in x.url and KEY not in (x.error or "") for x in seen)
    assert KEY not in loopback.requests[0].path + str(loopback.requests[0].query)


# -- HTTP failures --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "body", "kind", "message"),
    [
        (
            500,
            gs.ERROR_500,
            "server",
            "HTTP 500: An internal error has occurred. Please retry or report in "
            "https://developers.generativeai.google/guide/troubleshooting",
        ),
        (503, gs.ERROR_503, "overloaded", "HTTP 503: The model is overloaded. Please try again later."),
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
            gs.ERROR_401,
            "auth",
            "HTTP 401: Request had invalid authentication credentials. Expected OAuth 2 access token, login cookie "
            "or other valid authentication credential. See "
            "https://developers.google.com/identity/sign-in/web/devconsole-project.",
        ),
        (
            403,
            gs.ERROR_403,
            "auth",
            "HTTP 403: Method doesn't allow unregistered callers (callers without established identity). Please use "
            "API Key or other form of API consumer identity to call this API.",
        ),
        (400, gs.ERROR_400_KEY, "auth", "HTTP 400: API key not valid. Please pass a valid API key."),
        (
            400,
            gs.ERROR_400_OVERFLOW,
            "context_overflow",
            "HTTP 400: The input token count (1310720) exceeds the maximum number of tokens allowed (1048576).",
        ),
        (
            400,
            gs.ERROR_400_INVALID,
            "invalid_request",
            "HTTP 400: * GenerateContentRequest.contents: contents is not specified\n",
        ),
        (
            404,
            gs.ERROR_404,
            "invalid_request",
            "HTTP 404: models/gemini-0.9-ultra is not found for API version v1beta, or is not supported for "
            "generateContent. Call ListModels to see the list of available models and their supported methods.",
        ),
    ],
)
async def test_client_errors_are_not_retried(
    loopback: LoopbackServer, status: int, body: bytes, kind: str, message: str
) -> None:
    loopback.queue(error(status, body), sse(gs.TEXT))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events) == [("start",), ("error", "error", kind, message)]
    assert len(loopback.requests) == 1


async def test_rate_limit_honours_the_retry_delay_then_succeeds(loopback: LoopbackServer) -> None:
    loopback.queue(error(429, gs.ERROR_429_SHORT), sse(gs.TEXT))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    message = classify_error(429, gs.ERROR_429_SHORT).message
    assert message.startswith("HTTP 429: You exceeded your current quota")
    assert trace(events)[:3] == [("start",), ("retry", 1, 3, 0.004, "rate_limit", message, False), ("text_start", 0)]
    assert (trace(events)[-1], final(events).text) == (("done", "stop"), "Hello from the café ☕.")
    assert len(loopback.requests) == 2
    assert loopback.requests[0].body == loopback.requests[1].body


async def test_a_retry_delay_over_the_limit_fails_at_once(loopback: LoopbackServer) -> None:
    loopback.queue(error(429, gs.ERROR_429), sse(gs.TEXT))
    events = await run(model_for(loopback, retry=RetryPolicy(max_attempts=2, max_delay=0.05)), HELLO)
    kind, text = final(events).error_kind, final(events).error_message or ""
    assert kind == "rate_limit"
    assert text.endswith("Please retry in 20.372613s. (the server asked to retry after 20s, more than the 0.05s limit)")
    assert len(loopback.requests) == 1


# -- in-stream failures -----------------------------------------------------------------


async def test_an_error_chunk_is_classified_and_retried(loopback: LoopbackServer) -> None:
    loopback.queue(sse(gs.IN_STREAM_ERROR), sse(gs.TEXT))
    events = await run(model_for(loopback, retry=QUICK), HELLO)
    assert trace(events)[:6] == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Partial"),
        ("retry", 1, 3, 0.001, "overloaded", "The model is overloaded. Please try again later.", True),
        ("start",),
        ("text_start", 0),
    ]
    assert final(events).text == "Hello from the café ☕."

    loopback.queue(sse(gs.IN_STREAM_ERROR))
    events = await run(model_for(loopback), HELLO)
    assert trace(events)[-1] == ("error", "error", "overloaded", "The model is overloaded. Please try again later.")
    assert final(events).content == [TextContent(text="Partial")]


async def test_connection_cut_mid_event_keeps_partial_then_retry_discards_it(loopback: LoopbackServer) -> None:
    chunks = gs.events(gs.TEXT)
    half = chunks[1][: len(chunks[1]) // 2]
    loopback.queue(Reply(headers={"content-type": "text/event-stream"}, chunks=[chunks[0], half], cut_after=2))
    events = await run(model_for(loopback), HELLO)
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("text_delta", 0, "Hello"),
        ("error", "error", "network", "The connection closed before the response was complete"),
    ]
    assert final(events).content == [TextContent(text="Hello")]
    assert final(events).usage.input == 21

    loopback.queue(
        Reply(headers={"content-type": "text/event-stream"}, chunks=[chunks[0], half], cut_after=2), sse(gs.TEXT)
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


async def test_stream_ending_without_a_finish_reason_is_a_network_error(loopback: LoopbackServer) -> None:
    loopback.queue(sse(b"\r\n\r\n".join(gs.TEXT.split(b"\r\n\r\n")[:2]) + b"\r\n\r\n"))
    events = await run(model_for(loopback), HELLO)
    assert trace(events)[-2:] == [
        ("text_delta", 0, " from the café"),
        ("error", "error", "network", "The stream ended before the response was complete"),
    ]


async def test_idle_stall_is_a_stream_idle_error(loopback: LoopbackServer) -> None:
    stalled = sse(gs.TEXT, stall_after=1)
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
    stalled = sse(gs.THINKING_TEXT, stall_after=1)
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
        ("thinking_delta", 0, "**Converting units**\n\n100 km/h is 100000 m per 3600 s."),
        ("error", "aborted", None, "Request was aborted"),
    ]
    assert final(events).usage.cache_read == 1024
    await asyncio.wait_for(stalled.disconnected.wait(), 5)


async def test_complete_returns_the_final_message(loopback: LoopbackServer) -> None:
    loopback.queue(sse(gs.MAX_TOKENS))
    message = await complete(model_for(loopback), HELLO)
    assert (message.stop_reason, message.text) == ("length", "Once upon a time")


async def test_get_model_builds_the_adapter_from_the_registry(loopback: LoopbackServer) -> None:
    from ketch.llm import get_model

    loopback.queue(sse(gs.THINKING_TEXT))
    model = get_model("google:gemini-2.5-flash", base_url=loopback.url + "/v1beta", api_key=KEY, retry=ONE_SHOT)
    assert isinstance(model, GeminiModel)
    message = await complete(model, HELLO, StreamOptions(thinking="xhigh"))
    assert (message.provider, message.api, message.model, message.text) == (
        "google",
        "gemini",
        "gemini-2.5-flash",
        "It is 27.78 m/s.",
    )
    assert model.info.pricing == Pricing(input=0.3, output=2.5, cache_read=0.03)
    assert message.usage.cost == cost(model.info, message.usage)
    assert loopback.requests[0].json["generationConfig"] == {
        "thinkingConfig": {"thinkingBudget": 24576, "includeThoughts": True}
    }


def test_stop_sequences_go_in_the_generation_config() -> None:
    body = build_request(Request(messages=[UserMessage(content="Hi")]), StreamOptions(stop_sequences=["END"]), info=NO_THINKING)
    assert body["generationConfig"]["stopSequences"] == ["END"]
    plain = build_request(Request(messages=[UserMessage(content="Hi")]), StreamOptions(), info=NO_THINKING)
    assert "stopSequences" not in plain.get("generationConfig", {})


async def test_images_become_a_note_for_a_text_only_model(loopback: LoopbackServer) -> None:
    loopback.queue(sse(gs.TEXT), sse(gs.TEXT))
    context = with_images("google", "gemini", "gemini-2.5-flash")
    text_only = msgspec.structs.replace(FLASH, input_modalities=("text",))
    await run(model_for(loopback, info=text_only), context)
    await run(model_for(loopback), context)
    note = {"text": "(image omitted: this model does not accept images)"}
    sent, sent_with_images = (r.json["contents"] for r in loopback.requests)
    assert [c["parts"] for c in sent] == [
        [{"text": "Look:"}, note],
        [{"functionCall": {"name": "shot", "args": {}, "id": "call_1"}}],
        [{"functionResponse": {"name": "shot", "response": {"output": ""}, "id": "call_1"}}, note],
    ]
    assert sent_with_images[0]["parts"][1] == {"inlineData": {"mimeType": "image/png", "data": "AAAA"}}
    assert sent_with_images[2]["parts"][1] == {"inlineData": {"mimeType": "image/png", "data": "BBBB"}}
