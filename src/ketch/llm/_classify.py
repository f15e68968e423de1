"""Turn HTTP statuses, error bodies and transport exceptions into classified errors.

:func:`classify_response` maps a failed response (status, body, headers) to a
:class:`~ketch.llm.ModelError` subclass; :func:`classify_error_object` does the
same for an error object that arrives inside a stream; :func:`classify_exception`
handles transport failures. Context overflow is recognised from the wording of each
provider (:func:`is_context_overflow`), whatever the status code.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Mapping
from typing import Any

import msgspec

from ._errors import ModelError
from ._errors import NetworkError
from ._errors import RequestTimeoutError
from ._errors import ServerError
from ._errors import StreamIdleError
from ._errors import error_for_kind
from ._errors import exception_text
from ._retry import parse_retry_after

OVERFLOW_PATTERNS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(p, re.IGNORECASE)
    for p in (
        # OpenAI, Azure, DeepSeek, vLLM, OpenRouter, Together, Groq, Cerebras
        r"maximum context length",
        r"context_length_exceeded",
        r"reduce the length of the messages",
        r"exceeds the context window",
        r"maximum prompt length",  # xAI
        r"too large for model with \d+ maximum context length",  # Mistral
        # Anthropic
        r"prompt is too long",
        r"input length and `?max_tokens`? exceed context limit",
        r"request_too_large",
        # Gemini
        r"input token count.*exceeds the maximum",
        r"exceeds the maximum number of tokens allowed",
        # llama.cpp server, llama-cpp-python, LM Studio, Ollama
        r"exceeds? the available context size",
        r"exceed_context_size_error",
        r"requested tokens \(\d+\) exceed context window",
        r"context (?:length|window|size) (?:has been |was |is )?exceeded",
        r"exceeds? (?:the )?(?:model'?s? )?context (?:length|window|size)",
        r"context overflow",
        r"input is too long",  # Bedrock
        r"too many (?:input )?tokens",
    )
)
"""Provider wordings that mean "the request does not fit the context window"."""

_CONTENT_FILTER_CODES = frozenset(
    {"content_filter", "content_policy_violation", "responsibleaipolicyviolation", "safety", "prohibited_content"}
)
_RATE_CODES = frozenset({"rate_limit_exceeded", "rate_limit_error", "resource_exhausted", "rate_limited"})
_OVERLOADED_CODES = frozenset({"overloaded_error", "overloaded", "unavailable", "server_overloaded"})
_AUTH_CODES = frozenset(
    {
        "authentication_error",
        "permission_error",
        "invalid_api_key",
        "unauthenticated",
        "permission_denied",
        "permissiondenied",
        "insufficient_quota",  # an exhausted account quota (HTTP 429): waiting does not help
    }
)
_SERVER_CODES = frozenset({"api_error", "internal", "server_error", "internal_error"})
_TIMEOUT_CODES = frozenset({"deadline_exceeded", "timeout"})

_WAIT_IN_BODY = re.compile(
    r"(?:try again in|retry after|retry in)\s+(\d+(?:\.\d+)?)\s*(ms|milliseconds?|s|sec|seconds?)\b",
    re.IGNORECASE,
)
_RETRY_DELAY_FIELD = re.compile(r'"retryDelay"\s*:\s*"(\d+(?:\.\d+)?)s"')

_MAX_BODY = 2000


def is_context_overflow(text: str) -> bool:
    """True when ``text`` (an error message or body) says the context window overflowed."""
    return any(p.search(text) for p in OVERFLOW_PATTERNS)


def kind_for_status(status: int) -> str:
    """The error kind an HTTP status means on its own, before the body is considered."""
    if status in (401, 403):
        return "auth"
    if status == 408:
        return "timeout"
    if status == 413:
        return "context_overflow"
    if status == 429:
        return "rate_limit"
    if status in (503, 529):
        return "overloaded"
    if status >= 500:
        return "server"
    if status >= 400:
        return "invalid_request"
    return "unknown"


def error_details(body: bytes | str | Any) -> tuple[str, str]:
    """``(message, code)`` from a provider error body (JSON or text); ``code`` is the
    provider's error type/code/status lower-cased, or ""."""
    obj: Any = body
    if isinstance(body, (bytes, str)):
        text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
        try:
            obj = msgspec.json.decode(text)
        except msgspec.DecodeError:
            return clip_body(text.strip()), ""
    if isinstance(obj, list) and obj:
        obj = obj[0]
    if not isinstance(obj, dict):
        return clip_body(str(obj)), ""
    err: Any = obj.get("error", obj)
    if isinstance(err, str):
        return clip_body(err), _code_of(obj)
    if not isinstance(err, dict):
        return clip_body(str(err)), ""
    message = err.get("message") or err.get("detail") or obj.get("message") or obj.get("detail") or ""
    if not isinstance(message, str):
        message = msgspec.json.encode(message).decode()
    raw = (err.get("metadata") or {}).get("raw") if isinstance(err.get("metadata"), dict) else None
    if isinstance(raw, str) and raw and raw not in message:
        message = f"{message}: {raw}" if message else raw  # OpenRouter wraps upstream errors
    return clip_body(message), _code_of(err)


def _code_of(err: dict[str, Any]) -> str:
    for key in ("code", "type", "status"):
        value = err.get(key)
        if isinstance(value, str) and value:
            return value.lower()
    return ""


# Characters of which a credential cut off by clipping could be made.
_TOKEN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-+/=.~"


def clip_body(text: str) -> str:
    """``text`` cut to :data:`_MAX_BODY` characters. A cut that falls inside a word drops
    that word's start: it could be the first characters of a key."""
    if len(text) <= _MAX_BODY:
        return text
    return text[:_MAX_BODY].rstrip(_TOKEN_CHARS) + "…"


