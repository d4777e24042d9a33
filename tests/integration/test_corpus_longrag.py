"""LongRAG over a corpus with the real parts: bundled MiniLM embedder, tantivy BM25, SmolLM2 reader, Ray."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from lcrag.evaluation import contains_answer
from lcrag.retrieval.corpus import CorpusBuildConfig, CorpusIndex
from lcrag.retrieval.executors import ray_batches
from lcrag.strategies.longrag import LongRAG
from lcrag.documents.synthetic import DEFAULT_FACTS, corpus_records, passkey_fact
from lcrag.core.tokenization import WordCounter

FACTS = (*DEFAULT_FACTS[:3], passkey_fact(48213))


@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    with path.open("w", encoding="utf-8") as f:
        for record in corpus_records(80, 90, FACTS, seed=5):
            f.write(json.dumps(record) + "\n")
    return path


@pytest.fixture(scope="module")
def built(corpus_file, tmp_path_factory, embedder, reader):
    out = tmp_path_factory.mktemp("index")
    index, _ = CorpusIndex.build(corpus_file, out, CorpusBuildConfig(group_tokens=1500, batch=32), reader.tokenizer,
                                 embedder=embedder)
    return index


@pytest.mark.parametrize("kind", ["passage", "document", "grouped"])
@pytest.mark.parametrize("scorer", ["dense", "bm25"])
def test_planted_facts_are_in_the_top_unit(built, kind, scorer):
    for fact in FACTS[:3]:
        top = built.search(fact.question, kind, scorer, 1)[0]
        assert fact.sentence in built.unit_texts(kind, [top.unit])[0], (kind, scorer, fact.question)


def test_grouping_by_mentions_links_named_records(built):
    info = built.meta["units"]["grouped"]
    assert info["grouping"] == "mentions" and info["edges"] >= 60  # every record names another one
    grouped = built.units("grouped")
    assert 1 < len(grouped) < 80
    # groups stay within the limit, in the reader's tokens
    assert built.unit_tokens("grouped").max() <= 1500


def test_ray_and_local_builds_agree(corpus_file, tmp_path, embedder):
    import ray  # the test extra installs it: a missing ray is a failure, not a skip

    config = CorpusBuildConfig(units=("grouped",), batch=16, bm25=False)
    local, _ = CorpusIndex.build(corpus_file, tmp_path / "local", config, WordCounter(), embedder=embedder)
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
        distributed, report = CorpusIndex.build(corpus_file, tmp_path / "ray", config, WordCounter(), embedder=embedder,
                                                embed_batches=ray_batches("minilm"))
    finally:
        ray.shutdown()
    assert report.embedded_pieces == len(local.pieces)
    a, b = local.vectors(), distributed.vectors()
    assert a.shape == b.shape
    np.testing.assert_allclose(a, b, atol=1e-5)
    for name in ("ptr", "docs", "piece_unit"):
        assert np.array_equal(getattr(local.units("grouped"), name), getattr(distributed.units("grouped"), name))
    for fact in FACTS:
        assert [h.unit for h in local.search(fact.question, "grouped", "dense", 3)] == \
               [h.unit for h in distributed.search(fact.question, "grouped", "dense", 3)]


def test_long_reader_answers_in_two_turns(built, reader):
    passkey = FACTS[-1]
    # passages keep the context short enough for the 135M test reader to find the key
    answer = LongRAG(built, reader, unit="passage", scorer="bm25", k=2).run(passkey.question)
    assert [c.stage for c in answer.calls] == ["long_answer", "short_answer"]
    assert passkey.sentence in answer.context
    assert answer.calls[0].prompt_tokens > answer.context_tokens > 0  # the server's count, context included
    assert contains_answer(answer.long_answer, [passkey.answer]), answer.long_answer
    # a context limit below one unit cuts it in the middle, and says how much
    short = LongRAG(built, reader, unit="grouped", scorer="bm25", k=2, context_tokens=200).run(passkey.question)
    assert short.context_tokens <= 200 and short.truncated_tokens > 0


class NarrowWindow:
    """The bundled reader's tokenizer and chat template with a smaller window (no generation needed)."""

    def __init__(self, reader, context_window):
        self.reader, self.context_window, self.tokenizer = reader, context_window, reader.tokenizer

    def count_prompt_tokens(self, messages):
        return self.reader.count_prompt_tokens(messages)


