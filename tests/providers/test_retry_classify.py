"""White-box test: imports ketch implementation modules (private) directly.

Retry policy, Retry-After parsing and error classification."""

from __future__ import annotations

import socket
from datetime import UTC
from datetime import datetime
from email.utils import format_datetime

import aiohttp
import msgspec
import pytest

from ketch.llm._classify import classify_error_object
from ketch.llm._classify import classify_exception
from ketch.llm._classify import classify_response
from ketch.llm._classify import error_details
from ketch.llm._classify import is_context_overflow
from ketch.llm._classify import kind_for_status
from ketch.llm._errors import AuthError
from ketch.llm._errors import ContentFilterError
from ketch.llm._errors import ContextOverflowError
from ketch.llm._errors import InvalidRequestError
from ketch.llm._errors import ModelError
from ketch.llm._errors import NetworkError
from ketch.llm._errors import OverloadedError
from ketch.llm._errors import RateLimitError
from ketch.llm._errors import RequestTimeoutError
from ketch.llm._errors import ServerError
from ketch.llm._errors import StreamIdleError
from ketch.llm._retry import RetryPolicy
from ketch.llm._retry import parse_retry_after


# -- RetryPolicy ---------------------------------------------------------------------------
def test_backoff_doubles_and_is_capped_without_jitter() -> None:
    policy = RetryPolicy(max_attempts=10, base_delay=1.0, max_delay=5.0, jitter=0)
    assert [policy.delay(n) for n in range(1, 10)] == [1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]
    assert policy.delay(10) is None


def test_jitter_only_shortens_by_up_to_its_fraction() -> None:
    policy = RetryPolicy(max_attempts=100, base_delay=2.0, max_delay=100.0, jitter=0.5)
    delays = [policy.delay(1) for _ in range(200)]
    assert all(d is not None and 1.0 <= d <= 2.0 for d in delays)
    assert len(set(delays)) > 1


def test_retry_after_is_used_as_is_and_fails_fast_above_cap() -> None:
    policy = RetryPolicy(max_attempts=3, base_delay=1.0, max_delay=10.0, jitter=0.5)
    assert policy.delay(1, retry_after=7.5) == 7.5
    assert policy.delay(1, retry_after=0.0) == 0.0
    assert policy.delay(1, retry_after=10.5) is None
    assert policy.delay(3, retry_after=1.0) is None


def test_single_attempt_policy_never_retries() -> None:
    assert RetryPolicy(max_attempts=1).delay(1) is None


# -- Retry-After ---------------------------------------------------------------------------
def test_retry_after_headers() -> None:
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    assert parse_retry_after({"Retry-After": "1.5"}) == 1.5
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25
    assert parse_retry_after({"retry-after-ms": "250", "retry-after": "9"}) == 0.25
    assert parse_retry_after({"retry-after-ms": "junk", "retry-after": "9"}) == 9.0
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({"retry-after": "-1"}) is None
    assert parse_retry_after({}) is None
    assert parse_retry_after(None) is None


def test_retry_after_http_date() -> None:
    now = datetime(2025, 1, 1, 12, 0, 0, tzinfo=UTC)
    later = format_datetime(datetime(2025, 1, 1, 12, 0, 30, tzinfo=UTC), usegmt=True)
    earlier = format_datetime(datetime(2025, 1, 1, 11, 0, 0, tzinfo=UTC), usegmt=True)
    assert parse_retry_after({"retry-after": later}, now=now.timestamp()) == 30.0
    assert parse_retry_after({"retry-after": earlier}, now=now.timestamp()) == 0.0


# -- statuses ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "kind"),
    [
        (400, "invalid_request"),
        (401, "auth"),
        (403, "auth"),
        (404, "invalid_request"),
        (408, "timeout"),
        (413, "context_overflow"),
        (422, "invalid_request"),
        (429, "rate_limit"),
        (500, "server"),
        (502, "server"),
        (503, "overloaded"),
        (504, "server"),
        (529, "overloaded"),
    ],
)
def test_kind_for_status(status: int, kind: str) -> None:
    assert kind_for_status(status) == kind


