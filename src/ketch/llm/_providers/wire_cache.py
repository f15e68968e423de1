"""Wire forms of a growing transcript, converted and JSON-encoded once per message.

An agent sends its whole transcript on every turn, and the transcript only grows. A
:class:`WireCache` (one per model) remembers, per transcript, the prepared messages
(:class:`~ketch.llm._handoff.Preparer`), the wire items they converted to and the JSON
of those items, so a turn prepares, converts and encodes only the messages added since
the last one. A transcript is found by the identity of its first message; it is taken
as grown when the messages seen last time are all still in place (the same objects, or
equal ones). Any other change (a message replaced or removed, as context strategies do)
converts it anew. Messages are never mutated, and cached wire items are never mutated
after they are handed out: a caller that changes an item must copy it first (and put
the copy in the list, which then no longer carries the item's JSON).

Transcripts of fewer than eight messages are converted afresh: for them that is faster
than the cache's bookkeeping (10.8 µs against 24 µs per request for a short tool-calling
exchange). Only a prefix that ends before a message other than a tool result is cached: the
converters group consecutive tool results, and the calls still waiting for results get
synthetic ones that a later message may replace. The messages after that point are
converted afresh on every turn. A :class:`Fold` may hold back more (a wire format that
merges consecutive items of one role cannot close its last item yet).

:meth:`WireCache.convert` returns a :class:`WireItems`: a list that carries the JSON
of the cached items it holds, which :func:`encode_body` uses instead of encoding them
again (a long one is handed over as a piece of the body of its own, not copied). Once
nothing but the cache holds the list handed out for a transcript, the next request of
that transcript reuses it (trimmed back to the cached items, then grown), so a turn does
not copy the references of the whole history into a new list. The check that a transcript only grew compares the two lists of
messages whole, which for a grown one is a pointer comparison per message and copies
nothing.
"""

from __future__ import annotations

import operator
import sys
from collections.abc import Callable
from collections.abc import Iterable
from collections.abc import Sequence
from typing import Any
from typing import Protocol
from typing import Self
from typing import SupportsIndex
from typing import overload

import msgspec

from .._handoff import Preparer
from .._handoff import prepare_messages
from .._lists import extend_with_room
from .._messages import Message
from .._messages import ToolResultMessage
from .._messages import encode_json
from .._model import Model


class _WireModel(Model, Protocol):
    """What :meth:`WireCache.items_for` reads of a model (an ``HTTPModel``): its
    provider, api and id, and its request rewrite hook."""

    @property
    def rewrite(self) -> object | None: ...


Converter = Callable[[list[Message]], list[dict[str, Any]]]
"""Prepared messages to wire items; must depend only on the messages and the settings
the cache is keyed by."""

_SIZE = 16  # transcripts remembered per model (a model may serve several agents at once)
_MIN_CACHED = 8  # shorter transcripts are converted afresh (measured: faster below about 10)
# Messages remembered per model, all transcripts together (about 35 MB of wire items
# plus their JSON, about the size of the requests).
_BUDGET = 100_000



def _encode(value: Any) -> bytes:
    """``msgspec.json.encode``; a lone surrogate in a string (JSON has none) becomes U+FFFD."""
    return encode_json(value)


# Carried JSON from this size on is sent as a piece of its own rather than copied in.
_SPLIT = 1 << 16
_MARK = msgspec.Raw(b"\x00")


class _Slot:
    __slots__ = ("out",)

    out: list[int]


def _unshared_refcount() -> int:
    """What ``sys.getrefcount`` reports, in :meth:`WireCache._convert`'s pattern (a slot
    and a local), for a list nothing else holds: 3, or 2 where loading a local does
    not count (CPython 3.14)."""
    slot = _Slot()
    slot.out = []
    out = slot.out
    return sys.getrefcount(out)


# Reference counts tell that nothing else holds a list only on CPython with the GIL.
_REUSE = sys.implementation.name == "cpython" and getattr(sys, "_is_gil_enabled", lambda: True)()
_UNSHARED = _unshared_refcount()


class Fold(Protocol):
    """A conversion whose items depend on earlier messages, carried as state from one
    part of a transcript to the next (one fold per cached transcript)."""

    def commit(self, messages: list[Message]) -> tuple[list[dict[str, Any]], int]:
        """The wire items of the first ``k`` of ``messages`` and ``k``: items that no
        later message changes. The state moves past those ``k`` messages; the others
        come first in the next call."""
        ...

    def peek(self, messages: list[Message]) -> list[dict[str, Any]]:
        """The wire items of ``messages``, which follow the committed ones; the state
        stays as it is."""
        ...


