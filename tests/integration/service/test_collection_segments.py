"""Collections that grow file by file (issue 36, items 1 and 2): a file added or removed changes the collection's
answers and sources (real BM25; real MiniLM for hybrid), the same file in two collections is processed once,
indexing never holds the reader's lock, and LC over a collection larger than the window reads whole top files."""

from __future__ import annotations

import threading

import pytest

from lcrag.chunking import SentenceChunker
from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.service.answering import Answering
from lcrag.store.segments import SENTENCES

CRANE = "The crane reset code is 7781. Hold the red button for five seconds before entering the reset code."
PUMP = "The pump pressure limit is 4711 kilopascal. Open the bypass valve when the pump pressure alarm sounds."


def make(tmp_path, reader, **settings) -> Answering:
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", k=2, strategy="rag",
                        **settings)
    return Answering(settings, tmp_path / "collections", pipeline=Pipeline(settings, reader=reader))


def add(answering: Answering, collection: str, name: str, text: str) -> None:
    answering.collections.add_file(collection, name, iter([text.encode()]), 1 << 30)


def files_found(answering: Answering, collection: str, query: str) -> list[str]:
    return [hit["file"] for hit in answering.search(collection, query, 2)]


@pytest.mark.parametrize("retriever", ["bm25", "hybrid"])
def test_a_file_added_or_deleted_changes_the_answers_and_sources(tmp_path, scripted_reader, retriever):
    answering = make(tmp_path, scripted_reader(lambda m: "7781"), retriever=retriever)
    try:
        answering.collections.create("ops")
        add(answering, "ops", "crane.txt", CRANE)
        assert answering.collections.wait("ops").state == "ready"
        assert set(files_found(answering, "ops", "pump pressure limit")) <= {"crane.txt"}  # nothing else there
        add(answering, "ops", "pump.txt", PUMP)
        assert answering.collections.wait("ops").state == "ready"
        assert files_found(answering, "ops", "pump pressure limit")[0] == "pump.txt"
        answer = answering.ask("ops", "What is the pump pressure limit?", {})
        assert answer.sources and answer.sources[0].file == "pump.txt"
        answering.collections.remove_file("ops", "pump.txt")
        answering.forget("ops")
        assert answering.collections.wait("ops").state == "ready"
        assert "pump.txt" not in files_found(answering, "ops", "pump pressure limit")
        answer = answering.ask("ops", "What is the pump pressure limit?", {})
        assert {source.file for source in answer.sources} == {"crane.txt"}
    finally:
        answering.close()


def test_the_same_file_in_two_collections_is_processed_once(tmp_path, scripted_reader):
    answering = make(tmp_path, scripted_reader(), retriever="hybrid")
    made = []
    put = answering.collections.put_segment
    answering.collections.put_segment = lambda segment: made.append(segment.key) or put(segment)
    try:
        for collection in ("ops", "field"):
            answering.collections.create(collection)
            add(answering, collection, "crane.txt", CRANE)
            assert answering.collections.wait(collection).state == "ready"
            assert files_found(answering, collection, "reset code") == ["crane.txt"]
        assert answering.parser.parses == 1  # parsed once
        assert len(made) == len(set(made)) == 3  # chunked once, embedded once, its sentences cut once
        assert {key.chunking for key in made} == {"words:20:0", SENTENCES}
    finally:
        answering.close()


def test_answers_quote_the_sentences_the_indexing_job_cut(tmp_path, scripted_reader, monkeypatch):
    answering = make(tmp_path, scripted_reader(lambda m: "five seconds"))
    try:
        answering.collections.create("ops")
        add(answering, "ops", "crane.txt", CRANE)
        add(answering, "ops", "pump.txt", PUMP)
        assert answering.collections.wait("ops").state == "ready"

        def split_in_a_question(text):
            raise AssertionError("a question split a cited chunk into sentences")

        monkeypatch.setattr(SentenceChunker, "sentence_spans", staticmethod(split_in_a_question))
        answer = answering.ask("ops", "How long do I hold the red button?", {})
        assert answer.sources[0].file == "crane.txt"
        assert answer.sources[0].snippet.startswith("Hold the red button for five seconds")
    finally:
        answering.close()


