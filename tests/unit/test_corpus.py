"""Corpus ingestion, retrieval units (LongRAG Algorithm 1), the corpus index's BM25 and MaxP search."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
# RECORDS, HashingEmbedder and write_corpus are also imported from here by tests/unit/test_corpus_source.py
from corpus_fixtures import RECORDS, HashingEmbedder, write_corpus  # noqa: F401

from lcrag.chunking.units import (
    Graph,
    cut_pieces,
    group_documents,
    links_graph,
    make_units,
    mention_key,
    mentions_graph,
    passage_spans,
)
from lcrag.documents.corpus import CorpusStore
from lcrag.core.errors import InputError
from lcrag.retrieval.corpus import CorpusBuildConfig, CorpusIndex
from lcrag.core.tokenization import WordCounter


# -- ingestion -----------------------------------------------------------------------------------------------------
def test_ingest_streams_gzip_and_reads_back_by_position(tmp_path):
    src = write_corpus(tmp_path / "c.jsonl.gz", RECORDS, gz=True)
    store, report = CorpusStore.ingest(src, tmp_path / "corpus.sqlite", batch=2)
    assert report.documents == len(store) == 5 and report.skipped == 0
    assert store.get(3).title == "Zorblax Vault"
    assert [d.id for d in store.get_many([4, 0, 2])] == ["e", "a", "c"]  # the order asked for
    assert [d.idx for d in store.iter(batch=2)] == [0, 1, 2, 3, 4]
    assert store.get(0).links == ("Shirley Temple",)
    assert store.lookup(["Shirley Temple", "d", "nope"]) == {"Shirley Temple": 1, "d": 3}


def test_malformed_record_names_file_and_line_or_is_skipped(tmp_path):
    src = tmp_path / "c.jsonl"
    src.write_text(json.dumps(RECORDS[0]) + "\n{not json\n" + json.dumps({"title": "x"}) + "\n" + json.dumps(RECORDS[1]) + "\n")
    with pytest.raises(InputError, match=r"c\.jsonl:2: invalid JSON"):
        CorpusStore.ingest(src, tmp_path / "s.sqlite")
    assert not (tmp_path / "s.sqlite").exists()  # nothing half-built left behind
    store, report = CorpusStore.ingest(src, tmp_path / "s.sqlite", skip_bad=True)
    assert len(store) == 2 and report.skipped == 2
    assert "c.jsonl:3: missing or empty 'text'" in report.errors[1]


def test_empty_or_missing_corpus_is_a_clear_error(tmp_path):
    with pytest.raises(InputError, match="not found"):
        CorpusStore.ingest(tmp_path / "none.jsonl", tmp_path / "s.sqlite")
    (tmp_path / "e.jsonl").write_text("\n")
    with pytest.raises(InputError, match="no documents"):
        CorpusStore.ingest(tmp_path / "e.jsonl", tmp_path / "s.sqlite")


# -- pieces and units ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("words,expected", [(105, [105]), (250, [83, 84, 83]), (40, [40]), (199, [100, 99])])
def test_passages_are_balanced_and_tile_the_words(words, expected):
    text = " ".join(f"w{i}" for i in range(words))
    spans = passage_spans(text, 100)
    assert [len(text[a:b].split()) for a, b in spans] == expected
    assert " ".join(text[a:b] for a, b in spans) == text


def test_algorithm1_groups_by_ascending_degree_within_the_size_limit():
    # edges 0-1, 1-2, 2-3, 4-5; worked by hand from the paper's pseudo-code (see the comments)
    src, dst = np.array([0, 1, 2, 4]), np.array([1, 2, 3, 5])
    graph = Graph.from_edges(6, src, dst)
    assert graph.degree.tolist() == [1, 2, 2, 1, 1, 1]
    sizes = np.ones(6, dtype=np.int64)
    # order 0,3,4,5,1,2: 5 joins {4}; 1 joins {0}; 2 joins {3} (size 1 first), then {0,1} would make 4 > 3
    assert group_documents(graph, sizes, 3) == [[0, 1], [2, 3], [4, 5]]
    assert group_documents(graph, sizes, 4) == [[0, 1, 2, 3], [4, 5]]
    assert group_documents(graph, sizes, 1) == [[0], [1], [2], [3], [4], [5]]
    # the same relation given in another order gives the same groups
    perm = [3, 1, 0, 2]
    assert group_documents(Graph.from_edges(6, dst[perm], src[perm]), sizes, 3) == [[0, 1], [2, 3], [4, 5]]


def test_grouping_is_deterministic_on_a_random_graph():
    rng = random.Random(7)
    n = 300
    edges = [(rng.randrange(n), rng.randrange(n)) for _ in range(900)]
    sizes = np.array([rng.randint(50, 400) for _ in range(n)])
    first = group_documents(Graph.from_edges(n, *map(np.array, zip(*edges))), sizes, 1000)
    rng.shuffle(edges)
    again = group_documents(Graph.from_edges(n, *map(np.array, zip(*edges))), sizes, 1000)
    assert first == again
    assert sorted(d for g in first for d in g) == list(range(n))  # a partition
    assert all(sizes[g].sum() <= 1000 or len(g) == 1 for g in first)


def test_links_and_mentions_graphs(tmp_path):
    store, _ = CorpusStore.ingest(write_corpus(tmp_path / "c.jsonl", RECORDS), tmp_path / "s.sqlite")
    links = links_graph(store)
    assert links.neighbours(0).tolist() == [1] and links.neighbours(4).tolist() == [3]  # by title, by id
    assert mention_key("Kiss and Tell (1945 film)") == "Kiss and Tell"
    mentions = mentions_graph(store)
    # a: names Shirley Temple; d and e name each other's... e names "Zorblax Vault"; c names nothing: "Tell" in
    # "Tellurium" is not a whole-word mention of "Kiss and Tell"
    assert mentions.neighbours(0).tolist() == [1]
    assert mentions.neighbours(4).tolist() == [3]
    assert mentions.neighbours(2).tolist() == []


def test_units_map_every_piece(tmp_path):
    records = [{"title": f"T{i}", "text": " ".join(["word"] * (60 + 70 * i))} for i in range(4)]
    store, _ = CorpusStore.ingest(write_corpus(tmp_path / "c.jsonl", records), tmp_path / "s.sqlite")
    pieces = cut_pieces(store, 100)
    assert pieces.doc.tolist() == [0, 1, 2, 2, 3, 3, 3]  # 60, 130, 200, 270 words
    passage = make_units("passage", pieces, 4)
    document = make_units("document", pieces, 4)
    grouped = make_units("grouped", pieces, 4, [[0, 3], [1, 2]])
    assert passage.piece_unit.tolist() == [0, 1, 2, 3, 4, 5, 6]
    assert document.piece_unit.tolist() == pieces.doc.tolist()
    assert grouped.piece_unit.tolist() == [0, 1, 1, 1, 0, 0, 0]
    assert grouped.unit_docs(1).tolist() == [1, 2]


# -- the index -----------------------------------------------------------------------------------------------------
def test_index_builds_resumes_and_searches(tmp_path):
    src = write_corpus(tmp_path / "c.jsonl", RECORDS)
    config = CorpusBuildConfig(embedder="hashing", piece_words=5, grouping="links", group_tokens=40, batch=3)
    embedder = HashingEmbedder()
    index, report = CorpusIndex.build(src, tmp_path / "idx", config, WordCounter(), embedder=embedder)
    assert report.embedded_pieces == len(index.pieces) > len(RECORDS)
    assert index.meta["units"]["grouped"]["grouping"] == "links"
    # grouped by links: a with b (Kiss and Tell -> Shirley Temple), d with e; c alone
    grouped = index.units("grouped")
    assert [sorted(index.unit_titles("grouped", u)) for u in range(len(grouped))] == [
        ["Kiss and Tell (1945 film)", "Shirley Temple"], ["Tellurium"], ["Guild of Keys", "Zorblax Vault"]]
    # a group's text: its documents ordered by title, each as title then text
    assert index.unit_texts("grouped", [2])[0].startswith("Guild of Keys\nThe guild guards")
    assert index.unit_tokens("document").tolist() == [len(f"{r['title']}\n{r['text']}".split()) for r in RECORDS]
    assert index.unit_tokens("grouped")[2] == index.unit_tokens("document")[3] + index.unit_tokens("document")[4] + 1

    hit = index.search("secret code Zorblax Vault", "document", "bm25", 1)[0]
    assert index.unit_titles("document", hit.unit) == ["Zorblax Vault"]

    # MaxP: a unit's dense score is its best piece's, exactly
    q = "who was chief of protocol"
    vectors = np.load(next(tmp_path.glob("idx/embeddings-*.npy")))
    piece_scores = vectors @ embedder.embed([q])[0]
    for kind in ("passage", "document", "grouped"):
        units = index.units(kind)
        expected = [max(piece_scores[units.piece_unit == u]) for u in range(len(units))]
        hits = CorpusIndex(tmp_path / "idx", embedder=embedder).search(q, kind, "dense", len(units))
        assert [h.unit for h in hits] == sorted(range(len(units)), key=lambda u: (-expected[u], u))
        assert [h.score for h in hits] == pytest.approx(sorted(expected, reverse=True), abs=1e-6)

    # a second build finds everything on disk and does nothing
    _, again = CorpusIndex.build(src, tmp_path / "idx", config, WordCounter(), embedder=embedder)
    assert again.seconds == {} and again.embedded_pieces == 0
    with pytest.raises(InputError, match="other settings"):
        CorpusIndex.build(src, tmp_path / "idx", CorpusBuildConfig(piece_words=50, embedder=None), WordCounter())


def test_faiss_flat_agrees_with_exact_maxp(tmp_path):
    rng = random.Random(3)
    words = [f"w{i}" for i in range(200)]
    records = [{"title": f"doc {i}", "text": " ".join(rng.choice(words) for _ in range(rng.randint(20, 300)))}
               for i in range(60)]
    src = write_corpus(tmp_path / "c.jsonl", records)
    embedder = HashingEmbedder()
    config = CorpusBuildConfig(embedder="hashing", piece_words=50, grouping="neighbours", group_tokens=600, faiss="flat")
    index, _ = CorpusIndex.build(src, tmp_path / "idx", config, WordCounter(), embedder=embedder)
    for kind in ("passage", "grouped"):
        for q in ("w1 w2 w3", "w150 w7", "w99"):
            exact = index.search(q, kind, "dense", 5)
            approx = index.search(q, kind, "dense", 5, faiss="flat")
            assert [h.unit for h in approx] == [h.unit for h in exact]


def test_unknown_units_and_bad_settings_are_clear_errors(tmp_path):
    src = write_corpus(tmp_path / "c.jsonl", RECORDS)
    with pytest.raises(InputError, match="unknown unit"):
        CorpusBuildConfig(units=("chapter",)).check()
    with pytest.raises(InputError, match="needs an embedder"):
        CorpusBuildConfig(grouping="neighbours", embedder=None).check()
    index, _ = CorpusIndex.build(src, tmp_path / "idx", CorpusBuildConfig(units=("document",), embedder=None), WordCounter())
    with pytest.raises(InputError, match="no 'grouped' units"):
        index.search("code", "grouped", "bm25")
    with pytest.raises(InputError, match="not a corpus index"):
        CorpusIndex(tmp_path)


# -- --out, settings and content identity, concurrent builds (issue 14: defects 5 and 22) --------------------------
def test_out_that_is_a_file_is_a_clear_error(tmp_path):
    src = write_corpus(tmp_path / "c.jsonl", RECORDS)
    (tmp_path / "file").write_text("not an index")
    config = CorpusBuildConfig(units=("document",), embedder=None)
    with pytest.raises(InputError, match="file is a file, not a directory"):
        CorpusIndex.build(src, tmp_path / "file", config, WordCounter())
    with pytest.raises(InputError, match=r"cannot create --out \(the index directory\)"):
        CorpusIndex.build(src, tmp_path / "file" / "idx", config, WordCounter())
    assert (tmp_path / "file").read_text() == "not an index"


def grouped_config(**changes):
    return CorpusBuildConfig(**{"embedder": "hashing", "piece_words": 5, "grouping": "links", "group_tokens": 40,
                                "units": ("grouped",), "bm25": False} | changes)


def test_other_grouping_is_refused_naming_it_then_rebuilt_alone(tmp_path):
    src, out, embedder = write_corpus(tmp_path / "c.jsonl", RECORDS), tmp_path / "idx", HashingEmbedder()
    index, _ = CorpusIndex.build(src, out, grouped_config(), WordCounter(), embedder=embedder)
    assert len(index.units("grouped")) == 3
    with pytest.raises(InputError, match="group_tokens 40 → 5"):
        CorpusIndex.build(src, out, grouped_config(group_tokens=5), WordCounter(), embedder=embedder)
    with pytest.raises(InputError, match="grouping 'links' → 'mentions'"):
        CorpusIndex.build(src, out, grouped_config(grouping="mentions"), WordCounter(), embedder=embedder)
    # the refusals changed nothing
    assert CorpusIndex(out).meta["units"]["grouped"]["settings"]["group_tokens"] == 40
    index, report = CorpusIndex.build(src, out, grouped_config(group_tokens=5), WordCounter(), embedder=embedder,
                                      rebuild=True)
    assert list(report.seconds) == ["units:grouped"] and report.embedded_pieces == 0  # only the affected step
    assert len(CorpusIndex(out).units("grouped")) == len(RECORDS)  # groups of 5 words hold one document each
    assert index.meta["units"]["grouped"]["group_tokens"] == index.meta["build"]["group_tokens"] == 5


def test_a_build_without_grouped_units_does_not_record_its_grouping(tmp_path):
    src, out, embedder = write_corpus(tmp_path / "c.jsonl", RECORDS), tmp_path / "idx", HashingEmbedder()
    CorpusIndex.build(src, out, grouped_config(), WordCounter(), embedder=embedder)
    index, _ = CorpusIndex.build(src, out, grouped_config(units=("passage",), group_tokens=999), WordCounter(),
                                 embedder=embedder)
    assert index.meta["build"]["group_tokens"] == 40 and index.meta["build"]["units"] == ["passage", "grouped"]


def test_the_corpus_is_identified_by_content_not_path(tmp_path):
    src, out = write_corpus(tmp_path / "c.jsonl", RECORDS), tmp_path / "idx"
    config = CorpusBuildConfig(units=("document",), embedder=None, bm25=False)
    CorpusIndex.build(src, out, config, WordCounter())
    moved = write_corpus(tmp_path / "moved.jsonl", RECORDS)  # same content elsewhere: nothing to do
    assert CorpusIndex.build(moved, out, config, WordCounter())[1].seconds == {}
    write_corpus(src, RECORDS[:2])  # other content at the same path
    with pytest.raises(InputError, match="source_sha256"):
        CorpusIndex.build(src, out, config, WordCounter())
    index, report = CorpusIndex.build(src, out, config, WordCounter(), rebuild=True)
    assert "ingest" in report.seconds and index.meta["documents"] == len(CorpusIndex(out).store) == 2


def test_a_second_build_waits_for_the_first_then_finds_it_done(tmp_path, caplog):
    import threading
    import time

    from lcrag.core.files import file_lock

    src, out = write_corpus(tmp_path / "c.jsonl", RECORDS), tmp_path / "idx"
    config = CorpusBuildConfig(units=("document",), embedder=None, bm25=False)
    out.mkdir()
    results = []
    with file_lock(out / ".build.lock"):  # stands for another process's build
        waiting = threading.Thread(target=lambda: results.append(CorpusIndex.build(src, out, config, WordCounter())))
        waiting.start()
        deadline = time.monotonic() + 30
        while "another process is building" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.01)
        assert "another process is building" in caplog.text
        assert not (out / "corpus.sqlite").exists() and results == []  # it waits: nothing built meanwhile
    waiting.join(timeout=60)
    assert results and results[0][0].meta["documents"] == len(RECORDS)
