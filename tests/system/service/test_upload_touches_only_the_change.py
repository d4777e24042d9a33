"""Issue 43, item 2: a change of a collection touches only what changed, on the embedded store and on PostgreSQL.
After an upload only the new file is parsed, hashed and chunked (counted with spies on the sandbox, file_digest and
the segments' spans); after a removal nothing is; and the document and chunks made from the previous version are
those a whole reading makes (text, parts, content hash, chunks), with sources citing the right files."""

from __future__ import annotations

import pytest
from postgres_fixtures import database, postgres  # noqa: F401 - fixtures

import lcrag.service.answering as answering_module
from lcrag.core.types import SpanChunk
from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.service.answering import Answering
from lcrag.store.collections import Listed
from lcrag.store.segments import SENTENCES, CollectionIndex, collection_document


def text(number: int) -> str:
    return f"Unit {number} has the code {7000 + number}. Its pump {number} runs at {40 + number} bar.\n"


@pytest.fixture(params=["embedded", "postgresql"])
def replica(request, tmp_path):
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:8", k=2, strategy="rag")
    store = None
    if request.param == "postgresql":
        from lcrag.store.postgres import PostgresCollections

        url = request.getfixturevalue("database")
        store = lambda root, index: PostgresCollections(url, root, index, lease=5.0)  # noqa: E731
    answering = Answering(settings, tmp_path / "collections", pipeline=Pipeline(settings), store=store,
                          retrievers=("bm25",))
    if store is not None:
        answering.collections.start_jobs(1)
    yield answering
    answering.close()


def upload(answering: Answering, name: str, number: int) -> None:
    answering.collections.add_file("ops", name, iter([text(number).encode()]), 1 << 20)
    answering.forget("ops")  # as the route does after every upload
    assert answering.collections.wait("ops", 60).state == "ready"


class Spies:
    """What the collection's indexing parses, hashes and chunks (cuts into chunks, or places the chunks of in the
    collection's text), by file name."""

    def __init__(self, answering: Answering, monkeypatch):
        self.parsed, self.hashed, self.chunked, self.placed, self.sentences = [], [], [], [], []
        load_files, digest = answering.parser.load_files, answering_module.file_digest
        chunk, spans = answering.segments._chunk, answering.segments.spans
        monkeypatch.setattr(answering.parser, "load_files", lambda paths, *args, **options: self.parsed.extend(
            p.name for p in paths) or load_files(paths, *args, **options))
        monkeypatch.setattr(answering_module, "file_digest", lambda path: self.hashed.append(path.name) or digest(path))
        monkeypatch.setattr(answering.segments, "_chunk", lambda document, chunker: self._seen(
            chunker, self.chunked, document.source) or chunk(document, chunker))
        monkeypatch.setattr(answering.segments, "spans", lambda entry, chunker, make=True: self._seen(
            chunker, self.placed, entry.name) or spans(entry, chunker, make))

    def _seen(self, chunker, where: list, name: str) -> None:
        """A file's chunks in ``where``; its sentences (cut for the answers' quotes) in ``sentences``."""
        (self.sentences if chunker.key == SENTENCES else where).append(name)

    def clear(self) -> None:
        for seen in (self.parsed, self.hashed, self.chunked, self.placed, self.sentences):
            seen.clear()