@pytest.mark.parametrize("window", [700, 1200, 1800])
def test_the_whole_turn1_prompt_fits_the_window_by_the_readers_count(built, reader, window):
    # grouped units of many documents bring many titles: the old room left them out and overflowed
    strategy = LongRAG(built, NarrowWindow(reader, window), unit="grouped", scorer="bm25", k=8)
    question = FACTS[0].question
    ctx = strategy.assemble(question, strategy.retrieve(question))
    prompt = reader.count_prompt_tokens(strategy.turn1_messages(question, ctx.titles, ctx.text))
    assert len(ctx.titles) > 1
    assert prompt + strategy.long_params.max_tokens <= window
    assert prompt + strategy.long_params.max_tokens > window - 40  # one unit cut to fit: the window is filled


def lcrag(*args, cwd=None, env=None):
    return subprocess.run([sys.executable, "-m", "lcrag.cli", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd, timeout=600, env={**os.environ, **(env or {})})


def test_cli_build_ask_and_eval(corpus_file, tmp_path):
    out = tmp_path / "idx"
    built = lcrag("corpus", "build", corpus_file, "--out", out, "--unit", "passage,grouped", "--group-tokens", "1500")
    assert built.returncode == 0, built.stderr
    assert "units passage" in built.stdout
    asked = lcrag("ask", out, "What is the pass key?", "-s", "longrag", "-r", "bm25", "-k", "1", "--json")
    assert asked.returncode == 0, asked.stderr
    data = json.loads(asked.stdout)
    assert data["strategy"] == "longrag" and len(data["calls"]) == 2 and data["chunks"]

    questions = tmp_path / "hotpot_open_sample.jsonl"
    questions.write_text("".join(json.dumps({"id": f"q{i}", "question": f.question, "answers": [f.answer]}) + "\n"
                                 for i, f in enumerate(FACTS[2:])))
    run = tmp_path / "run"
    evaluated = lcrag("eval", "--dataset", questions, "--corpus", out, "--strategies", "longrag", "--unit", "passage,grouped",
                      "--retriever", "bm25", "-k", "1", "--out", run)
    assert evaluated.returncode == 0, evaluated.stderr
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines()]
    assert len(rows) == 4 and {r["unit"] for r in rows} == {"passage", "grouped"}
    assert all(r["answer_recall"] for r in rows)  # BM25 finds both planted facts at k=1
    assert all(r["metric"] == "em" and "refined_em" in r for r in rows)
    reported = lcrag("report", run)
    assert reported.returncode == 0 and "LongRAG over a corpus" in reported.stdout


def test_every_strategy_answers_over_a_corpus_index(built, tmp_path):
    """`lcrag ask INDEX` and `lcrag eval --corpus` with RAG, OP-RAG, Self-Route and LC: the units are the chunks."""
    passkey = FACTS[-1]
    env_cache = ["--cache-dir", tmp_path / "cache"]
    for strategy, retriever in (("rag", "bm25"), ("op-rag", "dense"), ("self-route", "hybrid")):
        asked = lcrag("ask", built.dir, passkey.question, "--strategy", strategy, "-r", retriever, "-k", "2", "--json",
                      *env_cache)
        assert asked.returncode == 0, asked.stderr
        data = json.loads(asked.stdout)
        assert data["chunks"] and all(c["end"] == c["start"] + 1 for c in data["chunks"])  # units, by position
        assert passkey.answer in data["text"], (strategy, data["text"])
    lc = json.loads(lcrag("ask", built.dir, passkey.question, "--strategy", "lc", "--context-window", "1024",
                          "--json", *env_cache).stdout)
    assert lc["route"] == "lc" and 700 < lc["prompt_tokens"] <= 1024 - 64  # the window filled with whole units

    questions = tmp_path / "hotpot_open_units.jsonl"
    questions.write_text(json.dumps({"id": "q0", "question": passkey.question, "answers": [passkey.answer]}) + "\n")
    run = tmp_path / "run"
    evaluated = lcrag("eval", "--dataset", questions, "--corpus", built.dir, "--strategies", "rag,self-route",
                      "--retriever", "bm25", "-k", "2", "--out", run)
    assert evaluated.returncode == 0, evaluated.stderr
    rows = [json.loads(line) for line in (run / "rows.jsonl").read_text().splitlines()]
    assert {r["strategy"] for r in rows} >= {"rag", "self-route"} and all(r["prediction"] for r in rows)


