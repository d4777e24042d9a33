"""Corpus ingestion, retrieval units (LongRAG Algorithm 1), the corpus index's BM25 and MaxP search."""

from __future__ import annotations

import numpy as np
from corpus_fixtures import RECORDS, write_corpus

from lcrag.retrieval.corpus import CorpusIndex


# -- ingestion -----------------------------------------------------------------------------------------------------


# -- pieces and units ----------------------------------------------------------------------------------------------


# -- the index -----------------------------------------------------------------------------------------------------
# -- --out, settings and content identity, concurrent builds (issue 14: defects 5 and 22) --------------------------


def _build_in_process(src, out, queue):
    from lcrag.retrieval.corpus import CorpusBuildConfig, CorpusIndex
    from lcrag.core.tokenization import WordCounter

    config = CorpusBuildConfig(units=("document", "grouped"), embedder=None, piece_words=5, group_tokens=40)
    queue.put(list(CorpusIndex.build(src, out, config, WordCounter())[1].seconds))


def test_concurrent_builds_of_one_index_build_it_once(tmp_path):
    import multiprocessing

    src, out = write_corpus(tmp_path / "c.jsonl", RECORDS), tmp_path / "idx"
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [context.Process(target=_build_in_process, args=(src, out, queue)) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
    assert [w.exitcode for w in workers] == [0, 0, 0]
    steps = sorted((queue.get(timeout=5) for _ in workers), key=len)
    assert steps[:2] == [[], []] and "ingest" in steps[2]  # one process built; the others found it done
    single = tmp_path / "single"
    _build_in_process(src, single, context.Queue())
    for kind in ("document", "grouped"):  # the same index as one build alone
        for name in ("ptr", "docs", "piece_unit"):
            assert np.array_equal(getattr(CorpusIndex(out).units(kind), name), getattr(CorpusIndex(single).units(kind), name))
