"""Growing long lists in place."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import TypeVar

T = TypeVar("T")


def extend_with_room(items: list[T], more: Iterable[T]) -> None:
    """``list.extend(items, more)``, leaving room to grow when that added many at once.

    A list extended by a large batch (a whole history converted at once) is left at its
    exact size, so the next single additions would move all of it to a larger block;
    with room to spare (an eighth) they fit in place, as for a list grown one item at
    a time. Shortening a list by less than half keeps its memory. ``list``'s own methods
    are used, also on a subclass.
    """
    before = len(items)
    list.extend(items, more)
    added = len(items) - before
    if added > 64 and added > len(items) >> 3:
        spare = len(items) >> 3
        list.extend(items, repeat(items[-1], spare))
        list.__delitem__(items, slice(-spare, None))
