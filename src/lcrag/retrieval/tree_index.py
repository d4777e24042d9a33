"""Tree index (after LlamaIndex's TreeIndex): hierarchical summaries, navigated from the root down to the leaves.

Build: the document's chunks are the leaves; every ``children`` (10) consecutive nodes are summarised into a parent
(LlamaIndex's summary prompt), level after level, until at most ``children`` nodes remain: the roots.
Unlike RAPTOR, groups are consecutive, a node has one parent, and only leaves are ever returned.

Query: starting at the roots, the ``branch`` best nodes of each level are kept and only their children are looked at
below. "Best" is chosen by the reader from the numbered summaries (``navigation="llm"``, LlamaIndex's select-leaf
retriever and its prompt; those calls are per-question cost) or by cosine similarity to the query
(``navigation="embedding"``, its select-leaf-embedding retriever; no LLM call). The leaves under the final beam come
back ranked by similarity, the ones the reader picked first.
"""

from __future__ import annotations

import hashlib
import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING

from lcrag.core.errors import InputError
from lcrag.core.lazy import lazy_module
from lcrag.readers import streaming
from lcrag.readers.base import GenerationParams, Reader
from lcrag.core.registry import RETRIEVERS, Option
from lcrag.retrieval.embedders import Embedder
from lcrag.retrieval.summaries import TREE_PROMPT, BuildCost, Summarizer, SummaryTree, embed_texts
from lcrag.core.files import file_lock, set_aside
from lcrag.core.types import Chunk, LLMCall, ScoredChunk

if TYPE_CHECKING:
    import numpy as np

    from lcrag.retrieval.base import IndexView
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")

log = logging.getLogger(__name__)

NAVIGATIONS = ("embedding", "llm")
# LlamaIndex DEFAULT_QUERY_PROMPT_MULTIPLE, verbatim.
SELECT_PROMPT = (
    "Some choices are given below. It is provided in a numbered list (1 to {num_chunks}), "
    "where each item in the list corresponds to a summary.\n"
    "---------------------\n"
    "{context_list}"
    "\n---------------------\n"
    "Using only the choices above and not prior knowledge, return the top choices "
    "(no more than {branching_factor}, ranked by most relevant to least) that "
    "are most relevant to the question: '{query_str}'\n"
    "Provide choices in the following format: 'ANSWER: <numbers>' and explain why "
    "these summaries were selected in relation to the question.\n"
)


def tree_summarizer(reader: Reader, max_tokens: int = 128) -> Summarizer:
    return Summarizer(reader, template=TREE_PROMPT, system=None, max_tokens=max_tokens)


def build_tree_index(document_hash: str, leaves: list[Chunk], leaf_vectors: np.ndarray, embedder: Embedder,
                     summarizer: Summarizer, children: int = 10) -> SummaryTree:
    if children < 2:
        raise InputError("a tree index needs at least 2 children per node")
    started = time.perf_counter()
    nodes = [Chunk(i, c.start, c.end, c.text, 0) for i, c in enumerate(leaves)]
    kids: list[list[int]] = [[] for _ in nodes]
    vectors = np.asarray(leaf_vectors, dtype=np.float32)
    cost = BuildCost()
    level = list(range(len(nodes)))
    layer = 0
    while len(level) > children:
        streaming.check_cancelled()  # a level's summaries only for a question still asked
        layer += 1
        groups = [level[i : i + children] for i in range(0, len(level), children)]
        log.info("tree index level %d: %d nodes -> %d summaries", layer, len(level), len(groups))
        summaries = summarizer.run([[nodes[i].text for i in g] for g in groups], cost)
        first = len(nodes)
        for group, text in zip(groups, summaries):
            nodes.append(Chunk(len(nodes), nodes[group[0]].start, nodes[group[-1]].end, text, layer))
            kids.append(group)
        vectors = np.vstack([vectors, embed_texts(embedder, summaries)])
        level = list(range(first, len(nodes)))
    return SummaryTree(document_hash, nodes, kids, vectors, cost, time.perf_counter() - started, True)


def _load_tree(directory: Path) -> SummaryTree | None:
    """The tree saved in ``directory``; None when there is none, or it is damaged (then set aside, one warning)."""
    if not (directory / "meta.json").exists():
        return None
    try:
        tree = SummaryTree.load(directory)
        if len(tree.vectors) == len(tree.nodes) == len(tree.children) and tree.nodes:
            return tree
        reason = f"{len(tree.nodes)} nodes but {len(tree.vectors)} vectors"
    except (ValueError, TypeError, KeyError, OSError, EOFError, UnicodeDecodeError) as error:
        reason = f"{type(error).__name__}: {error}"
    set_aside(directory, reason)
    return None


