"""The registries of strategies, retrievers and chunkers: a part added in its own module is usable everywhere (the
settings, the pipeline, the CLI's choices) without editing another file; Self-Route is a composition."""

import importlib
import sys

import pytest

from lcrag import Pipeline, Settings
from lcrag.assembly import ContextAssembler
from lcrag.chunking import WordChunker, make_chunker
from lcrag.core.errors import OptionError
from lcrag.pipeline.pipeline import parse_chunking
from lcrag.readers.base import GenerationParams
from lcrag.core.registry import CHUNKERS, RETRIEVERS, STRATEGIES
from lcrag.retrieval import DocumentIndex
from lcrag.strategies import (RAG, LongContext, PromptSet, QueryContext, Routed, make_strategy, needs_corpus,
                              strategy_needs)
from lcrag.core.types import Document

# A retriever as a contributor would write it: one module, registering itself where it is defined.
LAST_FIRST = '''
from lcrag.core.registry import RETRIEVERS
from lcrag.core.types import ScoredChunk


class LastFirst:
    name = "last-first"

    def __init__(self, chunks):
        self.chunks = chunks

    def run(self, query, k=None):
        ranked = [ScoredChunk(chunk, float(chunk.index)) for chunk in reversed(self.chunks)]
        return ranked[:k] if k else ranked


@RETRIEVERS.register("last-first", help="the document's last chunks first")
def last_first(index):
    return LastFirst(index.chunks)
'''

TEXT = "alpha one two three four. beta five six seven eight. gamma nine ten eleven twelve. omega the end is here."


@pytest.fixture
def last_first_module(tmp_path, monkeypatch):
    (tmp_path / "lcrag_test_last_first.py").write_text(LAST_FIRST)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        yield importlib.import_module("lcrag_test_last_first")
    finally:
        RETRIEVERS.remove("last-first")
        sys.modules.pop("lcrag_test_last_first", None)


def test_a_retriever_from_its_own_module_is_usable_everywhere(tmp_path, last_first_module, scripted_reader):
    assert "last-first" in RETRIEVERS.names()
    settings = Settings(retriever="last-first", strategy="rag", k=1, chunking="words:5", cache_dir=tmp_path / "c")
    reader = scripted_reader(lambda messages: "here")
    document = tmp_path / "doc.txt"
    document.write_text(TEXT)
    pipeline = Pipeline(settings, reader=reader)
    try:
        answer = pipeline.ask(document, "Where is the end?")
    finally:
        pipeline.close()
    assert answer.text == "here" and answer.route == "rag"
    assert [c.index for c in answer.chunks] == [3]  # the last chunk, as the new retriever ranks it
    assert "omega the end is here." in reader.calls[0][-1]["content"]


def test_unknown_names_list_the_registered_ones(tmp_path):
    with pytest.raises(OptionError, match="retriever must be one of bm25, dense, .*; got 'grep'"):
        Settings(retriever="grep")
    with pytest.raises(OptionError, match="unknown retriever 'grep'; choose one of bm25, dense"):
        DocumentIndex(Document(TEXT), WordChunker(5), tmp_path).retriever("grep")
    with pytest.raises(OptionError, match="unknown strategy 'magic'; choose one of closed-book, lc, rag, op-rag"):
        make_strategy("magic")
    with pytest.raises(OptionError, match="unknown chunk unit 'pages'; choose one of words, tokens, sentences"):
        make_chunker("pages")
    with pytest.raises(OptionError, match="UNIT one of words, tokens, sentences"):
        parse_chunking("pages:3")


def test_strategy_and_chunker_parts_declare_their_options():
    assert STRATEGIES.get("op-rag").check_options({}) == {"order": "document"}
    with pytest.raises(OptionError, match="order must be one of score, document"):
        STRATEGIES.get("rag").check_options({"order": "random"})
    assert needs_corpus("longrag") and not needs_corpus("self-route")
    assert [strategy_needs(n) for n in ("closed-book", "lc", "op-rag", "longrag", "no-longer-installed")] == [
        "question", "document", "chunks", "corpus", "chunks"]
    # (installed plugins may follow the built-ins in the list)
    with pytest.raises(OptionError, match="strategy must be one of closed-book, lc, rag, op-rag, self-route[;,]"):
        Settings(strategy="map-reduce")
    assert Settings(strategy="longrag").strategy == "longrag"  # a setting like any: over one document, ask refuses it
    assert Settings().chunking_for("op-rag") == "tokens:128" and Settings().chunking_for("rag") == "words:300"
    with pytest.raises(OptionError, match="size must be ≥ 1"):
        CHUNKERS.get("words").check_options({"size": 0})
    assert make_chunker("words").key == WordChunker(300).key


