"""A least-recently-used cache bounded by the approximate bytes its values hold, or by how many it holds.

What a long-running process keeps warm (a document's index, its answering context) is measured, not counted: one
book's index weighs as much as a thousand notes'. A value's size is measured again whenever it is used, as indexes
grow after they are cached (a retriever's vectors load on first use). The value just used always stays, even alone
over the bound: it is the one being worked with.

Where the values weigh alike (a parsed setting, a file's hash, an open ledger), :meth:`SizedLRU.counted` bounds
the number of entries instead: each weighs 1. It is the one LRU type of lcrag: every cache that keeps the recently
used is one, with its bound a setting or a named default."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class SizedLRU(Generic[K, V]):
    """At most ``max_bytes`` of values (as ``sizeof`` measures them); the least recently used go first."""

    def __init__(self, max_bytes: int, sizeof: Callable[[V], int]):
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be >= 0, not {max_bytes}")
        self.max_bytes = max_bytes
        self._sizeof = sizeof
        self._entries: OrderedDict[K, tuple[V, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self._building: dict[K, list] = {}  # key -> [its build lock, threads waiting on it]

    @classmethod
    def counted(cls, max_items: int) -> SizedLRU[K, V]:
        """At most ``max_items`` entries (each weighs 1), the least recently used going first."""
        if max_items < 1:
            raise ValueError(f"max_items must be >= 1, not {max_items}")
        return cls(max_items, _one)

    @property
    def bytes(self) -> int:
        """The cached values' size when each was last used."""
        return self._bytes

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def keys(self) -> list[K]:
        """The keys, least recently used first."""
        with self._lock:
            return list(self._entries)

    def values(self) -> list[V]:
        """The values, least recently used first."""
        with self._lock:
            return [value for value, _ in self._entries.values()]

    def items(self) -> list[tuple[K, V]]:
        """The keys and values, least recently used first."""
        with self._lock:
            return [(key, value) for key, (value, _) in self._entries.items()]

    def pop(self, key: K) -> V | None:
        """Take ``key``'s value out of the cache (None when it holds none)."""
        with self._lock:
            entry = self._entries.pop(key, None)
            if entry is None:
                return None
            self._bytes -= entry[1]
            return entry[0]

    def get(self, key: K) -> V | None:
        """The value (now the most recently used, its size measured again), or None."""
        with self._lock:
            if key not in self._entries:
                return None
            value = self._entries[key][0]
            self._store(key, value)
            return value

    def put(self, key: K, value: V) -> V:
        """Keep ``value`` as the most recently used, dropping the least recently used beyond the bound."""
        with self._lock:
            self._store(key, value)
            return value

    def get_or_put(self, key: K, make: Callable[[], V]) -> V:
        """The value kept under ``key``, else ``make()`` kept: made once when threads ask for it at once (the others
        wait for it), and without holding the cache's lock meanwhile, so other keys are served while it is made."""
        value = self.get(key)
        if value is not None:
            return value
        with self._lock:
            building = self._building.setdefault(key, [threading.Lock(), 0])
            building[1] += 1
        try:
            with building[0]:
                value = self.get(key)
                if value is None:
                    value = self.put(key, make())
                return value
        finally:
            with self._lock:
                building[1] -= 1
                if building[1] == 0:
                    self._building.pop(key, None)

    def drop(self, matches: Callable[[K], bool]) -> int:
        """Drop every entry whose key ``matches``; how many were dropped."""
        with self._lock:
            gone = [key for key in self._entries if matches(key)]
            for key in gone:
                self._bytes -= self._entries.pop(key)[1]
            return len(gone)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._bytes = 0

    def _store(self, key: K, value: V) -> None:
        if key in self._entries:
            self._bytes -= self._entries.pop(key)[1]
        size = max(0, int(self._sizeof(value)))
        self._entries[key] = (value, size)
        self._bytes += size
        while self._bytes > self.max_bytes and len(self._entries) > 1:
            self._bytes -= self._entries.popitem(last=False)[1][1]


def _one(_value: object) -> int:
    """The weight of every value in a cache bounded by count."""
    return 1
