"""Every strategy over a corpus index: its units as chunks (bm25, dense, hybrid), LC as the best units filling the
window, Self-Route composing the two; refusals for what cannot apply to a corpus."""

from __future__ import annotations

import pytest

from lcrag.core.errors import InputError, LcragError
from lcrag.pipeline.pipeline import Pipeline, Settings, as_source
from lcrag.documents.indexed_corpus import CorpusSource, is_corpus_index
from lcrag.retrieval.corpus import CorpusBuildConfig, CorpusIndex
from lcrag.core.tokenization import WordCounter
from tests.unit.test_corpus import RECORDS, HashingEmbedder, write_corpus

FILLER = [{"id": f"f{i}", "title": f"Filler {i}", "text": " ".join(f"word{i}x{j}" for j in range(30))} for i in range(6)]


@pytest.fixture(scope="module")
def corpus_dir(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("corpus")
    src = write_corpus(tmp / "c.jsonl", RECORDS + FILLER)
    config = CorpusBuildConfig(units=("passage", "document"), embedder="hashing", piece_words=100, group_tokens=40)
    index, _ = CorpusIndex.build(src, tmp / "idx", config, WordCounter(), embedder=HashingEmbedder())
    index.close()
    return tmp / "idx"


def pipeline(scripted_reader, **settings):
    reader = scripted_reader(**{k: settings.pop(k) for k in ("answer", "context_window") if k in settings})
    return Pipeline(Settings(cache=False, **settings), reader=reader, embedder=HashingEmbedder()), reader


def test_a_corpus_index_directory_is_a_source(corpus_dir, tmp_path):
    source = as_source(corpus_dir)
    assert isinstance(source, CorpusSource) and is_corpus_index(corpus_dir)
    assert source.kind == "corpus" and source.text is None and source.content_hash.startswith("corpus:")
    assert not is_corpus_index(tmp_path)
    with pytest.raises(InputError, match="not a corpus index"):
        CorpusSource.open(tmp_path)


@pytest.mark.parametrize("retriever", ["bm25", "dense", "hybrid"])
def test_rag_retrieves_corpus_units(corpus_dir, scripted_reader, retriever):
    p, reader = pipeline(scripted_reader, strategy="rag", retriever=retriever, k=2)
    answer = p.ask(corpus_dir, "What is the secret code of the Zorblax Vault?")
    prompt = reader.calls[0][-1]["content"]
    assert answer.route == "rag" and len(answer.chunks) == 2
    assert "The secret code of the Zorblax Vault is 73914" in prompt  # the unit's own text, not a document slice
    assert answer.chunks[0].index == 3  # the passage unit of record d
    assert (answer.chunks[0].start, answer.chunks[0].end) == (3, 4)  # a unit's position in the corpus


def test_op_rag_keeps_corpus_order(corpus_dir, scripted_reader):
    p, _ = pipeline(scripted_reader, strategy="op-rag", k=3)
    answer = p.ask(corpus_dir, "guild Zorblax Vault Shirley Temple")
    positions = [c.start for c in answer.chunks]
    assert positions == sorted(positions) and len(positions) == 3


def test_a_token_budget_counts_units_in_reader_tokens(corpus_dir, scripted_reader):
    p, _ = pipeline(scripted_reader, strategy="rag", budget=40)
    answer = p.ask(corpus_dir, "guild Zorblax Vault Shirley Temple protocol")
    assert answer.chunks and sum(c.tokens for c in answer.chunks) <= 40
    assert all(c.tokens > 0 for c in answer.chunks)


def test_lc_reads_the_best_whole_units_that_fit_the_window(corpus_dir, scripted_reader):
    p, reader = pipeline(scripted_reader, strategy="lc", context_window=150, max_tokens=8)
    answer = p.ask(corpus_dir, "What is the secret code of the Zorblax Vault?")
    prompt_tokens = reader.count_prompt_tokens(reader.calls[0])
    assert answer.route == "lc" and prompt_tokens <= 150 - 8
    context = reader.calls[0][-1]["content"]
    assert "73914" in context
    assert "Filler" not in context  # units sharing no word with the question rank last: no room left for them
    # whole units in corpus order: Zorblax (d) before Guild (e)
    assert context.index("Zorblax Vault\nThe secret code") < context.index("Guild of Keys\nThe guild guards")


def test_self_route_declines_to_the_corpus_long_context(corpus_dir, scripted_reader):
    def answer(messages):
        return "unanswerable" if "unanswerable" in messages[-1]["content"] else "73914"

    p, reader = pipeline(scripted_reader, strategy="self-route", k=1, answer=answer, context_window=400)
    result = p.ask(corpus_dir, "Who keeps the code of the Zorblax Vault?")
    assert result.route == "lc" and result.text == "73914" and len(reader.calls) == 2


def test_what_cannot_apply_to_a_corpus_is_one_clear_error(corpus_dir, scripted_reader):
    p, _ = pipeline(scripted_reader, strategy="rag", retriever="sentence-window")
    with pytest.raises(InputError, match=r"reads a single document.s text; over a corpus index use (dense, bm25|bm25, dense), hybrid"):
        p.ask(corpus_dir, "code?")
    p, _ = pipeline(scripted_reader, strategy="rag", chunking="words:50")
    with pytest.raises(InputError, match="--chunking does not apply to a corpus index"):
        p.ask(corpus_dir, "code?")
    with pytest.raises(LcragError, match="no 'grouped' units"):
        Pipeline(Settings(cache=False), reader=scripted_reader()).corpus(CorpusSource.open(corpus_dir, "grouped"))


def test_eval_runs_every_strategy_over_the_corpus(corpus_dir, scripted_reader, tmp_path):
    from lcrag.evaluation.datasets import EvalItem
    from lcrag.evaluation.runner import EvalRunner, expand_configs

    def answer(messages):
        return "73914" if "73914" in messages[-1]["content"] else "unanswerable"

    items = [EvalItem(id="q1", dataset="corpus-qa", question="What is the secret code of the Zorblax Vault?",
                      answers=["73914"], context=None, metric="em")]
    runner = EvalRunner(items, expand_configs(["lc", "rag", "op-rag", "self-route", "closed-book"], ["bm25"], [1], []),
                        tmp_path / "run", Settings(), reader=scripted_reader(answer, context_window=300),
                        corpus=corpus_dir)
    rows = {r["strategy"]: r for r in runner.run()}
    assert {s: rows[s]["prediction"] for s in ("lc", "rag", "op-rag", "self-route")} == dict.fromkeys(
        ("lc", "rag", "op-rag", "self-route"), "73914")
    assert rows["closed-book"]["prediction"] == "unanswerable"  # the question alone: no corpus read


def test_the_unit_kind_is_a_setting(corpus_dir, scripted_reader):
    p, reader = pipeline(scripted_reader, strategy="rag", k=1, unit="document")
    p.ask(corpus_dir, "What is the secret code of the Zorblax Vault?")
    assert "Zorblax Vault\nThe secret code" in reader.calls[0][-1]["content"]  # a document unit: title, then text
    with pytest.raises(LcragError, match="unit"):
        Settings(unit="chapter")


def test_a_strategy_that_reads_one_text_is_refused_over_a_corpus_in_one_line(corpus_dir, scripted_reader):
    """A plugin that says nothing reads a document's text: over a corpus index it is refused before it runs (on
    5281a3b a map-reduce plugin "answered" reading 0 characters, and one reading ``ctx.index().chunks`` ended in an
    AttributeError traceback)."""
    from lcrag.core.registry import STRATEGIES
    from lcrag.strategies.base import Strategy
    from lcrag.core.types import Answer

    read = []

    @STRATEGIES.register("whole-text", help="reads the document's text")
    class WholeText(Strategy):
        name = route = "whole-text"

        def run(self, ctx, question):
            read.append(len(ctx.document.text) + len(ctx.index().chunks))
            return Answer("?", question, self.name, route=self.route)

    try:
        p, reader = pipeline(scripted_reader, strategy="whole-text")
        with pytest.raises(InputError) as refused:
            p.ask(corpus_dir, "code?")
        message = str(refused.value)
        assert "strategy 'whole-text' reads one document's text" in message and "is a corpus index" in message
        assert "lc, rag, op-rag, self-route" in message and "\n" not in message
        assert read == [] and reader.calls == []
    finally:
        STRATEGIES.remove("whole-text")