def test_after_a_change_only_the_changed_file_is_parsed_hashed_and_chunked(replica, monkeypatch):
    replica.collections.create("ops")
    for number in range(6):
        upload(replica, f"f{number}.txt", number)
    spies = Spies(replica, monkeypatch)
    upload(replica, "f9.txt", 9)  # after the others: the others' chunks are the last version's
    assert (spies.parsed, spies.hashed, spies.chunked, spies.placed) == (["f9.txt"],) * 4
    assert spies.sentences == ["f9.txt", "f9.txt"]  # cut (chunked) once, and read from memory by the job
    spies.clear()
    upload(replica, "f3b.txt", 33)  # among them: the chunks of the files after it are placed again, not cut again
    assert (spies.parsed, spies.hashed, spies.chunked) == (["f3b.txt"],) * 3
    assert spies.placed == ["f3b.txt", "f4.txt", "f5.txt", "f9.txt"]
    spies.clear()
    replica.collections.remove_file("ops", "f1.txt")
    replica.forget("ops")
    assert replica.collections.wait("ops", 60).state == "ready"
    assert (spies.parsed, spies.hashed, spies.chunked) == ([], [], [])
    hits = replica.search("ops", "code 7033 pump 33", 1)
    assert hits[0]["file"] == "f3b.txt" and "7033" in hits[0]["snippet"]
    assert "f1.txt" not in {hit["file"] for hit in replica.search("ops", "code 7001 pump 1", 7)}


def test_the_document_made_from_the_last_version_is_the_one_a_whole_reading_makes(replica):
    replica.collections.create("ops")
    for number in (0, 2, 4, 6):
        upload(replica, f"f{number}.txt", number)
    changes = [("add", "f8.txt", 8), ("add", "f3.txt", 3), ("remove", "f0.txt", 0), ("remove", "f8.txt", 8),
               ("add", "f0.txt", 10)]  # after, among, first, last, and a name again with another content
    for change, name, number in changes:
        if change == "add":
            upload(replica, name, number)
        else:
            replica.collections.remove_file("ops", name)
            replica.forget("ops")
            assert replica.collections.wait("ops", 60).state == "ready"
        made = replica.document("ops")
        assert [entry.name for entry in made.files] == [file["name"] for file in replica.collections.files("ops")]
        whole = collection_document("ops", made.collection_id, list(made.files), replica.segments)
        assert made.basis is not None  # made from the previous version's document
        assert (made.text, made.content_hash) == (whole.text, whole.content_hash)
        assert [(offset, part.text) for offset, part in made.parts] == [(o, p.text) for o, p in whole.parts]
        chunker = replica.base.chunker("words:8")
        cache_dir = replica.base.cache_dir
        made_chunks = CollectionIndex(made, chunker, cache_dir).chunks
        assert made_chunks == CollectionIndex(whole, chunker, cache_dir).chunks
        # each chunk reads its text from its file's own text (held once), never a copy of it
        texts = {id(part.text) for _, part in made.parts}
        assert all(isinstance(c, SpanChunk) and id(c.source) in texts for c in made_chunks)
        assert all(c.text == made.text[c.start:c.end] for c in made_chunks)
    assert [entry.name for entry in replica.document("ops").files] == ["f0.txt", "f2.txt", "f3.txt", "f4.txt",
                                                                        "f6.txt"]
    hit = replica.search("ops", "code 7010 pump 10", 1)[0]
    assert hit["file"] == "f0.txt" and "7010" in hit["snippet"]


def test_a_listing_says_which_names_changed_since_a_version_or_that_it_cannot(tmp_path):
    folder = tmp_path / "files"
    folder.mkdir()
    (folder / "a.txt").write_text("a")
    first = Listed.of("id", 1, folder)
    (folder / "b.txt").write_text("b")
    second = first.updated(2, folder, {"b.txt": False})
    third = second.updated(4, folder, {"a.txt": True})  # (its removal is believed: it may be being unlinked)
    assert (second.names, third.names) == (["a.txt", "b.txt"], ["b.txt"])
    assert third.changed(("id", 1)) == {"a.txt", "b.txt"} and third.changed(("id", 2)) == {"a.txt"}
    assert third.changed(("id", 3)) == {"a.txt"}  # within a change: looked at again whole
    assert third.changed(("id", 4)) == frozenset()
    assert third.changed(("other", 2)) is None and third.changed(None) is None
    assert Listed.of("id", 4, folder).changed(("id", 2)) is None  # listed whole: what changed before is unknown
