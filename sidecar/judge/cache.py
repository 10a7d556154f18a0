"""Bounded LRU of judge results keyed by ``JudgeRequest.cache_key``.

At-least-once delivery replays traces after a crash or rebalance; the cache
turns those replays (and identical cases) into one model call. The key leaves
the nonce out, so a replay with a fresh nonce still hits.

Used from one event loop; there is no locking. What to cache is the caller's
choice: results of transport failures or open breakers should not be put,
or the error would outlive the outage.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Generic, TypeVar

V = TypeVar("V")

DEFAULT_MAX_ENTRIES = 10_000


class VerdictCache(Generic[V]):
    """LRU map from cache key to value with hit, miss and eviction counters."""

    def __init__(self, max_entries: int = DEFAULT_MAX_ENTRIES) -> None:
        if max_entries < 1:
            raise ValueError("max_entries must be at least 1")
        self.max_entries = max_entries
        self._entries: OrderedDict[str, V] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.evictions = 0

    def get(self, key: str) -> V | None:
        """The cached value (now most recently used), or ``None``; counts a hit or a miss."""
        try:
            value = self._entries[key]
        except KeyError:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return value

    def put(self, key: str, value: V) -> None:
        """Store ``value``; the least recently used entry goes when the cache is full."""
        if key in self._entries:
            self._entries.move_to_end(key)
        self._entries[key] = value
        while len(self._entries) > self.max_entries:
            self._entries.popitem(last=False)
            self.evictions += 1

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        # A membership test is not a lookup: it neither counts nor refreshes.
        return key in self._entries