def test_a_chunks_stored_sentences_are_clipped_to_it(tmp_path, scripted_reader):
    text = " ".join(f"Sentence number {n} says that valve {n} stays open for {n} minutes." for n in range(12))
    answering = make(tmp_path, scripted_reader())
    try:
        answering.collections.create("ops")
        add(answering, "ops", "a.txt", CRANE)
        add(answering, "ops", "valves.txt", text)
        assert answering.collections.wait("ops").state == "ready"
        document, _ = answering._load("ops")
        index = answering.base.index(document)
        covered = 0
        for chunk in index.chunks:
            spans = index.sentence_spans(chunk.start, chunk.end)
            assert all(0 <= a < b <= chunk.end - chunk.start for a, b in spans)
            assert [a for a, _ in spans] == sorted(a for a, _ in spans)
            words = [w for a, b in spans for w in chunk.text[a:b].split()]
            assert words == chunk.text.split()  # every word of the chunk, each in one sentence, in order
            covered += sum(1 for a, b in spans if chunk.text[a:b].rstrip().endswith("minutes."))
        assert covered == 12  # each sentence ends in exactly one chunk
    finally:
        answering.close()


def test_indexing_does_not_hold_the_reader_lock(tmp_path, scripted_reader):
    """A question on another collection is answered while a large upload's indexing is held in its segments."""
    answering = make(tmp_path, scripted_reader(lambda m: "7781"))
    try:
        answering.collections.create("ready")
        add(answering, "ready", "crane.txt", CRANE)
        assert answering.collections.wait("ready").state == "ready"
        entered, release, order = threading.Event(), threading.Event(), []
        spans = answering.segments.spans

        def held(entry, chunker, make=True):
            if entry.name == "big.txt" and make and not entered.is_set():
                entered.set()
                release.wait(60)
                order.append("indexed")
            return spans(entry, chunker, make)

        answering.segments.spans = held
        answering.collections.create("big")
        add(answering, "big", "big.txt", PUMP * 2000)
        assert entered.wait(60)
        answer = answering.ask("ready", "What is the crane reset code?", {})
        order.append("answered")
        release.set()
        assert answering.collections.wait("big").state == "ready"
        assert answer.text == "7781" and order == ["answered", "indexed"]
    finally:
        answering.close()


def _topic(word: str, n: int) -> str:
    return " ".join(f"{word} note {i}." for i in range(n))


def test_lc_over_a_collection_larger_than_the_window_reads_whole_top_files(tmp_path, scripted_reader):
    reader = scripted_reader(lambda m: "ok", context_window=700)
    answering = make(tmp_path, reader)
    try:
        answering.collections.create("big")
        for word in ("alpha", "beta", "gamma", "delta", "omega"):
            add(answering, "big", f"{word}.txt", _topic(word, 60))  # ~180 tokens a file; ~900 in all
        assert answering.collections.wait("big").state == "ready"
        answer = answering.ask("big", "What does the gamma note say?", {"strategy": "lc", "max_tokens": 64})
        assert answer.route == "lc" and answer.retrieval["unit"] == "file"
        read = answer.retrieval["files"]
        assert "gamma.txt" in read and 1 <= len(read) < 5
        prompt = "\n".join(message["content"] for message in reader.calls[-1])
        for word in ("alpha", "beta", "gamma", "delta", "omega"):  # each file whole or not at all
            assert (_topic(word, 60) in prompt) == (f"{word}.txt" in read)
    finally:
        answering.close()


def test_lc_below_the_window_reads_the_collection_as_before(tmp_path, scripted_reader):
    reader = scripted_reader(lambda m: "ok", context_window=100_000)
    answering = make(tmp_path, reader)
    try:
        answering.collections.create("small")
        add(answering, "small", "crane.txt", CRANE)
        add(answering, "small", "pump.txt", PUMP)
        assert answering.collections.wait("small").state == "ready"
        answer = answering.ask("small", "What is the pump pressure limit?", {"strategy": "lc"})
        assert answer.route == "lc" and answer.retrieval is None
        prompt = "\n".join(message["content"] for message in reader.calls[-1])
        assert CRANE in prompt and PUMP in prompt
    finally:
        answering.close()


