"""The one-line forms of tool calls and results that the text output (``ketch run``) and
``ketch sessions show`` print: ``→ <tool> <main argument>`` and the first lines of a
result under it (``  ⎿ …``)."""

from __future__ import annotations

from typing import Any

_MAIN_ARGUMENTS = ("command", "pattern", "path", "file_path", "query", "url")
_CALL_LINE_CHARS = 72


def tool_call_line(name: str, args: Any) -> str:
    """``→ <tool> <main argument>`` on one line: the argument is the first of
    ``command``, ``pattern``, ``path``, ``file_path``, ``query`` or ``url`` (else the first
    string argument), its first line, shortened to fit; an ``ls`` of the root shows ``.``."""
    main = ""
    if isinstance(args, dict):
        value = next((args[k] for k in _MAIN_ARGUMENTS if isinstance(args.get(k), str) and args[k].strip()), None)
        if value is None:
            value = next((v for v in args.values() if isinstance(v, str) and v.strip()), None)
        if value is None and name == "ls":
            value = "."
        if value is not None:
            lines = value.strip().splitlines()
            main = lines[0] if lines else ""
            if len(lines) > 1 or len(main) > _CALL_LINE_CHARS:
                main = main[:_CALL_LINE_CHARS].rstrip() + " …"
    return f"→ {name} {main}" if main else f"→ {name}"


_PREVIEW_LINES = 4


def result_preview(text: str, is_error: bool) -> list[str]:
    """The first lines of a tool's result, indented under its call line (``  ⎿ …``), at
    most :data:`_PREVIEW_LINES` of them and each cut to fit, then ``… +N lines``."""
    lines = text.splitlines() or ["(no output)"]
    shown = [line if len(line) <= _CALL_LINE_CHARS else line[:_CALL_LINE_CHARS].rstrip() + " …" for line in lines[:_PREVIEW_LINES]]
    if len(lines) > _PREVIEW_LINES:
        shown.append(f"… +{len(lines) - _PREVIEW_LINES} lines")
    mark = "  ⎿ error: " if is_error else "  ⎿ "
    return [(mark if i == 0 else "    ") + line for i, line in enumerate(shown)]