def make_ctx(tmp_path, reader):
    document = Document(" ".join(["Filler words about nothing."] * 30) + " The key is under the mat.")
    index = DocumentIndex(document, WordChunker(20), tmp_path)
    return QueryContext(document=document, reader=reader, index=lambda: index, assembler=ContextAssembler(k=1),
                        prompts=PromptSet(), params=GenerationParams(max_tokens=8))


class TooShort:
    """A custom condition: fall back when the first answer has fewer than ``words`` words."""

    def __init__(self, words: int):
        self.words = words
        self.seen: list[str] = []

    def __call__(self, answer) -> bool:
        self.seen.append(answer.text)
        return len(answer.text.split()) < self.words


@pytest.mark.parametrize("first_answer, route", [("it is under the mat", "rag"), ("mat", "lc")])
def test_routed_composes_two_strategies_with_any_condition(tmp_path, scripted_reader, first_answer, route):
    reader = scripted_reader(lambda m: first_answer if len(reader.calls) == 1 else "under the mat")
    condition = TooShort(words=2)
    strategy = Routed("short-then-lc", RAG(order="score", name="short-then-lc"), condition, LongContext())
    answer = strategy.run(make_ctx(tmp_path, reader), "Where is the key?")
    assert condition.seen == [first_answer]
    assert answer.strategy == "short-then-lc" and answer.route == route
    assert answer.raw_route_answer == first_answer and len(answer.chunks) == 1
    assert [c.stage for c in answer.calls] == (["answer"] if route == "rag" else ["answer", "answer"])
    assert "retrieval" in answer.timings and (route == "rag") != ("truncation" in answer.timings)
    assert answer.text == (first_answer if route == "rag" else "under the mat")


def test_a_routed_strategy_registers_like_any_other(tmp_path, scripted_reader):
    STRATEGIES.register("short-then-lc", help="RAG; answers under 2 words go to LC")(
        lambda: Routed("short-then-lc", RAG(name="short-then-lc"), TooShort(2), LongContext()))
    try:
        assert Settings(strategy="short-then-lc").strategy == "short-then-lc"
        reader = scripted_reader(lambda m: "mat")
        answer = make_strategy("short-then-lc").run(make_ctx(tmp_path, reader), "Where is the key?")
        assert answer.route == "lc" and len(reader.calls) == 2
    finally:
        STRATEGIES.remove("short-then-lc")


def test_cli_help_lists_the_registered_parts():
    from typer.testing import CliRunner

    from lcrag.cli import app

    result = CliRunner().invoke(app, ["ask", "--help"], terminal_width=1000, max_content_width=1000)  # one line per option
    assert result.exit_code == 0
    for name in STRATEGIES.names() + RETRIEVERS.names() + CHUNKERS.names():
        # built-ins with their help; an installed plugin by name (its help would mean importing it at start-up)
        assert (f"{name}: " if name in STRATEGIES or name in RETRIEVERS or name in CHUNKERS else name) in result.output, name


def test_a_strategy_that_breaks_the_contract_is_refused_when_it_registers():
    from dataclasses import dataclass

    from lcrag.core.registry import Option

    with pytest.raises(OptionError, match=r"strategy 'needs-an-index' .* does not follow the strategy contract: it "
                                          r"needs index, which no declared option gives"):
        @STRATEGIES.register("needs-an-index", help="made with an index, as LongRAG once was")
        @dataclass
        class NeedsAnIndex:
            index: object

            def run(self, ctx, question): ...

    with pytest.raises(OptionError, match="it has no run"):
        @STRATEGIES.register("no-run", help="answers nothing", options=(Option("k", int, 1, min=1, max=10),))
        class NoRun:
            def __init__(self, k=1): ...
    assert "needs-an-index" not in STRATEGIES and "no-run" not in STRATEGIES
