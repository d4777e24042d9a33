"""Three kinds of source, one protocol (issue 45): the pipeline asks any source for its index and for what LC reads
(lcrag.core.types.QuestionSource); a retriever's spec (name and options) reaches it over a corpus; LongRAG answers
with the question's generation parameters and is made once per answering context."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from lcrag.assembly.truncation import TruncatedText
from lcrag.core.registry import RETRIEVERS, Option, PartSpec
from lcrag.core.types import DOCUMENT, Chunk, Document, IndexParts, Ranked, ScoredChunk, SourceIndex
from lcrag.pipeline.pipeline import IndexMaking, Pipeline, Settings, as_source
from tests.unit.test_corpus_source import corpus_dir  # noqa: F401 - the fixture
from tests.unit.test_longrag import index, replies  # noqa: F401 - the fixture

CHUNKS = [Chunk(0, 0, 5, "alpha"), Chunk(1, 6, 10, "beta")]


class FakeIndex:
    """A source's index, as the protocol asks: its retriever ranks "beta" first."""

    def __init__(self):
        self.asked: list[PartSpec | str] = []

    def retriever(self, spec):
        self.asked.append(spec)
        return _Ranking()

    def chunk_tokens(self, chunks, tokenizer):
        return [1 for _ in chunks]

    def sentence_spans(self, start, end):
        return ((0, end - start),)

    def search(self, spec, query, depth):
        return Ranked(self.retriever(spec).run(query, depth))

    def read_best(self, question, retriever, tokenizer, limit):
        return TruncatedText("the fake long read", 4, 4)


class _Ranking:
    name = "fake"

    def run(self, query, k=None):
        return [ScoredChunk(CHUNKS[1], 2.0), ScoredChunk(CHUNKS[0], 1.0)][:k]


@dataclass(frozen=True)
class FakeSource:
    """A fourth kind of source in all but name: it implements the protocol and nothing else."""

    kind: ClassVar[str] = DOCUMENT
    id: str = "fake"
    source: str = "fake"
    text: str = "alpha beta"
    content_hash: str = "fake-source"
    made: FakeIndex = FakeIndex()

    def open_index(self, parts: IndexParts) -> SourceIndex:
        return self.made

    def long_read(self, opened, retriever):
        return lambda question, tokenizer, limit: opened().read_best(question, retriever, tokenizer, limit)


def test_the_pipeline_answers_a_source_through_the_protocol_alone(scripted_reader):
    reader = scripted_reader()
    p = Pipeline(Settings(cache=False, retriever="bm25", k=1), reader=reader)
    source = FakeSource(made=FakeIndex())
    rag = p.ask(source, "which?", strategy="rag", sources=False)
    assert [c.index for c in rag.chunks] == [1] and "beta" in reader.calls[-1][-1]["content"]
    assert set(source.made.asked) == {RETRIEVERS.get("bm25").spec()}  # the retriever's spec, not its name
    p.ask(source, "which?", strategy="lc", sources=False)
    assert "the fake long read" in reader.calls[-1][-1]["content"]  # what its long_read gave, not its text


def test_a_document_and_a_corpus_are_asked_the_same_way(corpus_dir, scripted_reader, tmp_path):  # noqa: F811
    p = Pipeline(Settings(cache=False, cache_dir=tmp_path, chunking="words:4"), reader=scripted_reader())
    making = IndexMaking(p, "words:4", None, None)
    document = Document("one two three four five six seven eight", id="d")
    assert [c.text for c in document.open_index(making).chunks] == ["one two three four", "five six seven eight"]
    corpus = as_source(corpus_dir)
    assert corpus.open_index(making) is p.corpus(corpus)  # its units, opened once
    assert document.long_read(lambda: None, RETRIEVERS.get("bm25").spec()) is None  # LC cuts its text
    with pytest.raises(Exception, match="does not apply to a corpus index"):
        corpus.open_index(IndexMaking(p, "words:4", "words:4", None))