def open_tree_index(directory: Path, build) -> SummaryTree:
    """The tree stored in ``directory``, or ``build()`` saved there (once, under a file lock; a damaged one is set
    aside and rebuilt). RAPTOR's trees are opened the same way."""
    with file_lock(directory.with_suffix(".lock")):
        tree = _load_tree(directory)
        if tree is not None:
            return tree
        tree = build()
        tree.save(directory)
        return tree


def tree_key(summarizer: Summarizer, embedder: Embedder, children: int) -> str:
    return hashlib.sha256(f"{summarizer.key}\n{embedder.name}\n{children}".encode()).hexdigest()[:16]


class TreeIndexRetriever:
    name = "tree"

    def __init__(self, tree: SummaryTree, embedder: Embedder, reader: Reader | None = None,
                 navigation: str = "embedding", branch: int = 2):
        if navigation not in NAVIGATIONS:
            raise InputError(f"unknown tree navigation {navigation!r}; choose embedding or llm")
        if navigation == "llm" and reader is None:
            raise InputError("LLM navigation of the tree index needs a reader")
        if branch < 1:
            raise InputError("the tree's branch factor must be at least 1")
        self.tree = tree
        self.embedder = embedder
        self.reader = reader
        self.navigation = navigation
        self.branch = branch
        self.build_cost = tree.cost
        self.build_seconds = tree.build_seconds
        self.built_now = tree.built_now
        top = tree.layers
        self.roots = [n.index for n in tree.nodes if n.layer == top]

    def _rank(self, query: str, candidates: list[int], scores: np.ndarray, calls: list[LLMCall]) -> list[int]:
        """``candidates`` best first: the reader's picks first (LLM navigation), the rest by similarity."""
        by_score = sorted(candidates, key=lambda c: (-scores[c], c))
        if self.navigation == "embedding":
            return by_score
        listing = "\n\n".join(f"({i}) {' '.join(self.tree.nodes[c].text.splitlines())}"
                              for i, c in enumerate(candidates, start=1))
        prompt = SELECT_PROMPT.format(num_chunks=len(candidates), context_list=listing,
                                      branching_factor=self.branch, query_str=query)
        completion = self.reader.complete([{"role": "user", "content": prompt}], GenerationParams(max_tokens=64))
        calls.append(LLMCall.from_completion("navigate", completion))
        match = re.search(r"ANSWER:\s*([\d,\s]+)", completion.text, re.IGNORECASE)
        picked: list[int] = []
        for number in re.findall(r"\d+", match.group(1) if match else "")[: self.branch]:
            i = int(number) - 1
            if 0 <= i < len(candidates) and candidates[i] not in picked:
                picked.append(candidates[i])
        if not picked:
            log.info("tree navigation: no usable choice in %r; similarity decides", completion.text[:80])
        return picked + [c for c in by_score if c not in picked]

    def run_with_calls(self, query: str, k: int | None = None) -> tuple[list[ScoredChunk], list[LLMCall]]:
        """Leaves under the beam, best first, and the navigation calls made (none with embedding navigation)."""
        scores = self.tree.vectors @ self.embedder.embed([query])[0]
        calls: list[LLMCall] = []
        candidates = self.roots
        while self.tree.nodes[candidates[0]].layer > 0:
            streaming.check_cancelled()  # each level's navigation (a reader call with llm) for a question still asked
            beam = self._rank(query, candidates, scores, calls)[: self.branch]
            candidates = [c for node in beam for c in self.tree.children[node]]
        ranked = self._rank(query, candidates, scores, calls)[: k or len(candidates)]
        return [ScoredChunk(self.tree.nodes[c], float(scores[c])) for c in ranked], calls

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        return self.run_with_calls(query, k)[0]


@RETRIEVERS.register(
    "tree", help="a summary tree over the chunks, walked from the root (LlamaIndex's tree index)",
    calls_reader=True,  # its summaries are written by the reader (and, navigated by llm, each question calls it)
    options=(Option("tree_navigation", str, "embedding", "how a branch is picked", choices=NAVIGATIONS),))
def tree_retriever(index: IndexView, tree_navigation: str = "embedding") -> TreeIndexRetriever:
    o = index.options
    summarizer = tree_summarizer(index.summary_reader)
    # The leaves are the index's chunks, with the embeddings dense retrieval uses.
    directory = index.dir / f"tree-{tree_key(summarizer, index.embedder, o.tree_children)}"
    tree = open_tree_index(directory, lambda: build_tree_index(
        index.document.content_hash, index.chunks, index.chunk_vectors(), index.embedder, summarizer, o.tree_children))
    return TreeIndexRetriever(tree, index.embedder, index.reader, tree_navigation, o.tree_branch)