class _Stateless:
    __slots__ = ("_converter",)

    def __init__(self, converter: Converter) -> None:
        self._converter = converter

    def commit(self, messages: list[Message]) -> tuple[list[dict[str, Any]], int]:
        return self._converter(messages), len(messages)

    def peek(self, messages: list[Message]) -> list[dict[str, Any]]:
        return self._converter(messages)


class WireItems(list[dict[str, Any]]):
    """Wire items that may carry the JSON of a run of them (the cached ones), which
    :func:`encode_body` uses instead of encoding those items again.

    A change to the list that could touch that run (replacing, removing or reordering
    items in it, or any slice assignment, ``remove``, ``clear``, ``sort``, ``reverse``,
    ``*=``) drops the JSON, and the list is then encoded like any other; items added
    around the run (``append``, ``extend``, ``+=``, ``insert``) and items replaced or
    removed outside it keep it, the run moving with its items. Copies and pickles are
    plain lists. Changing an item itself is not seen: cached items must not be changed.
    """

    __slots__ = ("_count", "_json", "_size", "_start", "_wire")

    def __init__(self, items: Iterable[dict[str, Any]] = ()) -> None:
        super().__init__(items)
        self._json: bytearray | None = None
        self._wire: list[dict[str, Any]] = []
        self._start = 0
        self._count = 0
        self._size = 0

    @property
    def encoded_range(self) -> range | None:
        """The positions of the items whose JSON the list carries; None when it carries none."""
        if self._json is None:
            return None
        return range(self._start, self._start + self._count)

    def _carry(self, wire: list[dict[str, Any]], json: bytearray, start: int) -> None:
        # ``json[:len(json)]`` now encodes ``wire``, which is ``self[start:start + len(wire)]``;
        # later both may grow, the prefix staying as it is.
        self._json = json
        self._wire = wire
        self._start = start
        self._count = len(wire)
        self._size = len(json)

    def _carried(self) -> tuple[list[dict[str, Any]], memoryview, list[dict[str, Any]]] | None:
        """The items before the carried run, a view of its JSON, and the items after it."""
        json = self._json
        if json is None:
            return None
        start, count, wire = self._start, self._count, self._wire
        stop = start + count
        # A cheap guard against changes made behind the list methods' backs.
        if len(self) < stop or self[start] is not wire[0] or self[stop - 1] is not wire[count - 1]:
            return None
        return self[:start], memoryview(json)[: self._size], self[stop:]

    def _index(self, index: SupportsIndex) -> int:
        i = operator.index(index)
        return i + len(self) if i < 0 else i

    def _removed(self, i: int) -> None:
        # The item at ``i`` (0 <= i, counted before the removal) is gone.
        if self._json is not None:
            if i < self._start:
                self._start -= 1
            elif i < self._start + self._count:
                self._json = None

    @overload
    def __setitem__(self, key: SupportsIndex, value: dict[str, Any], /) -> None: ...

    @overload
    def __setitem__(self, key: slice, value: Iterable[dict[str, Any]], /) -> None: ...

    def __setitem__(self, key: SupportsIndex | slice, value: Any, /) -> None:
        if self._json is not None:
            if isinstance(key, slice):
                self._json = None
            else:
                i = self._index(key)
                if self._start <= i < self._start + self._count:
                    self._json = None
        super().__setitem__(key, value)

    def __delitem__(self, key: SupportsIndex | slice, /) -> None:
        if isinstance(key, slice):
            super().__delitem__(key)
            self._json = None
            return
        i = self._index(key)
        super().__delitem__(key)
        self._removed(i)

    def pop(self, index: SupportsIndex = -1, /) -> dict[str, Any]:
        """Remove and return the item at ``index`` (the last by default)."""
        i = self._index(index)
        item = super().pop(index)
        self._removed(i)
        return item

    def insert(self, index: SupportsIndex, item: dict[str, Any], /) -> None:
        """Insert ``item`` before ``index``."""
        i = min(max(self._index(index), 0), len(self))
        super().insert(index, item)
        if self._json is not None:
            if i <= self._start:
                self._start += 1
            elif i < self._start + self._count:
                self._json = None

    def __imul__(self, times: SupportsIndex, /) -> Self:
        self._json = None
        super().__imul__(times)
        return self

    def remove(self, item: dict[str, Any], /) -> None:
        """Remove the first item equal to ``item``."""
        self._json = None
        super().remove(item)

    def clear(self) -> None:
        """Remove every item."""
        self._json = None
        super().clear()

    def sort(self, *args: Any, **kwargs: Any) -> None:
        """Sort in place (see :meth:`list.sort`)."""
        self._json = None
        super().sort(*args, **kwargs)

    def reverse(self) -> None:
        """Reverse in place."""
        self._json = None
        super().reverse()

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        return (list, (list(self),))


