"""White-box test: imports ketch implementation modules (private) directly.

extend_with_room: the same items as list.extend, with room left after a large batch."""

from __future__ import annotations

import sys

from ketch.llm._lists import extend_with_room
from ketch.llm._providers.wire_cache import WireItems


def test_the_items_are_those_extend_gives() -> None:
    cases: list[tuple[list[int], list[int]]] = [([], []), ([1], [2, 3]), (list(range(10)), list(range(1000)))]
    for start, more in cases:
        items = list(start)
        extend_with_room(items, more)
        assert items == [*start, *more]
    items = [7]
    extend_with_room(items, iter(range(5000)))  # an iterator, read once
    assert items == [7, *range(5000)]


def test_after_a_large_batch_single_additions_do_not_move_the_list() -> None:
    items: list[int] = []
    extend_with_room(items, range(10_000))
    size = sys.getsizeof(items)
    for i in range(1_000):
        items.append(i)
    assert sys.getsizeof(items) == size
    plain: list[int] = []
    plain.extend(range(10_000))
    size = sys.getsizeof(plain)
    plain.append(0)
    assert sys.getsizeof(plain) > size  # what the room avoids


def test_a_subclass_is_grown_with_lists_own_methods() -> None:
    items = WireItems()
    items._json = bytearray(b"{}")  # a carried run that list changes through WireItems would drop
    extend_with_room(items, [{"n": i} for i in range(1000)])
    assert len(items) == 1000 and items[-1] == {"n": 999}
    assert items._json is not None
