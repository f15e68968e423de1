"""White-box test: imports ketch implementation modules (private) directly.

exception_text: the one rendering of an exception as text (model errors, tool errors, run errors);
error_for_kind: each error kind's exception class."""

from __future__ import annotations

from typing import get_args

import pytest

from ketch.llm import ErrorKind
from ketch.llm import ModelError
from ketch.llm._errors import AuthError
from ketch.llm._errors import ContentFilterError
from ketch.llm._errors import ContextOverflowError
from ketch.llm._errors import InvalidRequestError
from ketch.llm._errors import NetworkError
from ketch.llm._errors import OverloadedError
from ketch.llm._errors import RateLimitError
from ketch.llm._errors import RequestTimeoutError
from ketch.llm._errors import ServerError
from ketch.llm._errors import StreamIdleError
from ketch.llm._errors import error_for_kind
from ketch.llm._errors import exception_text


class _BrokenStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no text")


class _Custom(Exception):
    pass


@pytest.mark.parametrize(
    ("exc", "text"),
    [
        (RuntimeError("disk on fire"), "RuntimeError: disk on fire"),
        (ValueError("bad transform"), "ValueError: bad transform"),
        (KeyError("path"), "KeyError: 'path'"),  # the bare message ('path') would not say what failed
        (TimeoutError(), "TimeoutError"),
        (RuntimeError(""), "RuntimeError"),
        (_Custom("two\nlines"), "_Custom: two\nlines"),
        (_BrokenStr("x"), "_BrokenStr"),
    ],
)
def test_exception_text_is_type_and_message(exc: BaseException, text: str) -> None:
    assert exception_text(exc) == text


def test_error_for_kind_names_each_kinds_class() -> None:
    expected = {
        "rate_limit": RateLimitError,
        "overloaded": OverloadedError,
        "timeout": RequestTimeoutError,
        "stream_idle": StreamIdleError,
        "network": NetworkError,
        "auth": AuthError,
        "context_overflow": ContextOverflowError,
        "invalid_request": InvalidRequestError,
        "content_filter": ContentFilterError,
        "server": ServerError,
        "unknown": ModelError,
    }
    assert set(expected) == set(get_args(ErrorKind))
    for kind, cls in expected.items():
        assert error_for_kind(kind) is cls
        assert cls.kind == kind
    assert error_for_kind("no_such_kind") is ModelError
