"""White-box test: imports ketch implementation modules (private) directly.

Provider hardening found against a real third-party server and hostile input: stale
pooled connections, error objects and HTML pages sent with HTTP 200, oversized events,
idle providers, malformed Responses streams, and keys echoed in error bodies."""

from __future__ import annotations

from typing import Any

import pytest
from loopback import LoopbackServer
from loopback import Reply
from loopback import json_reply
from loopback import sse
from loopback import sse_reply

from ketch.llm import Request
from ketch.llm import StreamOptions
from ketch.llm import UserMessage
from ketch.llm import get_model
from ketch.llm import messages_to_json
from ketch.llm import register_provider
from ketch.llm._providers.anthropic import AnthropicModel
from ketch.llm._providers.base import HTTPExchange
from ketch.llm._providers.base import HTTPModel
from ketch.llm._providers.gemini import GeminiModel
from ketch.llm._providers.openai_chat import OpenAIChatModel
from ketch.llm._providers.openai_responses import OpenAIResponsesModel
from ketch.llm._retry import RetryPolicy
from support import final
from support import run
from support import trace

KEY = "sk-test-Q7vX2mZ9kL4pW8rT1yB6nC3dF5gH0jKs"
ONE_SHOT = RetryPolicy(max_attempts=1)
QUICK = RetryPolicy(max_attempts=3, base_delay=0.0, jitter=0.0)
HELLO = Request(messages=[UserMessage(content="Hi")])


def chat(server: LoopbackServer, **kwargs: Any) -> OpenAIChatModel:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("retry", ONE_SHOT)
    return OpenAIChatModel("gpt-4o", base_url=kwargs.pop("base_url", server.url + "/v1"), **kwargs)


def responses(server: LoopbackServer, **kwargs: Any) -> OpenAIResponsesModel:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("retry", ONE_SHOT)
    return OpenAIResponsesModel("gpt-4o", base_url=server.url + "/v1", **kwargs)


def anthropic(server: LoopbackServer, **kwargs: Any) -> AnthropicModel:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("retry", ONE_SHOT)
    return AnthropicModel("claude-sonnet-4-5", base_url=server.url + "/v1", **kwargs)


def gemini(server: LoopbackServer, **kwargs: Any) -> GeminiModel:
    kwargs.setdefault("api_key", KEY)
    kwargs.setdefault("retry", ONE_SHOT)
    return GeminiModel("gemini-2.5-flash", base_url=server.url + "/v1beta", **kwargs)


ADAPTERS = {"openai-chat": chat, "openai-responses": responses, "anthropic": anthropic, "gemini": gemini}


def chat_text(text: str) -> Reply:
    return sse_reply(
        {"id": "c1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": text}}]},
        {"id": "c1", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
    )


# -- 3. a pooled connection the server closed -------------------------------------------


async def test_a_kept_alive_connection_closed_by_the_server_is_resent_silently(loopback: LoopbackServer) -> None:
    # The second request goes out on the pooled connection; the server closes it without
    # a byte (as a server that drops idle connections does), so it is sent again at once.
    loopback.queue(chat_text("one"), Reply(drop=True), chat_text("two"))
    model = chat(loopback, retry=QUICK)
    first = await run(model, HELLO)
    second = await run(model, HELLO)
    assert trace(first)[-1] == ("done", "stop")
    assert [t[0] for t in trace(second)] == ["start", "text_start", "text_delta", "text_end", "done"]
    assert final(second).content[0].text == "two"
    peers = [r.peer for r in loopback.requests]
    assert len(peers) == 3
    assert peers[0] == peers[1] != peers[2]  # reused, dropped, then a new connection


async def test_a_server_that_always_drops_gets_one_silent_resend_then_the_normal_path(
    loopback: LoopbackServer,
) -> None:
    loopback.queue(Reply(drop=True), Reply(drop=True))
    events = await run(chat(loopback), HELLO)
    assert trace(events) == [("start",), ("error", "error", "network", "The server closed the connection")]
    assert len(loopback.requests) == 2

    loopback.requests.clear()
    loopback.replies.clear()
    loopback.queue(*(Reply(drop=True) for _ in range(4)))
    events = await run(chat(loopback, retry=QUICK), HELLO)
    assert trace(events) == [
        ("start",),
        ("retry", 1, 3, 0.0, "network", "The server closed the connection", False),
        ("retry", 2, 3, 0.0, "network", "The server closed the connection", False),
        ("error", "error", "network", "The server closed the connection"),
    ]
    assert len(loopback.requests) == 4  # one silent resend, then the policy's three attempts


# -- 4. error objects and HTML pages with HTTP 200 -------------------------------------

