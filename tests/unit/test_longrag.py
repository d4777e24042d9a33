"""LongRAG's two turns: post-processing of the replies (defect 18) and the whole-prompt budget (defect 23)."""

from __future__ import annotations

import json

import pytest

from lcrag.core.errors import InputError
from lcrag.readers.base import GenerationParams
from lcrag.retrieval.corpus import CorpusBuildConfig, CorpusIndex
from lcrag.strategies.longrag import LongRAG, after_answer, long_answer_of, short_answer
from lcrag.core.tokenization import WordCounter


def long_title(i: int) -> str:
    return f"Document number {i} about the history of the very long titled vault archive volume {i}"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    """Twelve documents whose titles are long next to their text, as in Wikipedia's grouped units."""
    tmp = tmp_path_factory.mktemp("longrag")
    records = [{"id": str(i), "title": long_title(i), "text": f"The vault code {i} is kept here. " * 12,
                "links": [str(i ^ 1)]} for i in range(12)]  # linked in pairs: grouped units of two documents
    (tmp / "c.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    config = CorpusBuildConfig(units=("document", "grouped"), embedder=None, grouping="links",
                               group_tokens=250)
    built, _ = CorpusIndex.build(tmp / "c.jsonl", tmp / "idx", config, WordCounter())
    return built


def replies(first: str, second: str):
    return lambda messages: second if messages[0]["content"].startswith("As an AI assistant") else first


# -- defect 18: post-processing ------------------------------------------------------------------------------------
@pytest.mark.parametrize("reply,expected", [
    ("Answer: ", ""),                 # nothing after the marker: IndexError before
    ("The answer: \nfoo", "foo"),     # the answer on the next line: lost before
    ("answer:\n\n  Paris  \nmore", "Paris"),
    ("Paris", "Paris"),
    ("", ""),
])
def test_after_answer_takes_the_first_non_empty_line_after_the_marker(reply, expected):
    assert after_answer(reply) == expected


def test_a_long_answer_with_an_empty_marker_keeps_the_reply():
    assert long_answer_of("Paris is the capital.\nAnswer: ") == "Paris is the capital."
    assert long_answer_of("The answer: \nParis, on the Seine.") == "Paris, on the Seine."


def test_empty_short_answer_falls_back_to_the_long_answers_first_line():
    assert short_answer("Answer: ", "Jane Austen wrote it.\nIn 1813.") == "Jane Austen wrote it."
    assert short_answer("", "\nCanberra") == "Canberra"
    assert short_answer("Short Answer: \nCanberra\nextra", "The capital is Canberra.") == "Canberra"


def test_a_cached_empty_second_turn_answers_instead_of_crashing(index, scripted_reader):
    reader = scripted_reader(replies("Answer: the vault code is 3", "Answer: "))
    answer = LongRAG(index, reader, unit="document", scorer="bm25", k=2).run("vault code 3")
    assert answer.long_answer == "the vault code is 3"
    assert answer.text == "the vault code is 3"  # the documented fallback, not an IndexError
    reader = scripted_reader(replies("Long answer", "The answer: \nfoo"))
    assert LongRAG(index, reader, unit="document", scorer="bm25", k=2).run("vault code 3").text == "foo"


# -- defect 23: the whole prompt fits the window -------------------------------------------------------------------
@pytest.mark.parametrize("window", [260, 300, 420, 700, 1100])
@pytest.mark.parametrize("unit", ["document", "grouped"])
def test_a_context_that_fills_the_window_never_overflows_it(index, scripted_reader, window, unit):
    reader = scripted_reader(replies("Answer: 3", "3"), context_window=window)
    strategy = LongRAG(index, reader, unit=unit, scorer="bm25", k=12, long_params=GenerationParams(max_tokens=64))
    answer = strategy.run("vault code 3")
    turn1 = reader.calls[0]
    prompt = reader.count_prompt_tokens(turn1)
    assert answer.calls[0].prompt_tokens == prompt
    assert prompt + 64 <= window  # titles included: the old room left them out and overflowed
    titles = turn1[0]["content"].split("ordered by title: ")[1].split(". Each Wikipedia")[0]
    assert titles.count('"') == 2 * sum(len(index.unit_titles(unit, c.index)) for c in answer.chunks) > 0
    # and the context still fills the window, short of at most one more document (99 words, a 16-word title)
    assert prompt + 64 > window - 130


def test_titles_that_alone_fill_the_window_are_a_clear_error(index, scripted_reader):
    # room for 10 tokens of context, but a grouped unit's two titles are 32 words: no cut of its text can fit
    probe = LongRAG(index, scripted_reader(), unit="grouped", scorer="bm25", k=1)
    empty = scripted_reader().count_prompt_tokens(probe.turn1_messages("vault code 3", [], ""))
    reader = scripted_reader(replies("3", "3"), context_window=empty + 64 + 10)
    strategy = LongRAG(index, reader, unit="grouped", scorer="bm25", k=1, long_params=GenerationParams(max_tokens=64))
    with pytest.raises(InputError, match="titles and prompt alone fill"):
        strategy.run("vault code 3")
    assert reader.calls == []  # refused before any model call


# -- issue 26: LongRAG follows the strategy contract ----------------------------------------------------------------
def test_pipeline_ask_answers_over_a_corpus_with_longrag_and_refuses_one_document(index, scripted_reader, tmp_path):
    from dataclasses import replace

    from lcrag.pipeline.pipeline import Pipeline, Settings
    from lcrag.core.types import Document

    reader = scripted_reader(replies("Answer: the vault code is 3", "Answer: 3"))
    settings = Settings(retriever="bm25", k=2, cache=False, cache_dir=tmp_path, unit="document")
    answer = Pipeline(settings, reader=reader).ask(index.dir, "vault code 3", strategy="longrag")
    assert answer.text == "3" and answer.route == "longrag" and len(answer.chunks) == 2
    assert answer.retrieval == {"unit": "document", "scorer": "bm25"}
    assert answer.chunks[0].index == 3  # the unit of document 3, found by BM25
    wider = Pipeline(replace(settings, k=3), reader=reader).ask(index.dir, "vault code 3", strategy="longrag")
    assert len(wider.chunks) == 3  # k from the settings, as for every strategy
    with pytest.raises(InputError, match=r"longrag reads a corpus index .* doc\.txt is one document"):
        Pipeline(settings, reader=reader).ask(Document(text="The vault code is 3.", source="doc.txt"), "code?",
                                              strategy="longrag")
