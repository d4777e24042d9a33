"""The byte-bounded LRU cache that keeps a pipeline's indexes and contexts (issue 25, item 5)."""

from __future__ import annotations

import pytest

from lcrag.lru import SizedLRU


class Grows:
    """A value whose size changes after it is cached, as an index's does when a retriever loads its vectors."""

    def __init__(self, size: int):
        self.size = size


def test_the_least_recently_used_go_first_once_over_the_bound():
    cache = SizedLRU(10, len)
    cache.put("a", "aaaa")
    cache.put("b", "bbbb")
    assert cache.get("a") == "aaaa"  # now the most recently used
    cache.put("c", "cccc")
    assert cache.keys() == ["a", "c"] and cache.bytes == 8
    assert cache.get("b") is None


def test_the_value_in_use_stays_even_alone_over_the_bound():
    cache = SizedLRU(3, len)
    cache.put("a", "aa")
    cache.put("big", "x" * 50)
    assert cache.keys() == ["big"] and cache.bytes == 50


def test_a_value_is_measured_again_when_used():
    cache = SizedLRU(100, lambda v: v.size)
    small, other = Grows(10), Grows(10)
    cache.put("small", small)
    cache.put("other", other)
    small.size = 95
    assert cache.get("small") is small  # measured at 95 now: "other" no longer fits
    assert cache.keys() == ["small"] and cache.bytes == 95


def test_drop_removes_what_matches_and_its_bytes():
    cache = SizedLRU(100, len)
    for key in [("index", "h1"), ("context", "h1"), ("index", "h2")]:
        cache.put(key, "xx")
    assert cache.drop(lambda key: key[1] == "h1") == 2
    assert cache.keys() == [("index", "h2")] and cache.bytes == 2 and ("index", "h1") not in cache
    cache.clear()
    assert len(cache) == 0 and cache.bytes == 0


def test_a_negative_bound_is_refused():
    with pytest.raises(ValueError, match="max_bytes"):
        SizedLRU(-1, len)
