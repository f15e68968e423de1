"""Retry policy: exponential backoff with jitter that honours the server's Retry-After."""

from __future__ import annotations

import random
import time
from collections.abc import Mapping
from email.utils import parsedate_to_datetime

import msgspec


class RetryPolicy(msgspec.Struct, kw_only=True, frozen=True):
    """How a failed request is retried.

    ``max_attempts`` counts every attempt including the first (1 = never retry). The
    n-th wait is ``base_delay * multiplier**(n-1)`` capped at ``max_delay`` and reduced
    by a random fraction of up to ``jitter``. A delay the server asks for (Retry-After)
    is used as is; when it exceeds ``max_delay`` the request fails at once instead of
    waiting.
    """

    max_attempts: int = 4
    base_delay: float = 1.0
    multiplier: float = 2.0
    max_delay: float = 60.0
    jitter: float = 0.25

    def delay(self, attempt: int, retry_after: float | None = None) -> float | None:
        """Seconds to wait after failed attempt number ``attempt`` (1-based), or None
        when no retry should follow (attempts used up or the server's wait too long)."""
        if attempt >= self.max_attempts:
            return None
        if retry_after is not None:
            return None if retry_after > self.max_delay else max(0.0, retry_after)
        backoff = min(self.max_delay, self.base_delay * self.multiplier ** (attempt - 1))
        if self.jitter > 0:
            backoff *= 1.0 - self.jitter * random.random()
        return backoff


NO_RETRY = RetryPolicy(max_attempts=1)
"""A policy that never retries."""


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """The wait in seconds a response asks for: ``retry-after-ms``, then ``retry-after``
    (seconds or an HTTP date). None when absent or unparseable."""
    if not headers:
        return None
    ms = _get(headers, "retry-after-ms")
    if ms is not None:
        try:
            value = float(ms) / 1000.0
        except ValueError:
            pass
        else:
            if value >= 0:
                return value
    raw = _get(headers, "retry-after")
    if raw is None:
        return None
    raw = raw.strip()
    try:
        seconds = float(raw)
    except ValueError:
        try:
            when = parsedate_to_datetime(raw)
        except (TypeError, ValueError, IndexError):
            return None
        if when is None:
            return None
        return max(0.0, when.timestamp() - (time.time() if now is None else now))
    return seconds if seconds >= 0 else None


def _get(headers: Mapping[str, str], name: str) -> str | None:
    value = headers.get(name)
    if value is None:
        for key, v in headers.items():
            if key.lower() == name:
                return v
    return value
