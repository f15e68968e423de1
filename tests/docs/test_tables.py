"""The tables the docs print of the code's own tables are those tables: what a child agent
inherits (:data:`ketch.loop.INHERITANCE`, on the subagents page) and how each part of an
agent crosses into a durable run (:data:`ketch.temporal.DURABLE`, on the durable page).
A row added, removed or changed in the code fails here until the page says the same."""

from __future__ import annotations

import html
import re
from pathlib import Path

from ketch.loop import INHERITANCE
from ketch.temporal import DURABLE

DOCS = Path(__file__).resolve().parents[2] / "docs"
ROW = re.compile(r"^\| `(?P<name>[^`]+)` \| (?P<rule>[^|]+) \| (?P<note>.+) \|$")


def _rows(page: str, header: str) -> dict[str, tuple[str, str]]:
    """The rows of the table under ``header`` (its first line) on ``page``, by name."""
    lines = (DOCS / page).read_text().splitlines()
    start = lines.index(header)
    rows: dict[str, tuple[str, str]] = {}
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        m = ROW.match(line)
        assert m is not None, f"{page}: a row of the table is not `name` | rule | note: {line}"
        rows[m.group("name")] = (m.group("rule"), html.unescape(m.group("note")))
    return rows


def test_the_inheritance_table_is_the_code_table() -> None:
    rows = _rows("library/subagents.md", "| option | rule | why |")
    assert rows == {name: (rule.rule, rule.why) for name, rule in INHERITANCE.items()}


def test_the_durable_table_is_the_code_table() -> None:
    rows = _rows("library/durable.md", "| part | how | note |")
    expected = {name: (c.how + (f" ({c.where})" if c.where else ""), c.note) for name, c in DURABLE.items()}
    assert rows == expected