def test_a_large_file_is_chunked_in_a_process_of_its_own_as_here(tmp_path, scripted_reader, monkeypatch):
    """Its text goes to that process through a temporary file written a piece at a time (pickled with the call, it
    held the interpreter for its whole length), removed after; any text, a lone surrogate included."""
    import tempfile

    from lcrag.chunking import make_chunker
    from lcrag.store import segments
    from lcrag.store.segments import _CHUNK_HERE_CHARS, _spans
    from lcrag.core.types import Document

    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    written = []
    monkeypatch.setattr(segments, "_text_file", lambda text, write=segments._text_file: written.append(write(text))
                        or written[-1])
    answering = make(tmp_path, scripted_reader())
    try:
        line = PUMP + " été 😀 \ud800 "
        document = Document(text=line * (_CHUNK_HERE_CHARS // len(line) + 2))
        chunker = make_chunker("words", 20)
        assert answering.segments._chunk(document, chunker) == _spans(chunker, document)
        assert answering.segments._pool is not None  # cut elsewhere
        assert len(written) == 1 and written[0].parent == temporary and not list(temporary.iterdir())
    finally:
        answering.close()


def test_a_file_deleted_over_http_leaves_the_collection_and_an_upload_without_a_file_is_a_422(tmp_path,
                                                                                            scripted_reader):
    import httpx
    from service_fixtures import running, wait_ready

    from lcrag.service.http.app import create_app

    answering = make(tmp_path, scripted_reader(lambda m: "7781"))
    with running(create_app(answering)) as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        for name, text in (("crane.txt", CRANE), ("pump.txt", PUMP)):
            reply = httpx.post(f"{url}/v1/collections/ops/files", files={"file": (name, text.encode())})
            assert reply.status_code == 201 and reply.json()["name"] == name
        assert wait_ready(url, "ops")["state"] == "ready"
        assert httpx.delete(f"{url}/v1/collections/ops/files/pump.txt").status_code == 200
        assert httpx.delete(f"{url}/v1/collections/ops/files/pump.txt").status_code == 404
        assert wait_ready(url, "ops")["state"] == "ready"
        assert [f["name"] for f in httpx.get(f"{url}/v1/collections/ops").json()["files"]] == ["crane.txt"]
        sources = httpx.post(f"{url}/v1/ask", json={"collection": "ops", "question": "pump pressure?"}).json()["sources"]
        assert {s["file"] for s in sources} == {"crane.txt"}
        bad = httpx.post(f"{url}/v1/collections/ops/files", files={"other": ("a.txt", b"x")})
        assert bad.status_code == 422 and "error" in bad.json()
    answering.close()


def test_self_routes_lc_step_over_a_collection_larger_than_the_window_reads_whole_files(tmp_path, scripted_reader):
    replies = iter(["unanswerable", "ok"])  # the RAG step declines, the LC step answers
    reader = scripted_reader(lambda m: next(replies), context_window=700)
    answering = make(tmp_path, reader)
    try:
        answering.collections.create("big")
        for word in ("alpha", "beta", "gamma", "delta", "omega"):
            add(answering, "big", f"{word}.txt", _topic(word, 60))
        assert answering.collections.wait("big").state == "ready"
        answer = answering.ask("big", "What does the gamma note say?", {"strategy": "self-route", "max_tokens": 64})
        assert answer.route == "lc" and "gamma.txt" in answer.retrieval["files"]
        assert _topic("gamma", 60) in "\n".join(message["content"] for message in reader.calls[-1])
    finally:
        answering.close()


def test_a_collection_of_one_file_of_several_records_is_one_part(tmp_path, scripted_reader):
    answering = make(tmp_path, scripted_reader(lambda m: "7781"))
    try:
        answering.collections.create("notes")
        records = "\n".join('{"id": "%d", "title": "t%d", "text": "%s"}' % (i, i, text)
                            for i, text in enumerate((CRANE, PUMP)))
        add(answering, "notes", "notes.jsonl", records)
        assert answering.collections.wait("notes").state == "ready"
        document = answering.document("notes")
        assert len(document.parts) == 1 and len(document.parts[0][1].parts) == 2
        assert files_found(answering, "notes", "pump pressure limit")[0].startswith("notes.jsonl")
    finally:
        answering.close()
