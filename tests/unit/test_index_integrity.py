"""A document's index on disk: damaged files are detected, set aside and rebuilt (issue 14, defects 8-10; defect 12,
concurrent builds: tests/system/test_index_integrity.py)."""

import json
import logging

import numpy as np
import pytest
from index_fixtures import DOC, QUESTIONS, HashingEmbedder, answers, clean, embeddings, open_index  # noqa: F401

from lcrag.retrieval.sentence_window import SentenceWindowRetriever


class WhitespaceCounter:
    name = "whitespace-counter"

    def encode(self, text):
        return text.split()


def built(cache):
    """An index with every part on disk: chunks, BM25, embeddings and a token table."""
    index = open_index(cache)
    answers(index)
    index.chunk_tokens(index.chunks[:3], WhitespaceCounter())
    return index.dir


# -- damage, each as a function of the index directory ----------------------------------------------------------
def truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


def zero_rows(directory):
    path = embeddings(directory)
    vectors = np.load(path)
    vectors[5:9] = 0  # still a valid .npy of the right shape: only the checksum can tell
    np.save(path, vectors)


def rewrite_chunk_lines(directory, change):
    path = directory / "chunks.jsonl"
    path.write_text("".join(change(path.read_text().splitlines(keepends=True))))


def shift_offsets(lines):
    return [json.dumps([i, s + 7, e + 7]) + "\n" for i, s, e in map(json.loads, lines[:-1])] + lines[-1:]


def largest_segment_file(directory):
    return max((p for p in (directory / "bm25").iterdir() if p.is_file() and p.name != "meta.json"),
               key=lambda p: p.stat().st_size)


DAMAGE = {
    # defect 8: embeddings
    "embeddings truncated": lambda d: truncate(embeddings(d)),
    "embeddings emptied": lambda d: embeddings(d).write_bytes(b""),
    "embeddings rows zeroed": zero_rows,
    # defect 9: the chunk table
    "chunks shifted": lambda d: rewrite_chunk_lines(d, shift_offsets),
    "chunks lines removed": lambda d: rewrite_chunk_lines(d, lambda lines: lines[:3] + lines[6:]),
    "chunks not JSON": lambda d: rewrite_chunk_lines(d, lambda lines: lines[:2] + ["{oops\n"] + lines[3:]),
    "chunks empty": lambda d: (d / "chunks.jsonl").write_text(""),
    # defect 10: tantivy's files
    "bm25 segment truncated": lambda d: truncate(largest_segment_file(d)),
    "bm25 meta.json corrupted": lambda d: (d / "bm25" / "meta.json").write_text('{"segments": [oops'),
    # the index's own bookkeeping
    "manifest corrupted": lambda d: (d / "manifest.json").write_text("not json"),
    "token table corrupted": lambda d: next(d.glob("tokens-text-*.json")).write_text("[1, 2"),
}


@pytest.mark.parametrize("damage", DAMAGE)
def test_damaged_index_file_is_set_aside_and_rebuilt(tmp_path, clean, caplog, damage):
    directory = built(tmp_path)
    DAMAGE[damage](directory)
    with caplog.at_level(logging.WARNING, logger="lcrag"):
        index = open_index(tmp_path)
        assert answers(index) == clean
        index.chunk_tokens(index.chunks[:3], WhitespaceCounter())
    [warning] = [r.getMessage() for r in caplog.records]  # one line, naming what was set aside and why
    assert "damaged" in warning and "set aside" in warning and "rebuilt" in warning
    assert list(directory.parent.glob("*.damaged-*")) or list(directory.glob("*.damaged-*"))
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="lcrag"):
        again = open_index(tmp_path)  # the rebuilt index passes its own check
        assert answers(again) == clean and again.embedded_chunks == 0
    assert not caplog.records


def test_intact_index_reopens_without_rebuilding_or_warning(tmp_path, clean, caplog):
    built(tmp_path)
    with caplog.at_level(logging.WARNING, logger="lcrag"):
        for _ in range(3):  # tantivy's own lock files change on every open; they are not content
            index = open_index(tmp_path)
            assert answers(index) == clean and index.embedded_chunks == 0
    assert not caplog.records


def test_index_from_before_manifests_is_rebuilt_once(tmp_path, clean, caplog):
    directory = built(tmp_path)
    (directory / "manifest.json").unlink()
    with caplog.at_level(logging.WARNING, logger="lcrag"):
        assert answers(open_index(tmp_path)) == clean
    [warning] = [r.getMessage() for r in caplog.records]
    assert "manifest.json is missing" in warning


def test_damaged_sentence_vectors_are_rebuilt(tmp_path, caplog):
    clean = SentenceWindowRetriever.open(DOC, HashingEmbedder(), tmp_path / "clean").run(QUESTIONS[0], 3)
    SentenceWindowRetriever.open(DOC, HashingEmbedder(), tmp_path / "cache")
    vectors = next((tmp_path / "cache" / "sentences").glob("*/vectors.npy"))
    matrix = np.load(vectors)
    matrix[:] = 0
    np.save(vectors, matrix)
    with caplog.at_level(logging.WARNING, logger="lcrag"):
        rebuilt = SentenceWindowRetriever.open(DOC, HashingEmbedder(), tmp_path / "cache").run(QUESTIONS[0], 3)
    assert rebuilt == clean
    assert len(caplog.records) == 1 and "vectors.npy" in caplog.records[0].getMessage()


def test_damaged_summary_tree_is_set_aside_and_rebuilt(tmp_path, caplog):
    from lcrag.retrieval.summaries import SummaryTree
    from lcrag.retrieval.tree_index import open_tree_index
    from lcrag.core.types import Chunk

    builds = []

    def build():
        builds.append(1)
        nodes = [Chunk(0, 0, 4, "leaf", 0), Chunk(1, 0, 4, "root", 1)]
        return SummaryTree("doc", nodes, [[], [0]], HashingEmbedder().embed(["leaf", "root"]), built_now=True)

    directory = tmp_path / "tree-x"
    first = open_tree_index(directory, build)
    truncate(directory / "vectors.npy")
    with caplog.at_level(logging.WARNING, logger="lcrag"):
        again = open_tree_index(directory, build)
    assert len(builds) == 2 and np.array_equal(again.vectors, first.vectors)
    [warning] = [r.getMessage() for r in caplog.records]
    assert "tree-x is damaged" in warning
    assert not open_tree_index(directory, build).built_now and len(builds) == 2
