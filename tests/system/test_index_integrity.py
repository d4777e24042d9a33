"""A document's index built by four processes at once: all succeed and it is built once (issue 14, defect 12; its
damaged files set aside and rebuilt: tests/unit/test_index_integrity.py)."""

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from index_fixtures import answers, clean, embeddings, open_index  # noqa: F401 - clean: a fixture

# -- defect 12: concurrent builds ---------------------------------------------------------------------------------
BUILD = textwrap.dedent("""
    import json, sys, time
    sys.path.insert(0, sys.argv[2])
    from index_fixtures import DOC, HashingEmbedder, answers

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
    here = str(Path(__file__).parents[1])  # tests/, where index_fixtures is
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
