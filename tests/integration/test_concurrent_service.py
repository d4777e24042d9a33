"""The differential concurrency test through a real `lcrag serve` (issue 33): 16 clients ask 64 questions over 6
collections at once, each with its own random choices; every answer's route, chunks, calls (stage and tokens), text
and sources equal those of a fresh pipeline asked the same question alone in this process.

As in test_concurrent_questions.py, the fresh pipelines answer first and fill the completion cache the server
shares (its cache directory), so the server's answers come from it exactly when it sends the same prompts."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor

import httpx
from service_fixtures import free_port, lcrag_process, wait_ready
from tests.integration.test_concurrent_questions import random_choices

from lcrag import Pipeline, Settings
from lcrag.readers import CachedReader, CompletionCache
from lcrag.service.answering import Answering
from lcrag.documents.synthetic import DEFAULT_FACTS, needle_document

CLIENTS = 16
QUESTIONS = 64


def comparable(answer: dict) -> dict:
    return {
        "route": answer["route"], "text": answer["text"], "decline": answer.get("decline_probability"),
        "chunks": [(c["index"], c["start"], c["end"], round(c["score"], 5)) for c in answer["chunks"]],
        "calls": [(c["stage"], c["prompt_tokens"], c["completion_tokens"]) for c in answer["calls"]],
        "sources": [(s.get("chunk"), s["snippet"]) for s in answer.get("sources", [])],
    }


def test_sixteen_clients_of_lcrag_serve_get_what_a_fresh_pipeline_gives(tmp_path, reader, embedder):
    rng = random.Random(34)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    cache = tmp_path / "cache"
    offered = [arg for name in ("bm25", "dense", "hybrid", "sentence-window") for arg in ("--retrievers", name)]
    with lcrag_process("serve", "--port", str(port), "--cache-dir", str(cache), "--max-waiting", str(CLIENTS),
                       *offered, url=url, cache_dir=cache):
        facts = {}
        for n in range(6):
            document, planted = needle_document(rng.randint(250, 600), facts=tuple(rng.sample(DEFAULT_FACTS, 2)),
                                                seed=100 + n)
            facts[f"c{n}"] = planted
            httpx.post(f"{url}/v1/collections", json={"name": f"c{n}"}).raise_for_status()
            httpx.post(f"{url}/v1/collections/c{n}/files",
                       files={"file": (f"notes-{n}.txt", document.text.encode())}).raise_for_status()
        for name in facts:
            assert wait_ready(url, name, timeout=300)["state"] == "ready"
        asked = []
        for _ in range(QUESTIONS):
            name = rng.choice(sorted(facts))
            asked.append((name, rng.choice(facts[name]).question, random_choices(rng, service=True)))

        # The collections' documents as the service reads them, answered by fresh pipelines, one question each.
        documents = Answering(Settings(cache_dir=cache), cache / "collections")
        completions = CompletionCache(cache / "completions.sqlite")
        served = Settings(cache_dir=cache, chunking=Settings().chunking_for(Settings().strategy))  # one, as served

        def fresh(name, question, choices):
            pipeline = Pipeline(served, reader=CachedReader(reader, completions), embedder=embedder)
            return comparable(pipeline.ask(documents.document(name), question,
                                           **choices).to_dict())

        expected = [fresh(*q) for q in asked]

        def ask(q):
            name, question, choices = q
            reply = httpx.post(f"{url}/v1/ask", json={"collection": name, "question": question, **choices},
                               timeout=600)
            assert reply.status_code == 200, reply.text
            return comparable(reply.json())

        with ThreadPoolExecutor(CLIENTS) as pool:
            got = list(pool.map(ask, asked))
    differing = [(i, asked[i][2], e, g) for i, (e, g) in enumerate(zip(expected, got)) if e != g]
    assert not differing, f"{len(differing)} of {QUESTIONS} differ; the first: {differing[0]}"