def test_openai_rate_limit_body_and_headers() -> None:
    body = msgspec.json.encode(
        {"error": {"message": "Rate limit reached for gpt-4o", "type": "requests", "code": "rate_limit_exceeded"}}
    )
    err = classify_response(429, body, {"retry-after-ms": "1200"})
    assert type(err) is RateLimitError
    assert (err.kind, err.status, err.retry_after, err.message) == (
        "rate_limit",
        429,
        1.2,
        "HTTP 429: Rate limit reached for gpt-4o",
    )
    assert err.retryable


def test_wait_stated_in_body_is_used_without_header() -> None:
    body = '{"error": {"message": "Rate limit reached. Please try again in 6.5s.", "code": "rate_limit_exceeded"}}'
    assert classify_response(429, body).retry_after == 6.5
    body_ms = '{"error": {"message": "Please try again in 120ms."}}'
    assert classify_response(429, body_ms).retry_after == 0.12
    gemini = (
        '{"error": {"code": 429, "message": "Quota exceeded", "status": "RESOURCE_EXHAUSTED", "details": '
        '[{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "17s"}]}}'
    )
    err = classify_response(429, gemini)
    assert (type(err), err.retry_after, err.message) == (RateLimitError, 17.0, "HTTP 429: Quota exceeded")


def test_anthropic_overloaded_body() -> None:
    body = '{"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}'
    err = classify_response(529, body)
    assert (type(err), err.message, err.retryable) == (OverloadedError, "HTTP 529: Overloaded", True)
    # The body's type wins over a generic status.
    assert type(classify_response(500, body)) is OverloadedError


def test_auth_errors_are_not_retryable() -> None:
    err = classify_response(401, '{"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}}')
    assert (type(err), err.retryable, err.message) == (AuthError, False, "HTTP 401: Incorrect API key provided")


def test_plain_text_and_empty_bodies() -> None:
    err = classify_response(502, b"<html>Bad gateway</html>")
    assert (type(err), err.message) == (ServerError, "HTTP 502: <html>Bad gateway</html>")
    err = classify_response(503, b"")
    assert (type(err), err.message) == (OverloadedError, "HTTP 503")


def test_content_filter_code() -> None:
    body = '{"error": {"message": "Your request was rejected by the safety system", "code": "content_policy_violation"}}'
    assert type(classify_response(400, body)) is ContentFilterError


def test_invalid_request_stays_invalid() -> None:
    body = '{"error": {"message": "Unknown parameter: foo", "type": "invalid_request_error"}}'
    err = classify_response(400, body)
    assert (type(err), err.retryable) == (InvalidRequestError, False)


def test_openrouter_wrapped_upstream_message() -> None:
    body = '{"error": {"message": "Provider returned error", "code": 400, "metadata": {"raw": "prompt is too long: 210000 tokens"}}}'
    err = classify_response(400, body)
    assert (type(err), err.message) == (
        ContextOverflowError,
        "HTTP 400: Provider returned error: prompt is too long: 210000 tokens",
    )


# -- context overflow ----------------------------------------------------------------------
@pytest.mark.parametrize(
    ("status", "body"),
    [
        # OpenAI
        (
            400,
            '{"error": {"message": "This model\'s maximum context length is 128000 tokens. However, your messages '
            'resulted in 130000 tokens. Please reduce the length of the messages.", "type": "invalid_request_error", '
            '"param": "messages", "code": "context_length_exceeded"}}',
        ),
        (400, '{"error": {"message": "Input too big", "code": "context_length_exceeded"}}'),
        (400, '{"error": {"message": "Your input exceeds the context window of this model."}}'),
        # Anthropic
        (
            400,
            '{"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 208000 '
            'tokens > 200000 maximum"}}',
        ),
        (
            400,
            '{"type": "error", "error": {"type": "invalid_request_error", "message": "input length and `max_tokens` '
            'exceed context limit: 190000 + 32000 > 200000"}}',
        ),
        # Gemini
        (
            400,
            '{"error": {"code": 400, "message": "The input token count (1200000) exceeds the maximum number of '
            'tokens allowed (1048576).", "status": "INVALID_ARGUMENT"}}',
        ),
        # llama.cpp server
        (
            400,
            '{"error": {"code": 400, "message": "the request exceeds the available context size, try increasing it", '
            '"type": "exceed_context_size_error", "n_prompt_tokens": 5000, "n_ctx": 4096}}',
        ),
        # llama-cpp-python
        (400, '{"error": {"message": "Requested tokens (3000) exceed context window of 2048", "type": "internal_server_error"}}'),
        (500, '{"error": {"message": "Requested tokens (3000) exceed context window of 2048"}}'),
        # Mistral, xAI, Ollama-style strings
        (400, '{"message": "Prompt contains 40000 tokens, too large for model with 32768 maximum context length"}'),
        (400, '{"error": {"message": "This model\'s maximum prompt length is 131072 but the request contains 140000 tokens."}}'),
        (400, '{"error": "context length exceeded"}'),
        # Anthropic request_too_large
        (413, '{"type": "error", "error": {"type": "request_too_large", "message": "Request exceeds the maximum size"}}'),
    ],
)
def test_context_overflow_bodies(status: int, body: str) -> None:
    err = classify_response(status, body)
    assert type(err) is ContextOverflowError
    assert err.retryable is False


