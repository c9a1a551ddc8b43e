"""A minimal sorted list of unique, totally ordered keys (bisect over a Python list).

Insertion and removal are a binary search plus one ``memmove``: effectively O(log n) at
the sizes an in-process backend holds, with no third-party dependency.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Iterator
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=tuple[Any, ...])


class SortedKeys(Generic[K]):
    """Unique tuple keys kept in ascending order."""

    __slots__ = ("_items",)

    def __init__(self) -> None:
        self._items: list[K] = []

    def __len__(self) -> int:
        return len(self._items)

    def __iter__(self) -> Iterator[K]:
        return iter(self._items)

    def add(self, key: K) -> None:
        items = self._items
        if not items or items[-1] < key:
            items.append(key)  # the common case: keys mostly arrive in order
        else:
            insort(items, key)

    def discard(self, key: K) -> None:
        items = self._items
        index = bisect_left(items, key)
        if index < len(items) and items[index] == key:
            del items[index]

    def first(self) -> K | None:
        return self._items[0] if self._items else None

    def last(self) -> K | None:
        return self._items[-1] if self._items else None

    def after(self, bound: K | None, *, descending: bool = False) -> Iterator[K]:
        """Keys strictly beyond ``bound`` in the walking direction (all keys when None).

        The caller must not mutate the list while iterating.
        """
        items = self._items
        if not descending:
            start = 0 if bound is None else bisect_right(items, bound)
            for index in range(start, len(items)):
                yield items[index]
        else:
            end = len(items) if bound is None else bisect_left(items, bound)
            for index in range(end - 1, -1, -1):
                yield items[index]
