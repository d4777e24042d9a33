"""Real embedder, real BM25, real reader, on a generated document with planted facts."""

import json
import subprocess
import sys

import pytest

from lcrag import Pipeline, Settings
from lcrag.evaluation import contains_answer


@pytest.fixture
def pipeline(tmp_path, reader, embedder):
    p = Pipeline(Settings(k=3, chunking="words:100", cache_dir=tmp_path, max_tokens=24), reader=reader, embedder=embedder)
    yield p


@pytest.mark.parametrize("retriever", ["bm25", "dense", "hybrid"])
def test_planted_facts_are_retrieved(pipeline, needles, retriever):
    document, facts = needles
    index = pipeline.index(document)
    for fact in facts:
        top = index.retriever(retriever).run(fact.question, 1)[0]
        assert fact.sentence in top.chunk.text, (retriever, fact.question)


def test_second_open_embeds_nothing(tmp_path, needles, embedder, reader):
    document, _ = needles
    first = Pipeline(Settings(chunking="words:100", cache_dir=tmp_path), reader=reader, embedder=embedder).index(document)
    first.retriever("dense")
    assert first.embedded_chunks == len(first.chunks) > 0

    class NoEmbedding:
        name, dimension = embedder.name, embedder.dimension

        def embed(self, texts):
            assert len(texts) == 1, "only the question may be embedded"
            return embedder.embed(texts)

    second = Pipeline(Settings(chunking="words:100", cache_dir=tmp_path), reader=reader, embedder=NoEmbedding()).index(document)
    hits = second.retriever("dense").run("What is the pass key?", 2)
    assert second.embedded_chunks == 0 and len(hits) == 2


def test_rag_answers_the_passkey(pipeline, needles):
    document, facts = needles
    passkey = facts[-1]
    answer = pipeline.ask(document, passkey.question, strategy="rag")
    assert contains_answer(answer.text, [passkey.answer]), answer.text
    assert answer.route == "rag" and len(answer.chunks) == 3
    assert any(document.text[c.start : c.end].count(passkey.answer) for c in answer.chunks)
    assert answer.calls[0].prompt_tokens > 0 and answer.calls[0].completion_tokens > 0
    assert {"retrieval", "assembly", "llm:answer"} <= set(answer.timings)


def test_self_route_costs_less_than_lc(pipeline, needles):
    document, facts = needles
    lc = pipeline.ask(document, facts[-1].question, strategy="lc")
    sr = pipeline.ask(document, facts[-1].question, strategy="self-route")
    # The planted fact is retrievable, so Self-Route must answer from RAG; a fallback to LC fails the test rather
    # than passing it vacuously (the fallback's cost is covered by the unit tests with a scripted reader).
    assert sr.route == "rag", sr.raw_route_answer
    assert sr.prompt_tokens < 0.5 * lc.prompt_tokens


def test_lc_truncates_when_window_is_small(tmp_path, needles, embedder):
    from lcrag.readers.llamacpp import EmbeddedLlamaReader

    document, _ = needles
    small = EmbeddedLlamaReader(context_window=1024)
    try:
        p = Pipeline(Settings(cache=False, cache_dir=tmp_path, max_tokens=16), reader=small, embedder=embedder)
        answer = p.ask(document, "What is the pass key?", strategy="lc")
    finally:
        small.close()
    assert answer.truncated_tokens > 0
    assert answer.prompt_tokens <= 1024 - 16
    # the window is filled up to the rounding step (at most 1/16 of it), not wasted
    assert answer.prompt_tokens >= 1024 - 16 - 1024 // 16


@pytest.mark.slow
def test_cli_ask_json(tmp_path, needles):
    document, facts = needles
    path = tmp_path / "doc.txt"
    path.write_text(document.text)
    result = subprocess.run(
        [sys.executable, "-m", "lcrag.cli", "ask", str(path), facts[-1].question, "--strategy", "self-route",
         "--json", "-k", "3", "--chunking", "words:100", "--cache-dir", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["strategy"] == "self-route" and data["route"] in ("rag", "lc")
    assert data["prompt_tokens"] == sum(c["prompt_tokens"] for c in data["calls"]) > 0
    assert all({"index", "start", "end", "score"} <= set(c) for c in data["chunks"])
    assert "llm:route" in data["timings"]
    # the second run is served by the completion cache and the on-disk index
    again = subprocess.run(result.args, capture_output=True, text=True, timeout=600)
    second = json.loads(again.stdout)
    assert second["text"] == data["text"] and all(c["from_cache"] for c in second["calls"])