CREDIT = (
    "Your credit balance is too low to access the Anthropic API. "
    "Please go to Plans & Billing to upgrade or purchase credits."
)
BODIES = [
    ({"type": "error", "error": {"type": "invalid_request_error", "message": CREDIT}}, "invalid_request", CREDIT),
    ({"error": {"message": "Incorrect API key provided", "type": "authentication_error"}}, "auth", "Incorrect API key provided"),
    ({"error": {"message": "Incorrect API key provided", "type": "invalid_request_error", "code": "invalid_api_key"}},
     "auth", "Incorrect API key provided"),
    ([{"error": {"code": 400, "message": "Request contains an invalid argument.", "status": "INVALID_ARGUMENT"}}],
     "invalid_request", "Request contains an invalid argument."),
    ({"error": {"code": 500, "message": "An internal error has occurred.", "status": "INTERNAL"}},
     "server", "An internal error has occurred."),
    ({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}, "overloaded", "Overloaded"),
    ({"error": "upstream failed"}, "server", "upstream failed"),
]


@pytest.mark.parametrize("adapter", list(ADAPTERS))
@pytest.mark.parametrize(("body", "kind", "message"), BODIES)
@pytest.mark.parametrize("content_type", ["application/json", "text/event-stream", ""])
async def test_an_error_object_sent_with_200_is_a_classified_error(
    loopback: LoopbackServer, adapter: str, body: Any, kind: str, message: str, content_type: str
) -> None:
    reply = json_reply(body)
    reply.headers = {"content-type": content_type} if content_type else {}
    loopback.queue(reply)
    events = await run(ADAPTERS[adapter](loopback), HELLO)
    assert trace(events) == [("start",), ("error", "error", kind, message)]
    assert final(events).content == []


@pytest.mark.parametrize("adapter", list(ADAPTERS))
@pytest.mark.parametrize("content_type", ["text/html; charset=utf-8", "text/event-stream", ""])
async def test_an_html_page_with_200_says_so_and_names_the_url_without_credentials(
    loopback: LoopbackServer, adapter: str, content_type: str
) -> None:
    page = b"<!DOCTYPE html>\n<html><head><title>Sign in</title></head><body>Portal</body></html>\n"
    loopback.queue(Reply(headers={"content-type": content_type} if content_type else {}, chunks=[page]))
    # Credentials in the URL (aiohttp sends them as basic auth, which excludes a bearer key).
    model = ADAPTERS[adapter](loopback, api_key="hunter2", requires_key=False)
    if adapter.startswith("openai"):
        model = ADAPTERS[adapter](loopback, api_key=None, requires_key=False)
    model.base_url = model.base_url.replace("http://", "http://user:hunter2@")
    events = await run(model, HELLO)
    path = loopback.requests[0].path
    assert trace(events) == [
        ("start",),
        (
            "error",
            "error",
            "invalid_request",
            f"The server at http://127.0.0.1:{loopback.port}{path} returned an HTML page (HTTP 200), "
            "not a model stream: check the provider's base URL",
        ),
    ]


# -- 5. event size cap, idle timeout --------------------------------------------------


async def test_an_oversized_sse_line_ends_the_request_with_a_classified_error(loopback: LoopbackServer) -> None:
    huge = b"data: {" + b"x" * 5000
    loopback.queue(Reply(headers={"content-type": "text/event-stream"}, chunks=[huge[i : i + 100] for i in range(0, 5100, 100)]))
    events = await run(chat(loopback, max_event_bytes=1000), HELLO)
    assert trace(events) == [
        ("start",),
        ("error", "error", "server",
         "The provider sent an event larger than 1000 bytes (the max_event_bytes limit); the response was dropped"),
    ]


async def test_an_oversized_event_of_many_lines_and_a_large_json_body_are_capped(loopback: LoopbackServer) -> None:
    lines = b"".join(b"data: " + b"y" * 99 + b"\n" for _ in range(20)) + b"\n"
    loopback.queue(Reply(headers={"content-type": "text/event-stream"}, chunks=[lines]))
    loopback.queue(json_reply({"choices": [{"message": {"content": "z" * 5000}}]}))
    for _ in range(2):
        events = await run(chat(loopback, max_event_bytes=1000), HELLO)
        assert trace(events)[-1][:3] == ("error", "error", "server")
        assert "larger than 1000 bytes" in trace(events)[-1][3]


async def test_events_within_the_cap_pass(loopback: LoopbackServer) -> None:
    loopback.queue(chat_text("a" * 900))
    events = await run(chat(loopback, max_event_bytes=1000), HELLO)
    assert trace(events)[-1] == ("done", "stop")


