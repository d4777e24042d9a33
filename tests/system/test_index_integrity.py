"""A document's index on disk: damaged files are detected, set aside and rebuilt (issue 14, defects 8-10, 12)."""

import json
import subprocess
import sys
import textwrap
import zlib
from pathlib import Path

import numpy as np
import pytest

from lcrag.chunking import WordChunker
from lcrag.retrieval import DocumentIndex
from lcrag.core.types import Document

TOPICS = ["harbour ships anchor", "violin concert music", "volcano lava eruption", "glacier ice winter",
          "orchard apples harvest", "satellite orbit rocket", "bakery bread flour", "desert camel sand"]
DOC = Document(" ".join(f"Part {i}. The {TOPICS[i % 8]} story number {i} goes on. " + "filler " * 3
                        for i in range(40)))
QUESTIONS = ["Where did the ships anchor?", "Who played the violin?", "What about the volcano?", "camel sand"]


class HashingEmbedder:
    """Deterministic bag of words hashed into 32 unit-normalised dimensions: different text, different vector."""

    name, dimension = "hashing-test", 32

    def embed(self, texts):
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().split():
                out[row, zlib.crc32(word.strip(".?").encode()) % self.dimension] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)


def open_index(cache):
    return DocumentIndex(DOC, WordChunker(10), cache, lambda: HashingEmbedder())


def answers(index):
    hybrid = index.retriever("hybrid")
    return [[(h.chunk.index, h.chunk.text) for h in hybrid.run(q, 5)] for q in QUESTIONS]


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """Results from a clean cache, to compare the rebuilt ones with."""
    return answers(open_index(tmp_path_factory.mktemp("clean")))


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
def embeddings(directory):
    return next(directory.glob("embeddings-*.npy"))


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


# -- defect 12: concurrent builds ---------------------------------------------------------------------------------
BUILD = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, sys.argv[2])
    from test_index_integrity import DOC, HashingEmbedder, answers

    class Slow(HashingEmbedder):
        def embed(self, texts):
            time.sleep(0.05)  # widens the window in which the other processes race this one
            return super().embed(texts)

    from lcrag.chunking import WordChunker
    from lcrag.retrieval import DocumentIndex
    index = DocumentIndex(DOC, WordChunker(10), sys.argv[1], lambda: Slow())
    print(json.dumps({"answers": answers(index), "embedded": index.embedded_chunks}))
""")


def run_builds(cache, n):
    here = str(Path(__file__).parent)
    procs = [subprocess.Popen([sys.executable, "-c", BUILD, str(cache), here], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(n)]
    return [(p.returncode, out, err) for p in procs for out, err in [p.communicate(timeout=300)]]


def test_four_processes_building_one_index_all_succeed_and_build_it_once(tmp_path, clean):
    results = run_builds(tmp_path / "shared", 4)
    assert [(code, err) for code, _, err in results] == [(0, "")] * 4
    outputs = [json.loads(out) for _, out, _ in results]
    assert all(o["answers"] == json.loads(json.dumps(clean)) for o in outputs)
    assert sorted(o["embedded"] for o in outputs) == [0, 0, 0, len(open_index(tmp_path / "single").chunks)]
    [shared] = (tmp_path / "shared" / "indexes").glob("*/")
    [single] = (tmp_path / "single" / "indexes").glob("*/")
    answers(open_index(tmp_path / "single"))
    for name in ["chunks.jsonl", "meta.json", embeddings(single).name]:
        assert (shared / name).read_bytes() == (single / name).read_bytes()
    assert sorted(p.name for p in shared.iterdir()) == sorted(p.name for p in single.iterdir())  # no leftovers
    assert len(list((shared / "bm25").glob("*.idx"))) == len(list((single / "bm25").glob("*.idx")))