def encode_body(body: dict[str, Any]) -> list[bytes | memoryview]:
    """The JSON of ``body`` as pieces to send one after the other: together they are
    ``msgspec.json.encode(body)``, byte for byte. The JSON that a top-level
    :class:`WireItems` value carries is not encoded again: a short one is copied in, a
    long one is a piece of its own, a view of the cache's buffer that nothing but the
    socket copies. Other bodies are one piece."""
    data, split = _encode_spliced(body, _SPLIT)
    if split is None:
        return [data]
    # msgspec escapes control characters in strings, so the mark's NUL byte is the only
    # one, unless a Raw value of the caller's holds one too.
    at = data.find(0)
    if at < 0 or data.find(0, at + 1) >= 0:
        return [_encode_spliced(body, None)[0]]
    whole = memoryview(data)
    return [whole[:at], split, whole[at + 1 :]]


def _encode_spliced(body: dict[str, Any], split_from: int | None) -> tuple[bytes, memoryview | None]:
    """The body's JSON with carried JSON copied in, and the view of the first carried
    JSON of at least ``split_from`` bytes, which is left out (its place marked by a NUL)."""
    spliced: dict[str, Any] | None = None
    split: memoryview | None = None
    if type(body) is dict:
        for key, value in body.items():
            if type(value) is WireItems:
                carried = value._carried()
                if carried is not None:
                    before, view, after = carried
                    if spliced is None:
                        spliced = body.copy()
                    if split is None and split_from is not None and len(view) >= split_from:
                        split = view
                        spliced[key] = [*before, _MARK, *after]
                    else:
                        spliced[key] = [*before, msgspec.Raw(view), *after]
    if spliced is None:
        return _encode(body), None
    try:
        return _encode(spliced), split
    finally:
        # Raw values hold views of the cache's buffers, which cannot grow while viewed.
        spliced = None


class _Entry:
    __slots__ = ("done", "first", "fold", "json", "out", "preparer", "settings", "sources", "wire")

    def __init__(self, first: Message, settings: object, preparer: Preparer, fold: Fold | None) -> None:
        self.first = first
        self.sources: list[Message] = []  # the messages converted so far
        self.settings = settings
        self.preparer = preparer
        self.fold = fold
        self.wire: list[dict[str, Any]] = []
        self.json: bytearray | None = bytearray()  # the items of ``wire`` joined by commas
        self.done = 0  # prepared messages whose wire items are in ``wire``
        self.out: WireItems | None = None  # the list handed out last

    def add(self, items: list[dict[str, Any]]) -> None:
        extend_with_room(self.wire, items)
        json = self.json
        if json is None:
            return
        try:
            array = _encode(items)
        except Exception:  # an item the encoder refuses: this transcript's requests will say so
            self.json = None
            return
        try:
            _append(json, array)
        except BufferError:  # being copied into a request elsewhere: continue in a copy
            self.json = json = bytearray(json)
            _append(json, array)


def _append(json: bytearray, array: bytes) -> None:
    """Add the items of the JSON ``array`` to the comma-joined items in ``json``."""
    n = len(json)
    if n:
        json += memoryview(array)[:-1]
        json[n] = 44  # the array's "[" becomes ","
    else:
        json += memoryview(array)[1:-1]
    if len(array) > len(json) >> 4 and len(json) >= _SPLIT:
        # A large addition (a whole history converted at once) leaves the buffer at its
        # exact size; room to spare lets the next turns' small additions grow it in
        # place instead of moving it. Shortening a bytearray keeps its memory.
        spare = len(json) >> 3
        json += bytes(spare)
        del json[-spare:]