def test_the_idle_limit_defaults_to_90_seconds() -> None:
    for model in (chat, responses, anthropic, gemini):
        assert model(LoopbackServer()).idle_timeout == 90.0  # type: ignore[operator]
    assert HTTPModel.__init__.__kwdefaults__["idle_timeout"] == 90.0
    assert get_model("openai:gpt-4o", idle_timeout=30).idle_timeout == 30  # type: ignore[attr-defined]
    assert get_model("anthropic:claude-sonnet-4-5", max_event_bytes=1 << 20).max_event_bytes == 1 << 20  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("cls", "provider", "id"),
    [
        (OpenAIChatModel, "openai", "gpt-4o"),
        (OpenAIResponsesModel, "openai", "gpt-5-mini"),
        (AnthropicModel, "anthropic", "claude-haiku-4-5"),
        (GeminiModel, "google", "gemini-2.5-flash"),
    ],
)
def test_every_adapter_built_directly_knows_what_the_registry_knows(cls: type[HTTPModel], provider: str, id: str) -> None:
    known = cls(id)  # type: ignore[call-arg]
    resolved = get_model(f"{provider}:{id}")
    assert (known.provider, known.base_url, known.env_keys) == (
        resolved.provider,  # type: ignore[attr-defined]
        resolved.base_url,  # type: ignore[attr-defined]
        resolved.env_keys,  # type: ignore[attr-defined]
    )
    assert (known.context_window, known.info.pricing, known.info.thinking) == (
        resolved.context_window,
        resolved.info.pricing,  # type: ignore[attr-defined]
        resolved.info.thinking,  # type: ignore[attr-defined]
    )
    assert known.info.pricing.input > 0
    # A model the registry does not know gets the defaults, and may be sent images.
    unknown = cls("not-a-listed-model")  # type: ignore[call-arg]
    assert (unknown.info.name, unknown.info.pricing.input, unknown.context_window) == ("", 0.0, 128_000)
    assert unknown._takes_images() and known._takes_images()


async def test_an_idle_provider_is_retried_once_then_fails(loopback: LoopbackServer) -> None:
    # Silent from the start (no headers): the idle limit covers the first byte, and a
    # provider that stays silent twice is not waited for again (it was 4 x 120 s + backoff).
    loopback.queue(*(Reply(stall_headers=True) for _ in range(3)))
    events = await run(chat(loopback, idle_timeout=0.05, retry=QUICK), HELLO)
    assert trace(events) == [
        ("start",),
        ("retry", 1, 3, 0.0, "stream_idle", "The provider sent no data for 0.05 seconds", False),
        ("error", "error", "stream_idle", "The provider sent no data for 0.05 seconds"),
    ]
    assert len(loopback.requests) == 2


# -- 2. Responses streams without output_index -----------------------------------------


def _no_index(*events: dict[str, Any]) -> list[dict[str, Any]]:
    return [{k: v for k, v in e.items() if k != "output_index"} for e in events]


