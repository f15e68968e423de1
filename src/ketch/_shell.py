"""Shell text scanning shared by the bash tool's read-only check
(:mod:`ketch.tools._bash`) and the permission layer's bash parser
(:mod:`ketch.permissions._shell`). It imports nothing of ketch."""

from __future__ import annotations


def matching_paren(s: str, open_at: int) -> int:
    """The index of the ``)`` that closes the ``(`` at ``s[open_at]``, quoted text and
    escaped characters skipped; -1 when a quote or the parenthesis is left open."""
    depth = 0
    i = open_at
    n = len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            i += 2
            continue
        if c == "'":
            end = s.find("'", i + 1)
            if end < 0:
                return -1
            i = end + 1
            continue
        if c == '"':
            i += 1
            while i < n and s[i] != '"':
                i += 2 if s[i] == "\\" else 1
            i += 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return i
        i += 1
    return -1
