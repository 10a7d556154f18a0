from __future__ import annotations

import pytest

from sidecar.judge.cache import DEFAULT_MAX_ENTRIES, VerdictCache


def test_default_bound() -> None:
    assert VerdictCache[str]().max_entries == DEFAULT_MAX_ENTRIES == 10_000


def test_hit_and_miss_are_counted() -> None:
    cache: VerdictCache[str] = VerdictCache(max_entries=4)
    assert cache.get("k") is None
    cache.put("k", "v")
    assert cache.get("k") == "v"
    assert cache.get("k") == "v"
    assert (cache.hits, cache.misses, cache.evictions, len(cache)) == (2, 1, 0, 1)


@pytest.mark.parametrize(
    ("operations", "kept", "evictions"),
    [
        pytest.param(["put a", "put b", "put c"], ["b", "c"], 1, id="oldest-goes"),
        pytest.param(["put a", "put b", "get a", "put c"], ["a", "c"], 1, id="get-refreshes"),
        pytest.param(["put a", "put b", "put a", "put c"], ["a", "c"], 1, id="put-refreshes"),
        pytest.param(["put a", "put a", "put a"], ["a"], 0, id="overwrite-does-not-evict"),
        pytest.param(
            ["put a", "put b", "put c", "put d"], ["c", "d"], 2, id="each-eviction-counted"
        ),
        pytest.param(
            ["put a", "has b", "has a", "put b", "put c"],
            ["b", "c"],
            1,
            id="contains-does-not-refresh",
        ),
    ],
)
def test_lru_order(operations: list[str], kept: list[str], evictions: int) -> None:
    cache: VerdictCache[int] = VerdictCache(max_entries=2)
    for number, operation in enumerate(operations):
        verb, key = operation.split()
        if verb == "put":
            cache.put(key, number)
        elif verb == "get":
            cache.get(key)
        else:
            _ = key in cache
    assert [key for key in "abcd" if key in cache] == kept
    assert cache.evictions == evictions
    assert len(cache) <= cache.max_entries


def test_membership_is_not_a_lookup() -> None:
    cache: VerdictCache[str] = VerdictCache()
    cache.put("k", "v")
    assert "k" in cache
    assert "x" not in cache
    assert (cache.hits, cache.misses) == (0, 0)


def test_overwrite_replaces_value() -> None:
    cache: VerdictCache[str] = VerdictCache(max_entries=1)
    cache.put("k", "old")
    cache.put("k", "new")
    assert cache.get("k") == "new"


@pytest.mark.parametrize("bound", [0, -1])
def test_bound_must_be_positive(bound: int) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        VerdictCache[str](max_entries=bound)
