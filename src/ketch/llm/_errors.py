"""Classified model errors.

Every failure talking to a model is one of a fixed set of kinds. The kind decides
whether a request is retried, whether a :class:`~ketch.llm.FallbackModel`
moves on, and what the caller is told. Each kind has a typed exception for callers
who prefer ``except`` clauses; inside a run they surface as the ``error_kind`` of an
assistant message whose stop reason is ``error``.
"""

from __future__ import annotations

from typing import Literal
from typing import TypeAlias

ErrorKind: TypeAlias = Literal[
    "rate_limit",
    "overloaded",
    "timeout",
    "stream_idle",
    "network",
    "auth",
    "context_overflow",
    "invalid_request",
    "content_filter",
    "server",
    "unknown",
]

RETRYABLE_KINDS: frozenset[str] = frozenset(
    {"rate_limit", "overloaded", "timeout", "stream_idle", "network", "server"}
)
"""Kinds a request is retried for (with backoff)."""

FAILOVER_KINDS: frozenset[str] = RETRYABLE_KINDS
"""Kinds a fallback chain moves to the next model for."""


class ModelError(Exception):
    """A classified failure from a model provider.

    ``status`` is the HTTP status when there was one; ``retry_after`` the delay in
    seconds the server asked for. The message never contains credentials.
    """

    kind: ErrorKind = "unknown"

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        retry_after: float | None = None,
        body: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.retry_after = retry_after
        self.body = body

    @property
    def retryable(self) -> bool:
        """Whether the request may succeed if sent again."""
        return self.kind in RETRYABLE_KINDS

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, status={self.status!r}, message={self.message!r})"


class RateLimitError(ModelError):
    """Too many requests (HTTP 429)."""

    kind: ErrorKind = "rate_limit"


class OverloadedError(ModelError):
    """The provider is temporarily overloaded (HTTP 529, 503)."""

    kind: ErrorKind = "overloaded"


class RequestTimeoutError(ModelError):
    """The request took longer than its timeout."""

    kind: ErrorKind = "timeout"


class StreamIdleError(ModelError):
    """The stream sent no bytes for longer than the idle limit."""

    kind: ErrorKind = "stream_idle"


class NetworkError(ModelError):
    """The connection failed or broke."""

    kind: ErrorKind = "network"


class AuthError(ModelError):
    """Missing or rejected credentials (HTTP 401, 403)."""

    kind: ErrorKind = "auth"


class ContextOverflowError(ModelError):
    """The request does not fit the model's context window."""

    kind: ErrorKind = "context_overflow"


class InvalidRequestError(ModelError):
    """The provider rejected the request as malformed (HTTP 400, 404, 422)."""

    kind: ErrorKind = "invalid_request"


class ContentFilterError(ModelError):
    """The provider refused or filtered the response."""

    kind: ErrorKind = "content_filter"


class ServerError(ModelError):
    """The provider failed (HTTP 5xx)."""

    kind: ErrorKind = "server"


# Every kind's class is defined above, and nothing else subclasses ModelError yet.
_BY_KIND: dict[str, type[ModelError]] = {cls.kind: cls for cls in ModelError.__subclasses__()}


def error_for_kind(kind: str) -> type[ModelError]:
    """The exception class for an error kind (``ModelError`` for unknown kinds)."""
    return _BY_KIND.get(kind, ModelError)


def exception_text(exc: BaseException) -> str:
    """How an exception is reported wherever ketch turns one into text (model errors,
    tool error results, a run's error): ``Type: message`` as the last line of a Python
    traceback reads, or the type name alone when the message is empty or cannot be
    rendered (a failing ``__str__`` never raises out of here)."""
    name = type(exc).__name__
    try:
        text = str(exc)
    except Exception:
        text = ""
    return f"{name}: {text}" if text else name