def _kind_for_code(code: str) -> str | None:
    if not code:
        return None
    if code == "context_length_exceeded":
        return "context_overflow"
    if code in _CONTENT_FILTER_CODES:
        return "content_filter"
    if code in _RATE_CODES:
        return "rate_limit"
    if code in _OVERLOADED_CODES:
        return "overloaded"
    if code in _AUTH_CODES:
        return "auth"
    if code in _SERVER_CODES:
        return "server"
    if code in _TIMEOUT_CODES:
        return "timeout"
    return None


def _wait_from_text(text: str) -> float | None:
    m = _WAIT_IN_BODY.search(text)
    if m is not None:
        value = float(m.group(1))
        return value / 1000.0 if m.group(2).lower().startswith("m") else value
    m = _RETRY_DELAY_FIELD.search(text)
    if m is not None:
        return float(m.group(1))
    return None


def classify_response(
    status: int,
    body: bytes | str,
    headers: Mapping[str, str] | None = None,
) -> ModelError:
    """The classified error for a failed HTTP response.

    The status decides the kind unless the body says better: context overflow is
    recognised from the message wording at any status, and provider error codes
    (``overloaded_error``, ``rate_limit_exceeded``, ``content_filter`` …) refine it.
    ``retry_after`` comes from the headers, else from waits stated in the body.
    """
    text = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    message, code = error_details(text)
    kind = kind_for_status(status)
    if is_context_overflow(message) or is_context_overflow(code):
        kind = "context_overflow"
    elif kind != "context_overflow":
        kind = _kind_for_code(code) or kind
    retry_after = parse_retry_after(headers)
    if retry_after is None and kind in ("rate_limit", "overloaded", "server"):
        retry_after = _wait_from_text(text)
    shown = f"HTTP {status}: {message}" if message else f"HTTP {status}"
    return error_for_kind(kind)(shown, status=status, retry_after=retry_after, body=clip_body(text))


def classify_error_object(obj: Any, *, default_kind: str = "server") -> ModelError:
    """The classified error for an error object received inside a stream."""
    message, code = error_details(obj)
    status: int | None = None
    if isinstance(obj, dict):
        err = obj.get("error", obj)
        if isinstance(err, dict):
            raw_status = err.get("code", err.get("status"))
            if isinstance(raw_status, int) and 400 <= raw_status < 600:
                status = raw_status
    if is_context_overflow(message) or is_context_overflow(code):
        kind = "context_overflow"
    else:
        kind = _kind_for_code(code) or (kind_for_status(status) if status is not None else default_kind)
    text = message or "the provider reported an error"
    retry_after = _wait_from_text(message) if kind in ("rate_limit", "overloaded", "server") else None
    return error_for_kind(kind)(text, status=status, retry_after=retry_after)


# Error types of bodies that arrive with HTTP 200, beyond what _kind_for_code knows.
_BODY_CODE_KINDS: dict[str, str] = {
    "invalid_request_error": "invalid_request",
    "invalid_request": "invalid_request",
    "invalid_argument": "invalid_request",
    "not_found_error": "invalid_request",
    "not_found": "invalid_request",
    "failed_precondition": "invalid_request",
    "billing_error": "auth",
    "timeout_error": "timeout",
}


def classify_error_body(obj: Any) -> ModelError | None:
    """The classified error when ``obj`` (a decoded JSON body that came with a success
    status) is an error object: ``{"error": {...}}``, ``{"type": "error", "error":
    {...}}`` or a list holding one (Gemini). None for anything else, including a
    Responses API response object (its ``error`` is handled with its ``status``).

    The kind comes from the body's type or code (``authentication_error`` is auth,
    ``invalid_request_error`` an invalid request, a numeric code an HTTP status), else
    it is a server error; the message is the provider's.
    """
    if isinstance(obj, list) and obj and isinstance(obj[0], dict) and obj[0].get("error"):
        obj = obj[0]
    if not isinstance(obj, dict):
        return None
    err = obj.get("error")
    if obj.get("object") == "response" or not (err or obj.get("type") == "error"):
        return None
    if not isinstance(err, (dict, str)):
        err = {"message": str(err)} if err else {}
    body = {"error": err}
    message, code = error_details(body)
    kind = _BODY_CODE_KINDS.get(code)
    if kind is not None and not is_context_overflow(message):
        return error_for_kind(kind)(message or "the provider reported an error")
    return classify_error_object(body, default_kind="server")


def classify_exception(exc: BaseException, *, idle_timeout: float | None = None) -> ModelError:
    """The classified error for an exception raised while sending or reading a request."""
    if isinstance(exc, ModelError):
        return exc
    import aiohttp

    if isinstance(exc, aiohttp.SocketTimeoutError):
        wait = f" for {idle_timeout:g} seconds" if idle_timeout is not None else ""
        return StreamIdleError(f"The provider sent no data{wait}")
    if isinstance(exc, aiohttp.ConnectionTimeoutError):
        return RequestTimeoutError("Timed out connecting to the provider")
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError)):
        return RequestTimeoutError("The request timed out")
    if isinstance(exc, aiohttp.ClientPayloadError):
        return NetworkError("The connection closed before the response was complete")
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return NetworkError("The server closed the connection")
    if isinstance(exc, aiohttp.ClientConnectorError):
        return NetworkError(f"Cannot connect to {exc.host}:{exc.port}: {exc.os_error.strerror or exc.os_error}")
    if isinstance(exc, (aiohttp.ClientError, OSError)):
        return NetworkError(exception_text(exc))
    if isinstance(exc, msgspec.DecodeError):
        return ServerError(f"The provider sent invalid JSON: {exc}")
    return ModelError(exception_text(exc))
