"""Docstring parsing: the summary paragraph and per-parameter descriptions (Google, NumPy, reST)."""

from __future__ import annotations

import dataclasses
import inspect
import re
from typing import Final

import msgspec


class Docstring(msgspec.Struct, frozen=True):
    """A parsed docstring: the first paragraph and per-parameter descriptions."""

    summary: str = ""
    params: dict[str, str] = msgspec.field(default_factory=dict)


_GOOGLE_PARAM_SECTIONS: Final = frozenset(
    {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments", "attributes", "other parameters"}
)
_GOOGLE_HEADER = re.compile(r"^([A-Za-z][A-Za-z ]*):\s*$")
_KNOWN_SECTIONS: Final = _GOOGLE_PARAM_SECTIONS | {
    "returns", "return", "yields", "yield", "raises", "raise", "examples", "example", "notes", "note",
    "see also", "warnings", "warning", "references", "todo", "methods",
}  # fmt: skip
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)$")
_NUMPY_ENTRY = re.compile(r"^(\*{0,2}\w+(?:\s*,\s*\*{0,2}\w+)*)\s*(?::.*)?$")
_NUMPY_RULE = re.compile(r"^\s*-{3,}\s*$")
_REST_FIELD = re.compile(r"^:(?:param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?\*{0,2}(\w+)\s*:\s*(.*)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _is_numpy_header(lines: list[str], i: int) -> bool:
    return i + 1 < len(lines) and bool(lines[i].strip()) and bool(_NUMPY_RULE.match(lines[i + 1]))


def _is_google_header(line: str) -> bool:
    m = _GOOGLE_HEADER.match(line.strip())
    return m is not None and m.group(1).strip().lower() in _KNOWN_SECTIONS


def parse_docstring(doc: str | None) -> Docstring:
    """Parse a Google, NumPy or reST (``:param x:``) docstring."""
    if not doc:
        return Docstring()
    lines = inspect.cleandoc(doc).splitlines()
    summary: list[str] = []
    for i, line in enumerate(lines):
        text = line.strip()
        if not text or _is_google_header(line) or _is_numpy_header(lines, i) or text.startswith(":"):
            break
        summary.append(text)
    params: dict[str, str] = {}
    _parse_rest(lines, params)
    _parse_google(lines, params)
    _parse_numpy(lines, params)
    return Docstring(summary=" ".join(summary), params=params)


def _join(parts: list[str]) -> str:
    return " ".join(p for p in (x.strip() for x in parts) if p)


def _parse_rest(lines: list[str], params: dict[str, str]) -> None:
    i = 0
    while i < len(lines):
        m = _REST_FIELD.match(lines[i].strip())
        i += 1
        if m is None:
            continue
        parts = [m.group(2)]
        while i < len(lines) and lines[i].strip() and not lines[i].strip().startswith(":") and _indent(lines[i]) > 0:
            parts.append(lines[i])
            i += 1
        params.setdefault(m.group(1), _join(parts))


def _parse_google(lines: list[str], params: dict[str, str]) -> None:
    i = 0
    while i < len(lines):
        line = lines[i]
        i += 1
        m = _GOOGLE_HEADER.match(line.strip())
        if m is None or m.group(1).strip().lower() not in _GOOGLE_PARAM_SECTIONS:
            continue
        # cleandoc leaves the body at column 0 when the docstring starts with the header.
        header_indent = _indent(line) if i > 1 else -1
        base: int | None = None
        name: str | None = None
        parts: list[str] = []
        while i < len(lines):
            cur = lines[i]
            if cur.strip() and (_indent(cur) <= header_indent or (header_indent < 0 and _is_google_header(cur))):
                break
            i += 1
            if not cur.strip():
                continue
            if base is None:
                base = _indent(cur)
            entry = _GOOGLE_ENTRY.match(cur.strip()) if _indent(cur) <= base else None
            if entry is not None:
                if name is not None:
                    params.setdefault(name, _join(parts))
                name, parts = entry.group(1), [entry.group(2)]
            elif name is not None:
                parts.append(cur)
        if name is not None:
            params.setdefault(name, _join(parts))


def _parse_numpy(lines: list[str], params: dict[str, str]) -> None:
    i = 0
    while i < len(lines):
        if not _is_numpy_header(lines, i):
            i += 1
            continue
        title = lines[i].strip().lower()
        base = _indent(lines[i])
        i += 2
        if title not in ("parameters", "other parameters", "attributes", "keyword arguments", "params"):
            continue
        names: list[str] = []
        parts: list[str] = []
        while i < len(lines) and not _is_numpy_header(lines, i):
            cur = lines[i]
            i += 1
            if not cur.strip():
                continue
            if _indent(cur) <= base:
                entry = _NUMPY_ENTRY.match(cur.strip())
                if entry is None:
                    continue
                for n in names:
                    params.setdefault(n, _join(parts))
                names = [n.strip().lstrip("*") for n in entry.group(1).split(",")]
                parts = []
            elif names:
                parts.append(cur)
        for n in names:
            params.setdefault(n, _join(parts))


def class_docstring(cls: type) -> Docstring:
    """The parsed docstring ``cls`` declares itself: not an inherited one, nor a dataclass's generated signature."""
    doc = cls.__dict__.get("__doc__")
    if not isinstance(doc, str):
        return Docstring()
    if dataclasses.is_dataclass(cls) and doc.startswith(f"{cls.__name__}("):
        return Docstring()
    return parse_docstring(doc)
