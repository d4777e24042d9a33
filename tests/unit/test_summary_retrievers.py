"""RAPTOR clustering and trees, the tree index, sentence windows and their assembly (scripted reader; real sklearn)."""

from __future__ import annotations

import hashlib
import re

import numpy as np
import pytest

from lcrag.assembly import ContextAssembler
from lcrag.chunking import TokenSentenceChunker, WordChunker
from lcrag.retrieval.raptor import RaptorConfig, RaptorIndex, _gmm_soft, build_raptor_tree, cluster_nodes, soft_clusters
from lcrag.retrieval.sentence_window import SentenceWindowRetriever
from lcrag.retrieval.summaries import BuildCost, Summarizer, SummaryTree
from lcrag.retrieval.tree_index import TreeIndexRetriever, build_tree_index, tree_summarizer
from lcrag.core.types import Chunk, Document, ScoredChunk


class BagOfWords:
    """Deterministic test embedder: hashed word counts, unit norm (texts sharing words are close)."""

    name = "bag-of-words-test"
    dimension = 256

    def embed(self, texts):
        out = np.zeros((len(texts), self.dimension), np.float32)
        for row, text in enumerate(texts):
            for word in re.findall(r"[a-z]+", text.lower()):
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dimension] += 1
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms == 0, 1, norms)


TOPICS = {
    "fish": "salmon trout river fishing net boat harbour",
    "bake": "bread oven flour yeast dough baker loaf",
    "star": "telescope planet orbit comet galaxy astronomer night",
}


def topic_document(per_topic: int = 15, seed: int = 0) -> Document:
    rng = np.random.default_rng(seed)
    sentences = []
    for i in range(per_topic):
        for name, words in TOPICS.items():
            w = words.split()
            picked = " ".join(rng.choice(w, size=5))
            sentences.append(f"Note {i} on {name}: the {picked} {w[i % len(w)]}.")
    return Document(" ".join(sentences), id="topics")


def summary_reader(scripted_reader):
    """Summaries name the topic words they saw, so the test can check what went into each call."""
    def answer(messages):
        text = messages[-1]["content"]
        found = sorted({t for t, words in TOPICS.items() if any(w in text for w in words.split())})
        return "Summary about " + " and ".join(found) + "."
    return scripted_reader(answer)


