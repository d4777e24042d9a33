"""The byte-bounded LRU cache that keeps a pipeline's indexes and contexts (issue 25, item 5)."""

from __future__ import annotations

import pytest

from lcrag.core.lru import SizedLRU


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


# -- counted: the one LRU type for caches whose values weigh alike (issue 45, item 6) --------------------------------
def test_a_counted_cache_keeps_at_most_its_number_of_entries_least_recently_used_first():
    cache = SizedLRU.counted(3)
    for key in "abcd":
        cache.put(key, key.upper())
        cache.get("a")  # kept in use
    assert len(cache) == 3 and cache.keys() == ["c", "d", "a"] and "b" not in cache
    assert cache.pop("c") == "C" and cache.pop("c") is None and cache.items() == [("d", "D"), ("a", "A")]
    with pytest.raises(ValueError):
        SizedLRU.counted(0)


def test_get_or_put_makes_a_missing_value_once_and_keeps_within_the_bound():
    cache, made = SizedLRU.counted(2), []
    for key in [1, 2, 1, 3, 1, 4]:
        cache.get_or_put(key, lambda key=key: made.append(key) or key * 10)
    assert made == [1, 2, 3, 4] and len(cache) == 2 and cache.keys() == [1, 4]


def test_a_pipelines_per_question_settings_strategies_and_corpora_are_bounded(monkeypatch):
    from lcrag.pipeline import pipeline as pipeline_module
    from lcrag.pipeline.pipeline import Pipeline, Settings

    monkeypatch.setattr(pipeline_module, "_CHOICES_KEPT", 4)
    monkeypatch.setattr(pipeline_module, "_STRATEGIES_KEPT", 3)
    monkeypatch.setattr(pipeline_module, "_CORPORA_KEPT", 2)
    pipe = Pipeline(Settings(cache=False))
    for k in range(1, 11):  # ten distinct sets of per-question choices
        assert pipe.settings_for({"k": k}).k == k
    assert len(pipe._choices) == 4 and pipe.settings_for({"k": 10}) is pipe.settings_for({"k": 10})
    for strategy in ("lc", "rag", "op-rag", "self-route", "closed-book"):
        pipe.strategy(strategy)
    assert len(pipe._strategies) == 3
    assert all(isinstance(kept, SizedLRU) for kept in (pipe._choices, pipe._strategies, pipe._corpora))
    assert pipe._corpora.max_bytes == 2  # corpora opened past it: the least recently used let go


def test_the_share_ledgers_and_their_targets_are_bounded(tmp_path):
    from lcrag.strategies.routing.share_control import LEDGERS_KEPT, TARGETS_KEPT, ShareLedgers, ShareState, ShareTarget

    ledgers = ShareLedgers(None)
    for n in range(LEDGERS_KEPT + 5):
        ledgers.get(f"reader {n}", "router", ())
    assert len(ledgers._ledgers) == LEDGERS_KEPT and ("reader 0", "router") not in ledgers._ledgers
    state = ShareState()
    for n in range(TARGETS_KEPT + 5):
        state.decide(ShareTarget(round(0.01 * (n + 1), 2)), 0.5, 100.0, 10.0)
    assert len(state.counts) == TARGETS_KEPT
    written = state.to_dict()["counts"]
    assert len(written) == TARGETS_KEPT and len(ShareState.from_dict(state.to_dict()).counts) == TARGETS_KEPT


def test_the_calibrations_a_process_keeps_read_are_bounded(tmp_path, monkeypatch):
    from lcrag.strategies.routing import calibration as router_calibration
    from lcrag.strategies.routing.calibration import CalibrationStore, RoutingCalibration

    monkeypatch.setattr(router_calibration, "CALIBRATIONS_KEPT", 3)
    store = CalibrationStore(tmp_path)
    for n in range(8):
        store.save(RoutingCalibration(f"reader {n}", "digest"))
        assert store.load(f"reader {n}", "digest").reader == f"reader {n}"
    assert len(store._seen) == 3


def test_the_replay_readers_token_counts_in_memory_are_bounded(monkeypatch):
    from lcrag.readers import replay

    monkeypatch.setattr(replay, "COUNTS_KEPT", 3)
    counts = replay.TokenCounts(None)
    assert [counts.count("t", f"text {n}", lambda n=n: n) for n in range(10)] == list(range(10))
    assert len(counts._memory) == 3 and counts.count("t", "text 9", lambda: -1) == 9  # kept: not counted again
