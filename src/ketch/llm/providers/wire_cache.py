"""Wire forms of a growing transcript, converted once per message.

An agent sends its whole transcript on every turn, and the transcript only grows. A
:class:`WireCache` (one per model) remembers, per transcript, the prepared messages
(:class:`~ketch.llm.handoff.Preparer`) and the wire items they converted to, so a turn
prepares and converts only the messages added since the last one. A transcript is
found by the identity of its first message; it is taken as grown when the messages
seen last time are all still in place (the same objects, or equal ones). Any other
change (a message replaced or removed, as context strategies do) converts it anew. Messages are never mutated, and cached wire items are never
mutated after they are handed out: a caller that changes an item must copy it first.

Only a prefix that ends before a message other than a tool result is cached: the
converters group consecutive tool results, and the calls still waiting for results get
synthetic ones that a later message may replace. The messages after that point are
converted afresh on every turn.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ..handoff import Preparer
from ..messages import Message, ToolResultMessage

__all__ = ["Converter", "WireCache"]

Converter = Callable[[list[Message]], list[dict[str, Any]]]
"""Prepared messages to wire items; must depend only on the messages and the settings
the cache is keyed by."""

_SIZE = 16  # transcripts remembered per model (a model may serve several agents at once)
_BUDGET = 100_000  # messages remembered per model, all transcripts together (about 35 MB)


class _Entry:
    __slots__ = ("done", "first", "preparer", "settings", "sources", "wire")

    def __init__(self, first: Message, settings: object, preparer: Preparer) -> None:
        self.first = first
        self.sources: list[Message] = []  # the messages converted so far
        self.settings = settings
        self.preparer = preparer
        self.wire: list[dict[str, Any]] = []
        self.done = 0  # prepared messages whose wire items are in ``wire``


class WireCache:
    """The converted transcripts of one model (see the module documentation)."""

    __slots__ = ("_entries",)

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}

    def convert(
        self,
        messages: Sequence[Message],
        settings: object,
        preparer: Callable[[], Preparer],
        converter: Converter,
    ) -> list[dict[str, Any]]:
        """The wire items for ``messages``: a new list, equal to
        ``converter(prepare_messages(messages, ...))``. ``settings`` holds everything
        the result depends on besides the messages (compared with ``==``);
        ``preparer`` makes an empty :class:`~ketch.llm.handoff.Preparer`."""
        n = len(messages)
        if not n:
            return []
        first = messages[0]
        entries = self._entries
        key = id(first)
        entry = entries.get(key)
        if entry is not None:
            seen = len(entry.sources)
            head = messages if n == seen else messages[:seen]
            if type(head) is not list:
                head = list(head)
            # List equality compares identities first: for a grown transcript this
            # is a pointer comparison per message.
            try:
                same = n >= seen and entry.first is first and entry.settings == settings and head == entry.sources
            except Exception:  # a message holding values that refuse comparison
                same = False
            if not same:
                entry = None
        if entry is None:
            entry = _Entry(first, settings, preparer())
        entries.pop(key, None)
        entries[key] = entry  # the most recently used last
        prep = entry.preparer
        seen = len(entry.sources)
        if n > seen:
            prep.feed(messages, seen)
            entry.sources.extend(messages[seen:])
        while len(entries) > 1 and (
            len(entries) > _SIZE or sum(len(e.sources) for e in entries.values()) > _BUDGET
        ):
            del entries[next(iter(entries))]
        prepared = prep.out
        split = len(prepared)
        done = entry.done
        # The fresh part starts at the last message that is not a tool result.
        while split > done and type(prepared[split - 1]) is ToolResultMessage:
            split -= 1
        if split > done:
            split -= 1
        if split > done:
            entry.wire.extend(converter(prepared[done:split]))
            entry.done = split
        rest = prepared[split:]
        rest.extend(prep.tail())
        return entry.wire + converter(rest) if rest else entry.wire[:]