class WireCache:
    """The converted transcripts of one model (see the module documentation)."""

    __slots__ = ("_entries", "_held")

    def __init__(self) -> None:
        self._entries: dict[int, _Entry] = {}
        self._held = 0  # messages remembered, all entries together

    def convert(
        self,
        messages: Sequence[Message],
        settings: object,
        preparer: Callable[[], Preparer],
        converter: Converter,
    ) -> list[dict[str, Any]]:
        """The wire items for ``messages``: a new :class:`WireItems`, equal to
        ``converter(prepare_messages(messages, ...))``. ``settings`` holds everything
        the result depends on besides the messages (compared with ``==``);
        ``preparer`` makes an empty :class:`~ketch.llm._handoff.Preparer`."""
        return self._convert(messages, settings, preparer, None, converter)

    def items_for(
        self,
        model: _WireModel,
        messages: Sequence[Message],
        settings: object,
        converter: Converter,
        normalize_id: Callable[[str], str] | None = None,
    ) -> list[dict[str, Any]]:
        """``converter(prepare_messages(messages, ...))`` for ``model``, from the cache
        (keyed by ``settings`` and the model's provider, api and id) unless the model has
        a rewrite hook: that may change the body in place, so it gets freshly converted
        items."""
        provider, api, id = model.provider, model.api, model.id
        if model.rewrite is not None:
            prepared = prepare_messages(messages, provider=provider, api=api, model=id, normalize_id=normalize_id)
            return converter(prepared)
        return self.convert(
            messages,
            (settings, provider, api, id),
            lambda: Preparer(provider=provider, api=api, model=id, normalize_id=normalize_id),
            converter,
        )

    def convert_folded(
        self,
        messages: Sequence[Message],
        settings: object,
        preparer: Callable[[], Preparer],
        fold: Callable[[], Fold],
    ) -> list[dict[str, Any]]:
        """Like :meth:`convert`, for a conversion that carries state from message to
        message: ``fold`` makes an empty :class:`Fold`, kept with the transcript."""
        return self._convert(messages, settings, preparer, fold, None)

    def _convert(
        self,
        messages: Sequence[Message],
        settings: object,
        preparer: Callable[[], Preparer],
        fold: Callable[[], Fold] | None,
        converter: Converter | None,
    ) -> WireItems:
        n = len(messages)
        if n < _MIN_CACHED:
            # A short transcript converts faster than the cache's bookkeeping runs.
            fresh = preparer()
            fresh.feed(messages)
            ready = fresh.out
            ready.extend(fresh.tail())
            if not ready:
                return WireItems()
            if fold is not None:
                return WireItems(fold().peek(ready))
            assert converter is not None
            return WireItems(converter(ready))
        first = messages[0]
        entries = self._entries
        key = id(first)
        entry = entries.get(key)
        if entry is not None:
            sources = entry.sources
            seen = len(sources)
            same = False
            if n >= seen and entry.first is first:
                try:
                    if entry.settings == settings:
                        # The new messages go into ``sources`` first, so that the check is
                        # one comparison of two whole lists (no copy of the history), which
                        # compares identities first: a pointer comparison per message.
                        if n > seen:
                            sources.extend(messages[seen:])
                        same = (messages if type(messages) is list else list(messages)) == sources
                except Exception:  # a message holding values that refuse comparison
                    pass
            if same:
                entries[key] = entries.pop(key)  # the most recently used last
                entry.preparer.feed(messages, seen)
                self._held += n - seen
            else:
                del entries[key]
                self._held -= seen
                entry = None
        if entry is None:
            entry = entries[key] = _Entry(first, settings, preparer(), None if fold is None else fold())
            entry.preparer.feed(messages, 0)
            extend_with_room(entry.sources, messages)
            self._held += n
        while len(entries) > 1 and (len(entries) > _SIZE or self._held > _BUDGET):
            self._held -= len(entries.pop(next(iter(entries))).sources)
        steps = entry.fold
        if steps is None:
            assert converter is not None
            steps = _Stateless(converter)
        prep = entry.preparer
        prepared = prep.out
        split = len(prepared)
        done = entry.done
        # The fresh part starts at the last message that is not a tool result.
        while split > done and type(prepared[split - 1]) is ToolResultMessage:
            split -= 1
        if split > done:
            split -= 1
        if split > done:
            items, used = steps.commit(prepared[done:split])
            if items:
                entry.add(items)
            entry.done = done = done + used
        wire = entry.wire
        out = entry.out
        # The list handed out last is reused when nothing but the entry holds it any
        # more (see _unshared_refcount): then no one can see it change, and the request
        # does not copy the cached items' references into a new list (and free them
        # again after the response).
        if out is not None and _REUSE and out._json is not None and sys.getrefcount(out) == _UNSHARED:
            list.__delitem__(out, slice(out._start + out._count, None))
            list.__delitem__(out, slice(0, out._start))
            list.extend(out, wire[out._count :])
            # A change made behind the list methods' backs shows here (identities first).
            if out != wire:
                out = None
        else:
            out = None
        if out is None:
            out = entry.out = WireItems()
            extend_with_room(out, wire)
        rest = prepared[done:]
        rest.extend(prep.tail())
        if rest:
            list.extend(out, steps.peek(rest))
        json = entry.json
        if wire and json is not None:
            out._carry(wire, json, 0)
        else:
            out._json = None
        return out
