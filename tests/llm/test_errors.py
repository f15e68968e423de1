"""White-box test: imports ketch implementation modules (private) directly.

exception_text: the one rendering of an exception as text (model errors, tool errors, run errors)."""

from __future__ import annotations

import pytest

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
