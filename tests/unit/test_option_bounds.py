"""Bounds by declaration (issue 42): a number option without both bounds cannot be registered, every registered
part's options hold their bounds for every hostile value (generated from the registries: a part added later is covered
here without a test of its own), and the sentence-window retriever computes its windows by index arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
from hostile_options import HUGE, extremes, one_line, option_cases
from hypothesis import given, settings
from hypothesis import strategies as st

from lcrag.core.errors import OptionError
from lcrag.core.registry import CHUNKERS, EMBEDDERS, LOADERS, READERS, RETRIEVERS, STRATEGIES, Option

pytestmark = pytest.mark.unit
REGISTRIES = (STRATEGIES, RETRIEVERS, CHUNKERS, READERS, EMBEDDERS, LOADERS)


def test_every_registered_number_option_declares_both_bounds():
    unbounded = [f"{p.kind} {p.name}: {o.name}" for r in REGISTRIES for p in r.parts() for o in p.options if o.unbounded]
    assert unbounded == []


@pytest.mark.parametrize("kind", [float, int])
def test_an_option_without_a_maximum_is_refused_when_it_registers_naming_part_and_option(kind):
    for bounds in ({"min": 0}, {"max": 9}, {}):
        with pytest.raises(OptionError, match=r"retriever 'unbounded-depth' .* option depth must declare min= and max="):
            @RETRIEVERS.register("unbounded-depth", help="every chunk", options=(Option("depth", kind, 1, **bounds),))
            def unbounded(index, depth=1): ...
        assert "unbounded-depth" not in RETRIEVERS


@pytest.mark.parametrize("case", option_cases(), ids=lambda case: case.id)
def test_each_options_extremes_are_refused_in_one_line_or_kept(case):
    try:
        checked = case.part.check_options({case.option.name: case.value})[case.option.name]
    except OptionError as exc:
        assert one_line(str(exc)) and len(str(exc)) < 400, str(exc)
        assert case.option.name in str(exc) and case.part.name in str(exc)
    else:
        assert not case.out_of_bounds, f"{case.id} was accepted as {checked!r}"
        assert checked is case.value


def test_the_generated_cases_cover_every_option_of_every_strategy_and_retriever():
    cases = option_cases()
    declared = {(p.name, o.name) for r in (STRATEGIES, RETRIEVERS) for p in r.parts() for o in p.options}
    assert {(c.part.name, c.option.name) for c in cases} == declared
    assert ("sentence-window", "window") in declared and ("cascade", "widen") in declared
    window = RETRIEVERS.get("sentence-window").option("window")
    assert [(label, out) for label, _, out in extremes(window)] == [
        ("max", False), ("max+1", True), ("text", True), ("1e15", True), ("-1", True), ("nan", True), ("list", True)]


def test_a_message_shows_a_huge_value_cut():
    window = RETRIEVERS.get("sentence-window").option("window")
    with pytest.raises(OptionError) as refused:
        window.check("9" * 1_000_000, "retriever 'sentence-window'")
    assert len(str(refused.value)) < 200 and "1,000,002 characters" in str(refused.value)


def test_a_chunk_size_over_the_declared_maximum_is_refused_before_any_chunking():
    from lcrag.chunking.spec import parse_chunking
    from lcrag.core.options import SettingError

    for unit in ("words", "tokens", "sentence-splitter"):
        top = int(CHUNKERS.get(unit).option("size").max)
        assert parse_chunking(f"{unit}:{top}")[1] == top
        with pytest.raises(SettingError, match=f"SIZE must be ≤ {top:,}"):
            parse_chunking(f"{unit}:{HUGE}")


# -- the sentence-window retriever: windows by index arithmetic ---------------------------------------------------
def reference_windows(scores: list[float], window: int, n: int, k: int) -> list[int]:
    """The retriever as it was (a range listed per hit, a set of every covered index): the hits it returns."""
    order = sorted(range(n), key=lambda i: (-scores[i], i))
    hits, covered = [], set()
    for i in order:
        span = range(max(0, i - window), i + window + 1)
        if any(j in covered for j in span):
            continue
        hits.append(i)
        covered.update(span)
        if len(hits) >= k:
            break
    return hits


class OneVector:
    """An embedder giving a fixed query vector: the scores are the sentence vectors' first coordinates."""

    name = "one"

    def embed(self, texts):
        return np.array([[1.0]], dtype=np.float32)


def window_retriever(scores: list[float], window: int):
    from lcrag.retrieval.sentence_window import SentenceWindowRetriever
    from lcrag.core.types import Document

    text = " ".join(f"S{i}." for i in range(len(scores)))
    spans, at = [], 0
    for i in range(len(scores)):
        spans.append((at, at + len(f"S{i}.")))
        at += len(f"S{i}.") + 1
    vectors = np.array([[s] for s in scores], dtype=np.float32)
    return SentenceWindowRetriever(Document(text=text, id="d"), spans, vectors, OneVector(), window)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 5), min_size=1, max_size=40), st.integers(0, 64), st.integers(1, 12))
def test_sentence_windows_are_the_ones_the_listed_ranges_gave(scores, window, k):
    retriever = window_retriever([float(s) for s in scores], window)
    assert [hit.chunk.index for hit in retriever.run("q", k)] == reference_windows(scores, window, len(scores), k)


def test_the_widest_window_over_many_sentences_costs_index_arithmetic_only():
    from lcrag.retrieval.sentence_window import MAX_WINDOW

    retriever = window_retriever([float(i % 97) for i in range(200_000)], MAX_WINDOW)
    hits = retriever.run("q", 1000)
    assert len(hits) == 1000 and all(h.chunk.text.count("S") == 2 * MAX_WINDOW + 1 for h in hits[:10])


def test_a_window_over_the_maximum_is_refused_by_the_retriever_itself():
    from lcrag.core.errors import InputError

    with pytest.raises(InputError, match="0 to 64 sentences"):
        window_retriever([1.0, 2.0], HUGE)


def test_the_readme_lists_every_number_options_bounds():
    """The README's table of declared bounds names each number option with its range, read from the registries."""
    from pathlib import Path

    readme = Path(__file__).resolve().parents[2].joinpath("README.md").read_text(encoding="utf-8")
    rows = [line for line in readme.splitlines() if line.startswith("| ") and " to " in line]
    for registry in (STRATEGIES, RETRIEVERS, CHUNKERS):
        for part in registry.parts():
            for option in part.options:
                if option.type not in (int, float) or option.choices is not None:
                    continue
                span = f"{option.min:,g} to {option.max:,g}"
                assert any(part.name in row and f"`{option.name}`" in row and span in row for row in rows), \
                    f"README: no row for {part.kind} {part.name} option {option.name} ({span})"