@pytest.fixture
def weighted_retriever():
    """A registered retriever that composes others and takes an option: what it was made with is kept."""
    made: list[dict] = []

    def weighted(units, weight: float = 1.0):
        made.append({"weight": weight})
        return units.retriever("bm25")

    RETRIEVERS.register("weighted-test", help="bm25, with a weight", composes=True,
                        options=(Option("weight", float, 1.0, "a weight", min=0.0, max=10.0),))(weighted)
    yield made
    RETRIEVERS._parts.pop("weighted-test")


def test_a_retrievers_options_reach_it_over_a_corpus(corpus_dir, scripted_reader, weighted_retriever):  # noqa: F811
    from tests.unit.test_corpus import HashingEmbedder

    settings = Settings(cache=False, strategy="rag", retriever="weighted-test", options={"weight": 2.5}, k=1)
    answer = Pipeline(settings, reader=scripted_reader(), embedder=HashingEmbedder()).ask(corpus_dir, "Zorblax Vault")
    assert weighted_retriever == [{"weight": 2.5}] and len(answer.chunks) == 1


class ParamsReader:
    """The scripted reader, keeping each call's generation parameters."""

    def __init__(self, reader):
        self.reader, self.params = reader, []
        self.model, self.context_window, self.tokenizer = reader.model, reader.context_window, reader.tokenizer

    def count_prompt_tokens(self, messages):
        return self.reader.count_prompt_tokens(messages)

    def complete(self, messages, params):
        self.params.append(params)
        return self.reader.complete(messages, params)


def test_a_questions_max_tokens_reaches_longrags_reader_and_longrag_is_made_once(index, scripted_reader,  # noqa: F811
                                                                                 tmp_path):
    reader = ParamsReader(scripted_reader(replies("Answer: the vault code is 3", "Answer: 3")))
    p = Pipeline(Settings(retriever="bm25", k=2, cache=False, cache_dir=tmp_path, unit="document"), reader=reader)
    p.ask(index.dir, "vault code 3", strategy="longrag", max_tokens=50)
    assert [params.max_tokens for params in reader.params] == [50, 32]  # the long answer's, then turn 2's
    p.ask(index.dir, "vault code 4", strategy="longrag", max_tokens=8)
    assert [params.max_tokens for params in reader.params[2:]] == [8, 8]  # turn 2 within the question's bound
    ctx = p.context(as_source(index.dir), "longrag")
    made = [key for key in ctx._memo if key[0] == "longrag"]
    assert len(made) == 1  # one long reader for every question over this context


def test_longrag_ranks_units_with_the_questions_retriever_and_its_options(index, scripted_reader,  # noqa: F811
                                                                          weighted_retriever, tmp_path):
    reader = scripted_reader(replies("Answer: the vault code is 3", "Answer: 3"))
    settings = Settings(retriever="weighted-test", options={"weight": 3.0}, k=2, cache=False, cache_dir=tmp_path,
                        unit="document")
    answer = Pipeline(settings, reader=reader).ask(index.dir, "vault code 3", strategy="longrag")
    assert weighted_retriever == [{"weight": 3.0}]  # made from its spec over the units, its option with it
    assert answer.retrieval == {"unit": "document", "scorer": "weighted-test"} and len(answer.chunks) == 2
    assert answer.text == "3"


def test_a_pipeline_closes_what_it_made_and_never_a_reader_it_was_handed(scripted_reader, monkeypatch):
    handed = scripted_reader()
    handed.closed = False
    monkeypatch.setattr(handed, "close", lambda: setattr(handed, "closed", True), raising=False)
    p = Pipeline(Settings(cache=False), reader=handed)
    p.ask(FakeSource(made=FakeIndex()), "which?", strategy="rag", sources=False)
    p.close()
    assert not handed.closed and p.reader is handed  # its owner's to close (a session's, an eval run's)