TEXT_THEN_CALL = [
    {"type": "response.created", "response": {"id": "resp_1", "status": "in_progress"}},
    {"type": "response.output_item.added", "output_index": 0,
     "item": {"id": "msg_1", "type": "message", "status": "in_progress", "content": [], "role": "assistant"}},
    {"type": "response.output_text.delta", "item_id": "msg_1", "output_index": 0, "content_index": 0, "delta": "Let me look."},
    {"type": "response.output_item.added", "output_index": 1,
     "item": {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "ls", "arguments": ""}},
    {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1, "delta": '{"path":'},
    {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "output_index": 1, "delta": '"."}'},
    {"type": "response.output_item.done", "output_index": 0,
     "item": {"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
              "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]}},
    {"type": "response.output_item.done", "output_index": 1,
     "item": {"id": "fc_1", "type": "function_call", "call_id": "call_1", "name": "ls", "arguments": '{"path":"."}'}},
    {"type": "response.completed", "response": {"id": "resp_1", "status": "completed",
                                                "usage": {"input_tokens": 5, "output_tokens": 3}}},
]
EXPECTED = [
    ("start",),
    ("text_start", 0),
    ("text_delta", 0, "Let me look."),
    ("toolcall_start", 1),
    ("toolcall_delta", 1, '{"path":'),
    ("toolcall_delta", 1, '"."}'),
    ("text_end", 0, "Let me look."),
    ("toolcall_end", 1, "call_1", "ls", {"path": "."}),
    ("done", "tool_use"),
]


def _strip_ids(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for e in _no_index(*events):
        e = {k: v for k, v in e.items() if k != "item_id"}
        if "item" in e:
            e["item"] = {k: v for k, v in e["item"].items() if k != "id"}
        out.append(e)
    return out


@pytest.mark.parametrize("shape", ["as documented", "without output_index", "without output_index or ids"])
async def test_responses_text_then_a_tool_call_whatever_the_server_omits(loopback: LoopbackServer, shape: str) -> None:
    events = {"as documented": TEXT_THEN_CALL, "without output_index": _no_index(*TEXT_THEN_CALL),
              "without output_index or ids": _strip_ids(TEXT_THEN_CALL)}[shape]
    loopback.queue(sse_reply(*events, done=False))
    got = await run(responses(loopback), HELLO)
    assert trace(got) == EXPECTED


async def test_responses_events_that_contradict_their_items_are_a_classified_error(loopback: LoopbackServer) -> None:
    bad = [
        TEXT_THEN_CALL[1],
        # arguments aimed at the message item
        {"type": "response.function_call_arguments.delta", "item_id": "msg_1", "delta": "{}"},
    ]
    loopback.queue(sse_reply(*bad, done=False))
    events = await run(responses(loopback), HELLO)
    assert trace(events) == [
        ("start",),
        ("text_start", 0),
        ("error", "error", "server",
         "The provider sent a malformed stream: content block 0 is not a tool call block"),
    ]


@pytest.mark.parametrize("adapter", list(ADAPTERS))
async def test_wire_data_of_the_wrong_shape_is_a_classified_error_never_an_exception_name(
    loopback: LoopbackServer, adapter: str
) -> None:
    loopback.queue(Reply(headers={"content-type": "text/event-stream"}, chunks=sse([1, 2, 3], {"choices": 5}, "nul")))
    events = await run(ADAPTERS[adapter](loopback), HELLO)
    last = trace(events)[-1]
    assert last[:3] == ("error", "error", "server")
    assert "AssertionError" not in last[3]


# -- 7. keys echoed in error bodies ---------------------------------------------------


def _leaks(text: str, key: str) -> list[str]:
    return [key[i : i + 4] for i in range(len(key) - 3) if key[i : i + 4] in text]


@pytest.mark.parametrize("status", [400, 500])
async def test_a_key_echoed_at_any_offset_around_the_clip_never_leaks(loopback: LoopbackServer, status: int) -> None:
    offsets = range(2000 - len(KEY) - 12, 2000 + 4)
    for offset in offsets:
        body = ("." * (offset - len("HTTP 400: "))) + KEY + " was rejected" + "." * 100
        for _ in range(2):
            loopback.queue(json_reply({"error": {"message": body}}, status=status))
    seen: list[HTTPExchange] = []
    model = chat(loopback, retry=RetryPolicy(max_attempts=2, base_delay=0.0, jitter=0.0), observer=seen.append)
    for offset in offsets:
        events = await run(model, HELLO)
        error = final(events)
        dumped = "".join(
            [repr(events), repr(seen), messages_to_json(error).decode(), repr(model), str(error.error_message)]
        )
        assert _leaks(dumped, KEY) == [], offset
        seen.clear()


async def test_values_of_configured_and_conventional_key_variables_are_redacted(
    loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    work = "wk-Zr8Tq3Lm6Vp1Xc9Bn4"
    other = "sk-ant-Hh5Jj7Kk2Ll9Mm3Nn"
    monkeypatch.setenv("WORK_OPENAI_KEY", work)
    monkeypatch.setenv("ANTHROPIC_API_KEY", other)
    loopback.queue(json_reply({"error": {"message": f"keys {work} and {other} and {KEY}"}}, status=401))
    model = chat(loopback, env_keys=("WORK_OPENAI_KEY",))
    events = await run(model, HELLO, StreamOptions())
    assert trace(events)[-1] == ("error", "error", "auth", "HTTP 401: keys *** and *** and ***")


async def test_key_variables_configured_for_other_providers_are_redacted(
    loopback: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ketch.llm import _registry as registry

    assert registry.get_provider("openai") is not None
    monkeypatch.setattr(registry, "_providers", dict(registry._providers))
    register_provider("work-proxy", base_url="http://127.0.0.1:1/v1", api_key_env="WORK_PROXY_TOKEN")
    token = "wp-Fd3Gs8Ha1Jk6Lq"
    monkeypatch.setenv("WORK_PROXY_TOKEN", token)
    loopback.queue(json_reply({"error": {"message": f"echo {token}"}}, status=400))
    events = await run(chat(loopback), HELLO)
    assert trace(events)[-1] == ("error", "error", "invalid_request", "HTTP 400: echo ***")


def test_a_clipped_error_body_drops_a_cut_word_that_could_start_a_key() -> None:
    # A key nobody configured cannot be recognised; when the clip cuts it, no start of it stays.
    from ketch.llm._classify import classify_response

    unknown_key = "zz-Unknown9Key8Never7Configured"
    for offset in range(2000 - len(unknown_key) + 1, 2000):
        error = classify_response(400, "!" * (offset - 4) + "key " + unknown_key + " tail" + "!" * 50)
        assert error.body == "!" * (offset - 4) + "key " + "…"
        assert _leaks(error.message, unknown_key) == [], offset