# -- clustering ----------------------------------------------------------------------------------------------------
def test_soft_clusters_recover_separated_groups():
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(3, 32)) * 10
    vectors = np.vstack([c + rng.normal(size=(20, 32)) for c in centres])
    clusters = soft_clusters(vectors, RaptorConfig(reduction_dim=5))
    # Local clustering may split a group further, but no cluster mixes two groups.
    assert all(len({i // 20 for i in c}) == 1 for c in clusters), clusters
    assert all(any(i in c for c in clusters) for i in range(60)), "every node belongs to a cluster"


def test_point_between_two_components_belongs_to_both():
    rng = np.random.default_rng(0)
    left, right = rng.normal(-3, 1, size=(60, 1)), rng.normal(3, 1, size=(60, 1))
    points = np.vstack([left, right, [[0.0]]])
    labels, n = _gmm_soft(points, threshold=0.1, max_clusters=4, seed=0)
    assert n == 2
    assert len(labels[-1]) == 2  # soft membership: the midpoint joins both components
    assert sum(len(lab) == 1 for lab in labels[:-1]) >= 110  # far from the middle, one component each


def test_too_long_clusters_are_clustered_again():
    rng = np.random.default_rng(2)
    vectors = np.vstack([c + rng.normal(size=(30, 16)) for c in rng.normal(size=(2, 16)) * 8])
    config = RaptorConfig(reduction_dim=4, max_cluster_tokens=500)
    loose = cluster_nodes(list(range(60)), vectors, [1] * 60, config)
    tight = cluster_nodes(list(range(60)), vectors, [300] * 60, config)  # 2 nodes fit in 500 tokens
    assert max(map(len, loose)) >= 3
    assert max(map(len, tight)) < max(map(len, loose)) and len(tight) > len(loose)
    assert {i for c in tight for i in c} == set(range(60))


# -- RAPTOR trees ----------------------------------------------------------------------------------------------------
def test_raptor_tree_layers_children_and_cost(scripted_reader, whitespace_tokenizer):
    reader = summary_reader(scripted_reader)
    doc = topic_document()
    config = RaptorConfig(leaf_tokens=30, reduction_dim=4)
    tree = build_raptor_tree(doc, whitespace_tokenizer, BagOfWords(), Summarizer(reader, max_tokens=50), config)
    leaves = [n for n in tree.nodes if n.layer == 0]
    assert len(leaves) == len(TokenSentenceChunker(whitespace_tokenizer, 30).run(doc))
    assert tree.layers >= 1
    for node, kids in zip(tree.nodes, tree.children):
        if node.layer:
            assert kids and all(tree.nodes[k].layer == node.layer - 1 for k in kids)
            assert node.start == min(tree.nodes[k].start for k in kids)
            assert node.end == max(tree.nodes[k].end for k in kids)
            assert node.text.startswith("Summary about")
    # every leaf is summarised into the first layer
    assert {k for n, kids in zip(tree.nodes, tree.children) if n.layer == 1 for k in kids} == {n.index for n in leaves}
    assert tree.cost.calls == len(reader.calls) == sum(1 for n in tree.nodes if n.layer)
    assert tree.cost.prompt_tokens == sum(reader.count_prompt_tokens(m) for m in reader.calls)
    assert "including as many key details as possible" in reader.calls[0][-1]["content"]
    assert len(tree.vectors) == len(tree.nodes)


def test_raptor_stops_when_the_layer_is_small(scripted_reader, whitespace_tokenizer):
    reader = summary_reader(scripted_reader)
    doc = Document("One short sentence. Another short sentence. A third one.")
    tree = build_raptor_tree(doc, whitespace_tokenizer, BagOfWords(), Summarizer(reader), RaptorConfig())
    assert tree.layers == 0 and not reader.calls  # 1 leaf <= reduction_dim + 1: nothing to cluster


def test_raptor_index_persists_and_adds_without_rebuilding(tmp_path, scripted_reader, whitespace_tokenizer):
    reader = summary_reader(scripted_reader)
    config = RaptorConfig(leaf_tokens=30, reduction_dim=4)
    index = RaptorIndex(tmp_path, whitespace_tokenizer, BagOfWords(), Summarizer(reader), config)
    first = topic_document(seed=0)
    tree = index.add(first)
    calls_after_first = len(reader.calls)
    tree_dir = index.dir / "trees" / first.content_hash
    stamp = (tree_dir / "nodes.jsonl").stat().st_mtime_ns

    second = topic_document(seed=1)
    index.add(second)
    assert len(reader.calls) > calls_after_first  # the new document's tree was built...
    assert (tree_dir / "nodes.jsonl").stat().st_mtime_ns == stamp  # ...and the first one left alone
    assert index.documents() == sorted([first.content_hash, second.content_hash])

    # A fresh index object over the same folder loads both trees: no summary call at all.
    again = RaptorIndex(tmp_path, whitespace_tokenizer, BagOfWords(), Summarizer(summary_reader(scripted_reader)), config)
    retriever = again.retriever()
    assert len(retriever.nodes) == len(tree.nodes) + len(again.add(second).nodes)
    assert retriever.build_cost.calls == calls_after_first + (len(reader.calls) - calls_after_first)
    assert not retriever.built_now
    # node numbers never collide across documents
    assert len({n.index for n in retriever.nodes}) == len(retriever.nodes)

    index.remove(first.content_hash)
    assert index.documents() == [second.content_hash]


def test_collapsed_tree_returns_every_layer_best_first(tmp_path, scripted_reader, whitespace_tokenizer):
    reader = summary_reader(scripted_reader)
    index = RaptorIndex(tmp_path, whitespace_tokenizer, BagOfWords(), Summarizer(reader),
                        RaptorConfig(leaf_tokens=30, reduction_dim=4))
    retriever = index.retriever([topic_document()])
    hits = retriever.run("Summary about bake", None)
    assert len(hits) == len(retriever.nodes)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    assert hits[0].chunk.layer >= 1  # the summary that names the query's words beats the leaves


def test_settings_change_gives_a_separate_index(tmp_path, scripted_reader, whitespace_tokenizer):
    reader = summary_reader(scripted_reader)
    a = RaptorIndex(tmp_path, whitespace_tokenizer, BagOfWords(), Summarizer(reader), RaptorConfig(leaf_tokens=30))
    b = RaptorIndex(tmp_path, whitespace_tokenizer, BagOfWords(), Summarizer(reader), RaptorConfig(leaf_tokens=60))
    assert a.dir != b.dir


# -- tree index --------------------------------------------------------------------------------------------------------
def _tree(scripted_reader, n_leaves=35, children=10):
    reader = summary_reader(scripted_reader)
    text = " ".join(f"Part {i} about {list(TOPICS.values())[i * 3 // n_leaves]}." for i in range(n_leaves))
    doc = Document(text)
    leaves = WordChunker(10).run(doc)  # one part per leaf
    emb = BagOfWords()
    tree = build_tree_index(doc.content_hash, leaves, emb.embed([c.text for c in leaves]), emb,
                            tree_summarizer(reader), children)
    return tree, leaves, reader, emb


def test_tree_index_groups_consecutive_nodes_up_to_the_roots(scripted_reader):
    tree, leaves, reader, _ = _tree(scripted_reader)
    level1 = [n for n in tree.nodes if n.layer == 1]
    assert len(leaves) == 35 and len(level1) == 4  # 10 + 10 + 10 + 5
    assert tree.children[level1[0].index] == list(range(10))
    assert tree.layers == 1  # 4 nodes <= 10 children: they are the roots
    assert "SUMMARY:" in reader.calls[0][-1]["content"]
    assert tree.cost.calls == 4


def test_tree_navigation_returns_leaves_under_the_best_branch(scripted_reader):
    tree, leaves, _, emb = _tree(scripted_reader)
    retriever = TreeIndexRetriever(tree, emb, branch=1)
    hits, calls = retriever.run_with_calls("Summary about star", 5)
    assert not calls and len(hits) == 5
    assert all(h.chunk.layer == 0 for h in hits)
    parent = next(p for p, kids in enumerate(tree.children) if hits[0].chunk.index in kids)
    assert all(h.chunk.index in tree.children[parent] for h in hits)


def test_llm_navigation_follows_the_reader_and_counts_its_calls(scripted_reader):
    tree, _, _, emb = _tree(scripted_reader)
    picker = scripted_reader(lambda messages: "ANSWER: 2\nbecause it fits")
    retriever = TreeIndexRetriever(tree, emb, picker, navigation="llm", branch=1)
    hits, calls = retriever.run_with_calls("anything", 3)
    roots = [n.index for n in tree.nodes if n.layer == tree.layers]
    assert hits[0].chunk.index in tree.children[roots[1]]  # the second root, as the reader said
    assert hits[0].chunk.index == tree.children[roots[1]][1]  # and its second leaf
    assert [c.stage for c in calls] == ["navigate", "navigate"]
    assert "(1) " in picker.calls[0][0]["content"] and "ANSWER: <numbers>" in picker.calls[0][0]["content"]

    confused = TreeIndexRetriever(tree, emb, scripted_reader(lambda m: "I cannot say"), navigation="llm", branch=1)
    by_similarity = TreeIndexRetriever(tree, emb, branch=1)
    assert [h.chunk.index for h in confused.run("Summary about fish", 3)] == \
           [h.chunk.index for h in by_similarity.run("Summary about fish", 3)]


# -- sentence window -----------------------------------------------------------------------------------------------
def test_sentence_windows_surround_the_hit_and_never_overlap(tmp_path):
    sentences = [f"Sentence number {i} talks about topic {i}." for i in range(30)]
    sentences[12] = "The lighthouse keeper is named Marta Quillon."
    doc = Document(" ".join(sentences))
    retriever = SentenceWindowRetriever.open(doc, BagOfWords(), tmp_path, window=2)
    hits = retriever.run("Who is the lighthouse keeper named Marta?", 4)
    top = hits[0].chunk
    assert top.text.startswith("Sentence number 10") and top.text.endswith("topic 14.")
    assert top.text == doc.text[top.start : top.end]
    spans = sorted((h.chunk.start, h.chunk.end) for h in hits)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    # second open reads the stored sentences and vectors
    again = SentenceWindowRetriever.open(doc, BagOfWords(), tmp_path, window=2)
    assert again.spans == retriever.spans


# -- assembly of summary nodes -------------------------------------------------------------------------------------
def test_assembler_uses_summary_text_and_orders_summaries_after_their_text():
    doc = "Alpha beta. Gamma delta. Epsilon zeta."
    leaf = Chunk(0, 12, 24, "Gamma delta.")
    summary = Chunk(5, 0, 38, "A summary of all three.", layer=1)
    ranked = [ScoredChunk(summary, 0.9), ScoredChunk(leaf, 0.8)]
    by_score = ContextAssembler(k=2).run(ranked, doc)
    assert by_score.text == "[Chunk 5] A summary of all three.\n\n[Chunk 0] Gamma delta."
    assert [c.layer for c in by_score.chunks] == [1, 0]
    in_order = ContextAssembler(k=2, order="document").run(ranked, doc)
    assert in_order.text == "A summary of all three.\n\nGamma delta."


def test_summary_tree_round_trip(tmp_path):
    tree = SummaryTree("abc", [Chunk(0, 0, 3, "one"), Chunk(1, 0, 3, "sum", 1)], [[], [0]],
                       np.eye(2, dtype=np.float32), BuildCost(calls=1, prompt_tokens=10, completion_tokens=3), 1.5)
    tree.save(tmp_path / "t")
    loaded = SummaryTree.load(tmp_path / "t")
    assert loaded.nodes == tree.nodes and loaded.children == tree.children
    assert loaded.cost == tree.cost and not loaded.built_now
    np.testing.assert_array_equal(loaded.vectors, tree.vectors)


def test_bad_tree_settings_are_input_errors():
    from lcrag.core.errors import InputError

    tree = SummaryTree("x", [Chunk(0, 0, 1, "a")], [[]], np.ones((1, 2), np.float32))
    with pytest.raises(InputError):
        TreeIndexRetriever(tree, BagOfWords(), navigation="magic")
    with pytest.raises(InputError):
        TreeIndexRetriever(tree, BagOfWords(), navigation="llm")


def test_raptor_over_a_directory_builds_one_tree_per_file(tmp_path, scripted_reader, whitespace_tokenizer):
    from lcrag.chunking import WordChunker
    from lcrag.documents import load_document
    from lcrag.retrieval.index import DocumentIndex, SummaryIndexConfig

    reader = summary_reader(scripted_reader)
    folder = tmp_path / "docs"
    folder.mkdir()
    for i in range(2):
        (folder / f"f{i}.txt").write_text(topic_document(seed=i).text)
    options = SummaryIndexConfig(raptor=RaptorConfig(leaf_tokens=30, reduction_dim=4))

    def open_index():
        return DocumentIndex(load_document(folder), WordChunker(50), tmp_path / "cache", lambda: BagOfWords(),
                             reader_factory=lambda: reader, options=options)

    joined = load_document(folder)
    retriever = open_index().retriever("raptor")
    assert len(retriever.trees) == 2
    leaves = [n for n in retriever.nodes if n.layer == 0]
    assert all(joined.text[n.start : n.end] == n.text for n in leaves)  # spans point into the joined text
    calls = len(reader.calls)
    trees_dir = next((tmp_path / "cache" / "raptor").iterdir()) / "trees"
    stamps = {p.name: (p / "nodes.jsonl").stat().st_mtime_ns for p in trees_dir.iterdir() if p.is_dir()}

    (folder / "f2.txt").write_text(topic_document(seed=2).text)
    grown = open_index().retriever("raptor")
    assert len(grown.trees) == 3 and [t.built_now for t in grown.trees] == [False, False, True]
    new_calls = len(reader.calls) - calls
    assert new_calls == sum(1 for n in grown.trees[2].nodes if n.layer)  # the new tree's summaries, nothing else
    assert all((trees_dir / name / "nodes.jsonl").stat().st_mtime_ns == t for name, t in stamps.items())


def test_a_cluster_bic_will_not_split_is_still_cut_to_the_token_limit():
    rng = np.random.default_rng(0)
    vectors = rng.normal(size=(150, 64)).astype(np.float32)  # one shapeless cloud: BIC picks a single component
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    clusters = cluster_nodes(list(range(150)), vectors, [100] * 150, RaptorConfig())
    assert len(clusters) >= 5 and max(map(len, clusters)) <= 35  # 3,500 tokens of 100-token leaves
    assert {i for c in clusters for i in c} == set(range(150))


def test_summarizer_runs_a_layer_as_concurrently_as_the_reader_allows(scripted_reader):
    import threading

    running, peak, lock = [0], [0], threading.Lock()
    # No sleeps: with 3 slots, calls meet at a 3-party barrier, which only opens when 3 are in flight at once
    # (fewer would time out and break it); the counter shows that never more than 3 are.
    barrier = threading.Barrier(3, timeout=30)

    def answer(messages, wait):
        with lock:
            running[0] += 1
            peak[0] = max(peak[0], running[0])
        if wait:
            barrier.wait()
        with lock:
            running[0] -= 1
        return "summary of " + re.search(r"text\d+", messages[-1]["content"]).group()

    reader = scripted_reader(lambda m: answer(m, wait=True))
    reader.max_concurrency = 3
    groups = [[f"text{i}"] for i in range(9)]
    cost = BuildCost()
    assert Summarizer(reader).run(groups, cost) == [f"summary of text{i}" for i in range(9)]  # request order kept
    assert peak[0] == 3 and cost.calls == 9
    serial = scripted_reader(lambda m: answer(m, wait=False))  # no word on concurrency: one call at a time
    peak[0] = 0
    Summarizer(serial).run(groups, BuildCost())
    assert peak[0] == 1


@pytest.mark.parametrize("retriever", ["raptor", "tree"])
def test_summaries_come_from_the_summary_reader_and_serve_any_answering_reader(tmp_path, scripted_reader, retriever):
    from lcrag import Pipeline, Settings

    summarizer = summary_reader(scripted_reader)
    summarizer.model = "summarizer"
    document = topic_document(per_topic=80)  # ~2,700 words: enough 100-token leaves for RAPTOR to cluster
    settings = Settings(strategy="rag", retriever=retriever, k=3, chunking="words:40", cache=False, cache_dir=tmp_path)
    answers = []
    for name in ("small-reader", "large-reader"):
        reader = scripted_reader(lambda messages: "salmon")
        reader.model = name
        pipeline = Pipeline(settings, reader=reader, embedder=BagOfWords(), summary_reader=summarizer)
        answer = pipeline.ask(document, "Which fish is in the river?")
        assert len(reader.calls) == 1  # the answer only: no summary went to the answering reader
        assert "Write a summary" not in reader.calls[0][-1]["content"]
        answers.append(answer)
    first, second = (a.index_cost for a in answers)
    assert first["built_now"] and first["calls"] == len(summarizer.calls) > 0
    assert not second["built_now"]  # the second reader reuses the tree the summarizer wrote for the first
    assert second["calls"] == first["calls"] and len(summarizer.calls) == first["calls"]


def test_summary_llm_defaults_to_the_answering_reader(tmp_path, scripted_reader):
    from lcrag import Pipeline, Settings

    reader = scripted_reader()
    assert Pipeline(Settings(cache_dir=tmp_path), reader=reader).summary_reader is reader
    assert Pipeline(Settings(cache_dir=tmp_path, summary_llm="smollm2"), reader=reader).summary_reader is reader
