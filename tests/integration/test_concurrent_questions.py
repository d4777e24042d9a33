"""A differential concurrency test (issue 33): 8 threads ask one long-lived pipeline 200 questions over 6 documents,
each with its own random choices (strategy, retriever and its options, k or budget, order, routing threshold and
router, a part's option, max_tokens); every answer's chunks, route, prompts, token counts and text equal those of a
fresh pipeline asked the same question alone.

The real bundled reader and embedder answer. The fresh pipelines answer first, one question each, and fill the
completion cache; the shared pipeline's answers then come from it when, and only when, it sends the very same
prompts (a prompt built with another question's choices is a miss, generated anew, and differs). So the comparison
is exact: a small reader's scores moving between calls (its KV-cache reuse) cannot make it flaky.
Cache-aware routing is left out: it answers by the document's earlier questions, by design."""

from __future__ import annotations

import hashlib
import json
import random
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from lcrag import Pipeline, Settings
from lcrag.readers import CachedReader, CompletionCache
from lcrag.documents.synthetic import DEFAULT_FACTS, needle_document

QUESTIONS = 200
THREADS = 8


class PromptLog:
    """A reader that records each call's messages for the thread that made it (a question runs in one thread)."""

    def __init__(self, reader):
        self._reader = reader
        self._calls: dict[int, list[str]] = {}
        self._lock = threading.Lock()

    def __getattr__(self, name):
        return getattr(self._reader, name)

    def complete(self, messages, params):
        digest = hashlib.sha256(json.dumps([messages, params.as_payload()], sort_keys=True).encode()).hexdigest()
        with self._lock:
            self._calls.setdefault(threading.get_ident(), []).append(digest)
        return self._reader.complete(messages, params)

    def taken(self) -> list[str]:
        with self._lock:
            return self._calls.pop(threading.get_ident(), [])


def random_choices(rng: random.Random, service: bool = False) -> dict:
    """One question's choices; ``service``: as an HTTP request gives them (a retriever's window among its
    options)."""
    strategy = rng.choice(["rag", "op-rag", "lc", "self-route", "self-route", "cascade", "closed-book"])
    choices: dict = {"strategy": strategy, "retriever": rng.choice(["bm25", "dense", "hybrid", "sentence-window"]),
                     "max_tokens": rng.choice([4, 8, 12])}
    options = {}
    if choices["retriever"] == "sentence-window":
        if service or rng.random() < 0.5:
            options["window"] = rng.randint(0, 4)
        else:
            choices["window"] = rng.randint(0, 4)
    if rng.random() < 0.3:
        choices["budget"] = rng.choice([48, 96, 200])
    else:
        choices["k"] = rng.randint(1, 6)
    if rng.random() < 0.5:
        choices["order"] = rng.choice(["score", "document"])
    if strategy in ("self-route", "cascade") and rng.random() < 0.7:
        choices["route_threshold"] = round(rng.random(), 3)
    if strategy == "self-route" and rng.random() < 0.3:
        # A router holding an LC share decides by the reader's recent questions (by design, shared per reader), so a
        # fresh pipeline answers differently: here its threshold is fixed, or its share is 0 or 1 (no history needed).
        choices["router"] = "lara"
        choices.setdefault("route_threshold", round(rng.random(), 3))
        if rng.random() < 0.5:
            choices.pop("route_threshold", None)
            choices["lc_share"] = rng.choice([0.0, 1.0])
    if strategy == "cascade" and rng.random() < 0.6:
        options["widen"] = rng.randint(2, 4)
    return choices | ({"options": options} if options else {})


def account(answer, prompts: list[str]) -> dict:
    return {
        "route": answer.route, "text": answer.text, "prompts": prompts,
        "chunks": [(c.index, c.start, c.end, round(c.score, 5)) for c in answer.chunks],
        "calls": [(c.stage, c.prompt_tokens, c.completion_tokens) for c in answer.calls],
        "decline": answer.decline_probability, "truncated": answer.truncated_tokens,
        "sources": [(s.chunk, s.snippet) for s in answer.sources],
    }


@pytest.fixture(scope="module")
def asked(tmp_path_factory):
    rng = random.Random(33)
    documents = [needle_document(rng.randint(250, 600), facts=tuple(rng.sample(DEFAULT_FACTS, 2)), seed=seed)[0:2]
                 for seed in range(6)]
    questions = []
    for _ in range(QUESTIONS):
        document, facts = rng.choice(documents)
        questions.append((document, rng.choice(facts).question, random_choices(rng)))
    return questions


def test_eight_threads_get_what_a_fresh_pipeline_gives(asked, reader, embedder, tmp_path):
    settings = Settings(chunking="words:60", cache_dir=tmp_path)
    cache = CompletionCache(tmp_path / "completions.sqlite")

    def fresh_answer(document, question, choices):
        log = PromptLog(CachedReader(reader, cache))
        answer = Pipeline(settings, reader=log, embedder=embedder).ask(document, question, **choices)
        return account(answer, log.taken())

    expected = [fresh_answer(*q) for q in asked]

    shared_log = PromptLog(CachedReader(reader, cache))
    shared = Pipeline(settings, reader=shared_log, embedder=embedder)

    def shared_answer(q):
        document, question, choices = q
        return account(shared.ask(document, question, **choices), shared_log.taken())

    with ThreadPoolExecutor(THREADS) as pool:
        got = list(pool.map(shared_answer, asked))
    differing = [(i, asked[i][2], e, g) for i, (e, g) in enumerate(zip(expected, got)) if e != g]
    assert not differing, f"{len(differing)} of {QUESTIONS} differ; the first: {differing[0]}"
    routes = {e["route"] for e in expected}
    assert {"lc", "rag", "closed-book"} <= routes  # the choices reached every kind of answer