@pytest.mark.parametrize(
    "text",
    ["Rate limit reached", "Invalid model", "Overloaded", "Please reduce your request rate", "context is fine"],
)
def test_not_overflow(text: str) -> None:
    assert is_context_overflow(text) is False


# -- errors inside a stream ----------------------------------------------------------------
def test_stream_error_objects() -> None:
    err = classify_error_object({"error": {"message": "Internal error", "type": "server_error"}})
    assert (type(err), err.message, err.status) == (ServerError, "Internal error", None)
    err = classify_error_object({"error": {"message": "too busy", "code": 503}})
    assert (type(err), err.status) == (OverloadedError, 503)
    err = classify_error_object({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    assert type(err) is OverloadedError
    err = classify_error_object({"error": {"message": "prompt is too long"}})
    assert type(err) is ContextOverflowError
    err = classify_error_object({"error": "boom"})
    assert (type(err), err.message) == (ServerError, "boom")


def test_error_details_forms() -> None:
    assert error_details('{"error": {"message": "m", "type": "t"}}') == ("m", "t")
    assert error_details('{"error": {"message": "m", "code": "c", "type": "t"}}') == ("m", "c")
    assert error_details('{"detail": "not found"}') == ("not found", "")
    assert error_details('[{"error": {"code": 400, "message": "bad", "status": "INVALID_ARGUMENT"}}]') == (
        "bad",
        "invalid_argument",
    )
    assert error_details("plain words") == ("plain words", "")
    assert error_details('{"detail": [{"loc": ["body"], "msg": "field required"}]}') == (
        '[{"loc":["body"],"msg":"field required"}]',
        "",
    )


# -- transport exceptions ------------------------------------------------------------------
def test_transport_exceptions() -> None:
    idle = classify_exception(aiohttp.SocketTimeoutError("Timeout on reading data from socket"), idle_timeout=2.5)
    assert (type(idle), idle.message) == (StreamIdleError, "The provider sent no data for 2.5 seconds")
    connect = classify_exception(aiohttp.ConnectionTimeoutError("x"))
    assert (type(connect), connect.message) == (RequestTimeoutError, "Timed out connecting to the provider")
    total = classify_exception(TimeoutError())
    assert (type(total), total.message) == (RequestTimeoutError, "The request timed out")
    payload = classify_exception(aiohttp.ClientPayloadError("Response payload is not completed"))
    assert (type(payload), payload.message) == (
        NetworkError,
        "The connection closed before the response was complete",
    )
    gone = classify_exception(aiohttp.ServerDisconnectedError())
    assert (type(gone), gone.message) == (NetworkError, "The server closed the connection")
    reset = classify_exception(ConnectionResetError("reset by peer"))
    assert (type(reset), reset.message) == (NetworkError, "ConnectionResetError: reset by peer")
    assert classify_exception(msgspec.DecodeError("bad")).kind == "server"
    other = classify_exception(ValueError("odd"))
    assert (type(other), other.kind, other.message) == (ModelError, "unknown", "ValueError: odd")
    same = AuthError("no")
    assert classify_exception(same) is same


async def test_connection_refused_is_a_network_error() -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens on this port now
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.ClientConnectorError) as info:
            await session.get(f"http://127.0.0.1:{port}/")
    err = classify_exception(info.value)
    assert type(err) is NetworkError
    assert err.message.startswith(f"Cannot connect to 127.0.0.1:{port}: ")