def test_lcrag_ask_answers_a_corpus_with_the_pipelines_longrag(built, reader, tmp_path):
    """`lcrag ask INDEX -s longrag` (the one way to ask a corpus; `lcrag corpus ask` is gone) reads the units the
    pipeline's LongRAG retrieves and answers in its two turns."""
    from lcrag.pipeline.pipeline import Pipeline, Settings

    passkey = FACTS[-1]
    asked = lcrag("ask", built.dir, passkey.question, "-s", "longrag", "--unit", "passage", "-k", "2", "-r", "bm25",
                  "--json", "--cache-dir", tmp_path / "cache")
    assert asked.returncode == 0, asked.stderr
    a = json.loads(asked.stdout)
    assert a["route"] == "longrag" and a["retrieval"] == {"unit": "passage", "scorer": "bm25"}
    settings = Settings(retriever="bm25", k=2, unit="passage", cache=False)
    # The bundled reader, as the command's default. Not closed here: Pipeline.close closes the reader it was handed,
    # and this one is the session's.
    answer = Pipeline(settings, reader=reader).ask(built.dir, passkey.question, strategy="longrag", sources=False)
    assert [c["index"] for c in a["chunks"]] == [c.index for c in answer.chunks]
    assert [c["stage"] for c in a["calls"]] == ["long_answer", "short_answer"]


@pytest.mark.parametrize("args,message", [
    (["corpus", "build", "missing.jsonl", "--out", "x"], "missing.jsonl does not exist"),
    (["corpus", "build", "{corpus}", "--out", "x", "--unit", "chapter"], "unknown unit"),
    (["corpus", "build", "{corpus}", "--out", "{questions}"], "is a file, not a directory"),
    (["eval", "--dataset", "{questions}", "--out", "r", "--strategies", "longrag"], "pass --corpus"),
])
def test_cli_bad_input_is_one_line_exit_2(tmp_path, corpus_file, args, message):
    questions = tmp_path / "hotpot_open_q.jsonl"
    questions.write_text(json.dumps({"id": "q", "question": "?", "answers": ["a"]}) + "\n")
    args = [a.format(corpus=corpus_file, questions=questions) for a in args]
    result = lcrag(*args, cwd=tmp_path)
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_cli_build_refuses_other_settings_in_one_line_then_rebuilds(corpus_file, tmp_path):
    common = ["corpus", "build", corpus_file, "--out", tmp_path / "idx", "--unit", "grouped", "--tokenizer", "words",
              "--embedder", "none", "--no-bm25"]
    assert lcrag(*common, "--group-tokens", "1000").returncode == 0
    refused = lcrag(*common, "--group-tokens", "300")
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert "group_tokens 1000 → 300" in refused.stderr and "--rebuild" in refused.stderr
    rebuilt = lcrag(*common, "--group-tokens", "300", "--rebuild")
    assert rebuilt.returncode == 0, rebuilt.stderr
    assert json.loads((tmp_path / "idx" / "meta.json").read_text())["units"]["grouped"]["group_tokens"] == 300
