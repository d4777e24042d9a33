"""RAPTOR (Sarthi et al. 2024): recursive soft clustering and summarisation, searched as a collapsed tree.

Build, per document (after raptor/cluster_tree_builder.py and cluster_utils.py):
  1. leaves: whole sentences packed into chunks of at most 100 reader tokens;
  2. each layer: embeddings reduced (PCA here; RAPTOR uses UMAP, which costs minutes of numba compilation), a
     Gaussian mixture with the number of components chosen by BIC over 1..49, a node joining every component whose
     probability exceeds 0.1 (soft membership) -- first globally, then again inside each global cluster; a cluster
     longer than 3,500 tokens is clustered again on its own;
  3. one LLM summary per cluster ("Write a summary of the following, including as many key details as possible"),
     embedded, becomes a node of the next layer;
  4. repeat until a layer has at most ``reduction_dim + 1`` nodes, clustering no longer reduces them, or 5 layers.

Retrieval: the collapsed tree -- every node of every layer scored against the query at once; the assembler then
keeps the top nodes up to a token budget (the paper's 3,500) or the top k.

Persistence: one directory per document under ``ROOT/<settings key>/trees/<document hash>/``, written atomically.
Adding a document builds that document's tree only; the trees of other documents are never touched. A document
joined from several files (``lcrag ask DIR``) gets one tree per file, searched together, so adding a file to the
directory builds one new tree. Clusters therefore do not span files (to cluster across texts, pass them as one
document, as LongBench's multi-passage contexts are).
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import shutil
import time
import warnings
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lcrag.chunking import TokenSentenceChunker
from lcrag.core.errors import InputError
from lcrag.core.lazy import lazy_module
from lcrag.readers import streaming
from lcrag.core.registry import RETRIEVERS
from lcrag.retrieval.embedders import Embedder
from lcrag.retrieval.summaries import BuildCost, Summarizer, SummaryTree, embed_texts
from lcrag.retrieval.tree_index import open_tree_index
from lcrag.core.files import atomic_write_text
from lcrag.core.tokenization import Tokenizer, count_many
from lcrag.core.types import Chunk, Document, ScoredChunk

if TYPE_CHECKING:
    import numpy as np

    from lcrag.retrieval.base import IndexView
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")

log = logging.getLogger(__name__)

# Part of every tree's settings key: a change to how clusters are formed must not reuse trees built the old way.
CLUSTERING_VERSION = 2


def require_sklearn():
    try:
        import sklearn
    except ImportError:
        raise InputError("this needs scikit-learn: pip install -e '.[raptor]' in lcrag's checkout") from None
    return sklearn


@dataclass(frozen=True)
class RaptorConfig:
    leaf_tokens: int = 100
    reduction_dim: int = 10
    threshold: float = 0.1  # soft membership: probability above which a node joins a cluster
    max_cluster_tokens: int = 3500
    max_layers: int = 5
    max_clusters: int = 50  # BIC is compared for 1 .. max_clusters - 1 components, as in RAPTOR
    seed: int = 224

    @property
    def key(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


# -- clustering -------------------------------------------------------------------------------------------------
def _single_threaded(clustering):
    """BLAS on one thread while clustering: the matrices are tiny (a layer's nodes), and a BLAS pool per call only
    fights the server's other threads (60 vectors took 10 s on 2 busy cores with the default pool, 3 s on one)."""

    @functools.wraps(clustering)
    def run(*args, **kwargs):
        from threadpoolctl import threadpool_limits

        with threadpool_limits(limits=1, user_api="blas"):
            return clustering(*args, **kwargs)
    return run


def _reduce(vectors: np.ndarray, dim: int, seed: int) -> np.ndarray:
    from sklearn.decomposition import PCA

    n_components = max(1, min(dim, len(vectors) - 2, vectors.shape[1]))
    return PCA(n_components=n_components, random_state=seed).fit_transform(vectors)


def _gmm_soft(points: np.ndarray, threshold: float, max_clusters: int, seed: int) -> tuple[list[np.ndarray], int]:
    """Components chosen by BIC, then each point's components with probability above ``threshold``."""
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import GaussianMixture

    # No more components than distinct points (identical summaries embed identically).
    distinct = len(np.unique(np.round(points, 6), axis=0))
    candidates = range(1, max(2, min(max_clusters, len(points), distinct + 1)))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        bics = [GaussianMixture(n, random_state=seed).fit(points).bic(points) for n in candidates]
        n = candidates[int(np.argmin(bics))]
        probs = GaussianMixture(n, random_state=seed).fit(points).predict_proba(points)
    # RAPTOR drops a point that reaches no component's threshold (possible with > 10 components); we keep it in its
    # most likely one, so no text is left out of the layer above.
    return [np.flatnonzero(p > threshold) if (p > threshold).any() else np.array([int(np.argmax(p))]) for p in probs], n


@_single_threaded
def soft_clusters(vectors: np.ndarray, config: RaptorConfig) -> list[list[int]]:
    """RAPTOR's ``perform_clustering``: global clusters, then local clusters inside each; members as row numbers."""
    dim, seed = config.reduction_dim, config.seed
    global_labels, n_global = _gmm_soft(_reduce(vectors, dim, seed), config.threshold, config.max_clusters, seed)
    clusters: list[list[int]] = []
    for g in range(n_global):
        members = [i for i, labels in enumerate(global_labels) if g in labels]
        if len(members) <= dim + 1:
            if members:
                clusters.append(members)
            continue
        local_labels, n_local = _gmm_soft(_reduce(vectors[members], dim, seed), config.threshold,
                                          config.max_clusters, seed)
        for j in range(n_local):
            sub = [members[t] for t, labels in enumerate(local_labels) if j in labels]
            if sub:
                clusters.append(sub)
    return clusters


def cluster_nodes(ids: list[int], vectors: np.ndarray, tokens: list[int], config: RaptorConfig) -> list[list[int]]:
    """Clusters of node ids; a cluster over ``max_cluster_tokens`` is clustered again (RAPTOR_Clustering)."""
    out: list[list[int]] = []
    for cluster in soft_clusters(vectors[ids], config):
        members = [ids[i] for i in cluster]
        too_long = sum(tokens[i] for i in members) > config.max_cluster_tokens
        if too_long and 3 <= len(members) < len(ids):
            out.extend(cluster_nodes(members, vectors, tokens, config))
        elif too_long and len(members) >= 3:
            # Clustering again gave the same cluster back (RAPTOR would recurse forever): BIC prefers one component
            # on PCA-reduced vectors more often than on UMAP's. Split it into as many components as the limit needs.
            out.extend(_split(members, vectors, tokens, config))
        else:
            out.append(members)
    unique = {tuple(sorted(c)) for c in out}  # a soft member set can come out of two global clusters
    return [list(c) for c in sorted(unique, key=lambda c: (c[0], len(c), c))]


@_single_threaded
def _split(ids: list[int], vectors: np.ndarray, tokens: list[int], config: RaptorConfig) -> list[list[int]]:
    """A too-long cluster cut into ceil(tokens / limit) Gaussian components (soft, same threshold), each cut again
    while still too long; consecutive slices when the mixture cannot separate the nodes."""
    from sklearn.mixture import GaussianMixture

    n = min(len(ids), -(-sum(tokens[i] for i in ids) // config.max_cluster_tokens))
    points = _reduce(vectors[ids], config.reduction_dim, config.seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        probs = GaussianMixture(n, random_state=config.seed).fit(points).predict_proba(points)
    parts = [[ids[t] for t in range(len(ids)) if probs[t, j] > config.threshold] for j in range(n)]
    parts = [p for p in parts if p]
    if len(parts) < 2 or max(map(len, parts)) == len(ids):
        size = -(-len(ids) // n)
        parts = [ids[i : i + size] for i in range(0, len(ids), size)]
    out: list[list[int]] = []
    for part in parts:
        if sum(tokens[i] for i in part) > config.max_cluster_tokens and 2 <= len(part) < len(ids):
            out.extend(_split(part, vectors, tokens, config))
        else:
            out.append(part)
    return out


# -- one document's tree --------------------------------------------------------------------------------------------
def build_raptor_tree(document: Document, tokenizer: Tokenizer, embedder: Embedder, summarizer: Summarizer,
          config: RaptorConfig = RaptorConfig()) -> SummaryTree:
    """The RAPTOR tree of ``document`` (module docstring); summary calls are added to the tree's cost."""
    require_sklearn()
    started = time.perf_counter()
    leaves = TokenSentenceChunker(tokenizer, config.leaf_tokens).run(document)
    if not leaves:
        raise InputError(f"document {document.id or document.source!r} has no text to index")
    nodes = list(leaves)
    children: list[list[int]] = [[] for _ in nodes]
    vectors = embed_texts(embedder, [c.text for c in nodes])
    tokens = count_many(tokenizer, [c.text for c in nodes])
    cost = BuildCost()
    current = list(range(len(nodes)))
    for layer in range(1, config.max_layers + 1):
        streaming.check_cancelled()  # a layer's clustering and summaries only for a question still asked
        if len(current) <= config.reduction_dim + 1:
            break
        clusters = cluster_nodes(current, vectors, tokens, config)
        if len(clusters) >= len(current):
            break  # clustering no longer reduces the layer
        log.info("RAPTOR layer %d: %d nodes -> %d clusters", layer, len(current), len(clusters))
        summaries = summarizer.run([[nodes[i].text for i in c] for c in clusters], cost)
        first = len(nodes)
        for cluster, text in zip(clusters, summaries):
            start = min(nodes[i].start for i in cluster)
            end = max(nodes[i].end for i in cluster)
            nodes.append(Chunk(len(nodes), start, end, text, layer))
            children.append(cluster)
        vectors = np.vstack([vectors, embed_texts(embedder, summaries)])
        tokens += count_many(tokenizer, summaries)
        current = list(range(first, len(nodes)))
    return SummaryTree(document.content_hash, nodes, children, vectors, cost, time.perf_counter() - started, True)



# -- the persistent forest and its collapsed-tree retriever -------------------------------------------------------
class RaptorIndex:
    """RAPTOR trees of many documents under one directory; each built once and loaded after."""

    def __init__(self, root: str | Path, tokenizer: Tokenizer, embedder: Embedder, summarizer: Summarizer,
                 config: RaptorConfig = RaptorConfig()):
        self.tokenizer = tokenizer
        self.embedder = embedder
        self.summarizer = summarizer
        self.config = config
        settings = "\n".join([f"clustering v{CLUSTERING_VERSION}", config.key, tokenizer.name, embedder.name,
                              summarizer.key])
        self.dir = Path(root) / hashlib.sha256(settings.encode()).hexdigest()[:16]
        (self.dir / "trees").mkdir(parents=True, exist_ok=True)
        settings_file = self.dir / "settings.json"
        if not settings_file.exists():
            atomic_write_text(settings_file, json.dumps({"config": asdict(config), "tokenizer": tokenizer.name,
                                                         "embedder": embedder.name, "summarizer": summarizer.key},
                                                        indent=1))
        self._trees: dict[str, SummaryTree] = {}

    def _tree_dir(self, content_hash: str) -> Path:
        return self.dir / "trees" / content_hash

    def documents(self) -> list[str]:
        """Content hashes of the documents with a finished tree, sorted."""
        return sorted(p.name for p in (self.dir / "trees").iterdir() if (p / "meta.json").exists())

    def add(self, document: Document) -> SummaryTree:
        """The document's tree: loaded when it exists, else built and saved (other trees are not touched)."""
        key = document.content_hash
        if key in self._trees:
            return self._trees[key]
        directory = self._tree_dir(key)
        # Under the file lock ``trees/<key>.lock``: two processes (or eval configurations) asking for the same tree
        # build it once; a damaged tree is set aside and rebuilt.
        tree = open_tree_index(directory, lambda: build_raptor_tree(document, self.tokenizer, self.embedder,
                                                                    self.summarizer, self.config))
        self._trees[key] = tree
        return tree

    def remove(self, content_hash: str) -> None:
        self._trees.pop(content_hash, None)
        shutil.rmtree(self._tree_dir(content_hash), ignore_errors=True)

    def retriever(self, documents: list[Document | str] | None = None,
                  offsets: list[int] | None = None) -> CollapsedTreeRetriever:
        """Collapsed-tree retrieval over the given documents' trees (all trees on disk when None); ``offsets`` shift
        each tree's spans (the parts of a joined document)."""
        if documents is None:
            trees = [self._trees.get(h) or SummaryTree.load(self._tree_dir(h)) for h in self.documents()]
        else:
            trees = [self.add(d) if isinstance(d, Document) else SummaryTree.load(self._tree_dir(d)) for d in documents]
        return CollapsedTreeRetriever(trees, self.embedder, offsets)


class CollapsedTreeRetriever:
    """Every node of every layer scored against the query at once (cosine), best first."""

    name = "raptor"

    def __init__(self, trees: list[SummaryTree], embedder: Embedder, offsets: list[int] | None = None):
        self.trees = trees
        self.embedder = embedder
        # Node numbers run on across trees, so nodes of different documents never share an index.
        self.nodes: list[Chunk] = []
        for tree, shift in zip(trees, offsets or [0] * len(trees)):
            first = len(self.nodes)
            self.nodes.extend(Chunk(first + n.index, n.start + shift, n.end + shift, n.text, n.layer) for n in tree.nodes)
        self.vectors = np.vstack([t.vectors for t in trees]) if trees else np.zeros((0, 1), np.float32)
        self.build_cost = BuildCost()
        for tree in trees:
            self.build_cost.merge(tree.cost)
        self.build_seconds = sum(t.build_seconds for t in trees)
        self.built_now = any(t.built_now for t in trees)

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        if not self.nodes:
            return []
        scores = self.vectors @ self.embedder.embed([query])[0]
        order = sorted(range(len(self.nodes)), key=lambda i: (-float(scores[i]), i))[: k or len(self.nodes)]
        return [ScoredChunk(self.nodes[i], float(scores[i])) for i in order]


@RETRIEVERS.register("raptor", help="a RAPTOR tree of clustered summaries, searched flat (collapsed tree)",
                     calls_reader=True)  # its summaries are written by the reader, when a document is first read
def raptor_retriever(index: IndexView) -> CollapsedTreeRetriever:
    # RAPTOR has its own leaves (100-token sentence groups, counted by the summarizer so that one tree serves any
    # reader), so its trees live outside this chunking's folder.
    reader = index.summary_reader
    forest = RaptorIndex(index.cache_dir / "raptor", reader.tokenizer, index.embedder, Summarizer(reader),
                         index.options.raptor)
    if index.document.parts:
        # One tree per file or record: adding a file to a collection builds that file's tree only.
        return forest.retriever([part for _, part in index.document.parts],
                                [offset for offset, _ in index.document.parts])
    return forest.retriever([index.document])
