"""Issue 34 item 12: model calls a client orders are paid for. A retriever that writes summaries with the reader (tree,
raptor) is offered only when the operator lists it (`--retrievers`); when it is, its summaries are written by the
collection's indexing job (issue 43), not by a request, and `search`, which makes no model call, refuses it."""

from __future__ import annotations

import httpx
import pytest
from corpus_fixtures import HashingEmbedder
from service_fixtures import running, wait_ready

from lcrag.core.errors import InputError
from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.service.answering import Answering
from lcrag.service.http.app import create_app
from lcrag.service.limits import Limits

TEXT = " ".join(f"Section {i}. The valve {i} opens at {10 + i} bar and closes at {5 + i} bar." for i in range(60))


def test_summaries_are_written_by_the_collections_indexing_not_billed_to_a_question_and_search_refuses_them(
        tmp_path, scripted_reader):
    """Issue 43: an offered retriever that writes summaries (tree) builds them in the collection's indexing job: the
    first question pays nothing for them (its only call is its answer), and search still refuses it."""
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:30", k=2, strategy="rag")
    prompts: list[str] = []
    reader = scripted_reader(lambda m: prompts.append(m[-1]["content"]) or (
        "A summary of the valves." if "ummar" in m[-1]["content"] else "12 bar"))
    pipeline = Pipeline(settings, reader=reader, embedder=HashingEmbedder())
    answering = Answering(settings, tmp_path / "collections", pipeline=pipeline, retrievers=("bm25", "tree"))
    limits = Limits(retrievers=("bm25", "tree"))
    with running(create_app(answering, None, limits)) as url:
        httpx.post(f"{url}/v1/collections", json={"name": "valves"})
        httpx.post(f"{url}/v1/collections/valves/files", files={"file": ("valves.txt", TEXT.encode())})
        wait_ready(url, "valves")
        summaries = sum("ummar" in p for p in prompts)
        assert summaries > 0  # written by the indexing job, before any question
        billed = httpx.get(f"{url}/v1/collections/valves").json()["index_cost"]  # to the collection
        assert list(billed) == ["tree"] and billed["tree"]["calls"] == summaries
        assert billed["tree"]["prompt_tokens"] > 0
        body = {"collection": "valves", "question": "When does valve 7 open?"}
        first = httpx.post(f"{url}/v1/ask", json=body | {"retriever": "tree"}, timeout=120).json()
        assert [c["stage"] for c in first["calls"]] == ["answer"], first["calls"]  # the collection paid, not it
        assert sum("ummar" in p for p in prompts) == summaries  # no summary written for the question
        refused = httpx.post(f"{url}/v1/ask", json=body | {"retriever": "raptor"}, timeout=60)
        assert refused.status_code == 400 and "--retrievers" in refused.json()["error"]["message"]
    with pytest.raises(InputError, match="search makes no model call"):
        answering.search("valves", "valve 7", 3, "tree")
