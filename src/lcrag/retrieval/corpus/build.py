"""The steps that build a corpus index, each skipped when its files exist (see :mod:`lcrag.retrieval.corpus`)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lcrag.chunking.units import (
    Graph,
    Pieces,
    Units,
    cut_pieces,
    group_documents,
    links_graph,
    make_units,
    mentions_graph,
    neighbours_graph,
    render_document,
)
from lcrag.documents.corpus import CorpusDocument, CorpusStore
from lcrag.core.errors import InputError
from lcrag.core.lazy import lazy_module
from lcrag.retrieval.bm25 import write_bm25
from lcrag.retrieval.corpus.files import file_key, save_npz, write_meta
from lcrag.retrieval.corpus.search import import_faiss
from lcrag.retrieval.corpus.settings import CorpusBuildConfig, build_record, grouped_settings
from lcrag.retrieval.dense import EmbedBatches, embed_rows, local_batches
from lcrag.retrieval.embedders import Embedder
from lcrag.core.tokenization import Tokenizer, count_many

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")

ProgressFactory = Callable[[str, int], Callable[..., None]]


class BuildingIndex(Protocol):
    """What the build steps read of the corpus index they fill in (:class:`lcrag.retrieval.corpus.index.CorpusIndex`
    has it). Named here, not imported: the index runs these steps, so importing it back would make an import circle."""

    dir: Path
    meta: dict
    store: CorpusStore
    pieces: Pieces

    @property
    def unit_kinds(self) -> list[str]: ...

    def __init__(self, path: Path, *, embedder: Embedder | None = None) -> None: ...

    def piece_texts(self, lo: int, hi: int) -> list[str]: ...

    def unit_texts(self, kind: str, units: range | list[int]) -> list[str]: ...

    def embeddings_path(self, embedder_name: str) -> Path: ...

    def document_vectors(self) -> np.ndarray: ...

    def units(self, kind: str) -> Units: ...

    def vectors(self, embedder_name: str) -> Any: ...


@dataclass
class BuildReport:
    seconds: dict[str, float] = field(default_factory=dict)
    embedded_pieces: int = 0


class BuildRun:
    """One build of the index at ``out``: its meta (rewritten after each step), progress bars and step timings."""

    def __init__(self, out: Path, meta: dict, config: CorpusBuildConfig, tokenizer: Tokenizer,
                 progress: ProgressFactory | None):
        self.out, self.meta, self.config, self.tokenizer = out, meta, config, tokenizer
        self.report = BuildReport()
        self.tick = progress or (lambda description, total: (lambda n=1, description=None: None))
        self.tokens_path = out / f"tokens-{file_key(tokenizer.name)}.npz"

    @contextmanager
    def step(self, name: str):
        started = time.perf_counter()
        yield  # a step that raises records no time
        self.report.seconds[name] = round(time.perf_counter() - started, 3)

    def save_meta(self) -> None:
        write_meta(self.out / "meta.json", self.meta)

    def documents(self, source: str | Path, skip_bad: bool) -> int:
        """1. the documents, streamed into corpus.sqlite; their count."""
        db = self.out / "corpus.sqlite"
        if not db.exists():
            with self.step("ingest"):
                store, ingest = CorpusStore.ingest(source, db, skip_bad=skip_bad,
                                                   progress=self.tick("reading corpus", None))
                self.meta["skipped_records"] = ingest.skipped
            store.close()
        store = CorpusStore(db)
        try:
            return len(store)
        finally:
            store.close()

    def pieces(self, n_docs: int) -> None:
        """2. the pieces (MaxP's and the passage units') of every document."""
        pieces_path = self.out / "pieces.npz"
        if not pieces_path.exists():
            store = CorpusStore(self.out / "corpus.sqlite")
            with self.step("pieces"):
                p = cut_pieces(store, self.config.piece_words, progress=self.tick("cutting pieces", n_docs))
                save_npz(pieces_path, doc=p.doc, start=p.start, end=p.end)
            store.close()
        self.meta["documents"] = n_docs
        self.save_meta()

    def token_counts(self, index: BuildingIndex, n_docs: int) -> None:
        """3. token counts of documents and pieces (sizes of groups, budgets)."""
        if not self.tokens_path.exists():
            with self.step("tokens"):
                doc_tokens, piece_tokens = count_tokens(index, self.tokenizer, self.tick("counting tokens", n_docs))
                save_npz(self.tokens_path, doc=doc_tokens, piece=piece_tokens)

    def embeddings(self, index: BuildingIndex, embedder: Embedder | None, embed_batches: EmbedBatches | None) -> None:
        """4. piece embeddings (resumable batch by batch)."""
        if embedder is None:
            raise InputError("dense retrieval needs an embedder")
        path = index.embeddings_path(embedder.name)
        if not path.exists():
            with self.step("embed"):
                bar = self.tick("embedding pieces", len(index.pieces))
                embed_rows(len(index.pieces), index.piece_texts, embed_batches or local_batches(embedder),
                           path, dimension=embedder.dimension, batch=self.config.batch, progress=bar)
            self.report.embedded_pieces = len(index.pieces)
        self.meta["embedder"] = embedder.name

    def units(self, index: BuildingIndex, kind: str, n_docs: int) -> None:
        """5. the units of one kind."""
        unit_dir = self.out / "units" / kind
        unit_dir.mkdir(parents=True, exist_ok=True)
        if (unit_dir / "units.npz").exists():
            return
        stamp = {"settings": grouped_settings(self.config, self.tokenizer.name)} if kind == "grouped" else {}
        self.meta.setdefault("units", {})[kind] = stamp  # recorded before the file: no file of unknown settings
        self.save_meta()
        with self.step(f"units:{kind}"):
            groups, graph_info = None, {}
            if kind == "grouped":
                groups, graph_info = document_groups(index, self.config, self.tokens_path)
            units = make_units(kind, index.pieces, n_docs, groups)
            save_npz(unit_dir / "units.npz", ptr=units.ptr, docs=units.docs, piece_unit=units.piece_unit)
            self.meta["units"][kind] = {"count": len(units), **graph_info, **stamp}
            self.save_meta()

    def searchers(self, index: BuildingIndex, kind: str, embedder: Embedder | None) -> None:
        """6. BM25 and faiss over one unit kind."""
        unit_dir = self.out / "units" / kind
        if self.config.bm25 and not (unit_dir / "bm25.done").exists():
            with self.step(f"bm25:{kind}"):
                build_bm25(index, kind, self.tick(f"BM25 over {kind} units", len(index.units(kind))))
        faiss_kind = self.config.faiss
        if faiss_kind and not (unit_dir / f"faiss-{faiss_kind}-{file_key(embedder.name)}.index").exists():
            with self.step(f"faiss:{kind}"):
                build_faiss(index, kind, faiss_kind, embedder.name)

    def finish(self, index: BuildingIndex) -> None:
        self.meta["build"] = build_record(self.meta.get("build", {}), self.config, index.unit_kinds)
        self.meta.setdefault("seconds", {}).update(self.report.seconds)
        self.meta["pieces"] = len(index.pieces)
        self.save_meta()
        index.meta = self.meta


def build_steps(index_class: type[BuildingIndex], source: str | Path, run: BuildRun, *, embedder: Embedder | None,
                embed_batches: EmbedBatches | None, skip_bad: bool) -> tuple[BuildingIndex, BuildReport]:
    """Every step of ``run`` in order; each one skipped when its files exist."""
    n_docs = run.documents(source, skip_bad)
    run.pieces(n_docs)
    index = index_class(run.out, embedder=embedder)
    index.meta = run.meta
    run.token_counts(index, n_docs)
    if run.config.embedder:
        run.embeddings(index, embedder, embed_batches)
    for kind in run.config.units:
        run.units(index, kind, n_docs)
        run.searchers(index, kind, embedder)
    run.finish(index)
    return index, run.report


def count_tokens(index: BuildingIndex, tokenizer: Tokenizer, bar) -> tuple[np.ndarray, np.ndarray]:
    """(document, piece) token counts, counted in batches of documents; a one-piece document is counted once."""
    pieces = index.pieces
    doc_tokens = np.zeros(len(index.store), dtype=np.int32)
    piece_tokens = np.zeros(len(pieces), dtype=np.int32)
    bounds = np.searchsorted(pieces.doc, np.arange(len(index.store) + 1))
    batch: list[CorpusDocument] = []

    def flush() -> None:
        texts: list[str] = []
        slots: list[tuple[int, int, int]] = []  # (document, first piece, last piece) counted by texts[i]
        for d in batch:
            first, last = int(bounds[d.idx]), int(bounds[d.idx + 1])
            texts.append(render_document(d))
            if last - first == 1 and pieces.start[first] == 0 and pieces.end[first] == len(d.text):
                slots.append((d.idx, first, last))  # a one-piece document: piece text == document text
                continue
            slots.append((d.idx, 0, 0))
            for p in range(first, last):
                texts.append(render_document(d, int(pieces.start[p]), int(pieces.end[p])))
                slots.append((-1, p, p + 1))
        for (doc, first, last), n in zip(slots, count_many(tokenizer, texts)):
            if doc >= 0:
                doc_tokens[doc] = n
            piece_tokens[first:last] = n
        bar(len(batch))
        batch.clear()

    for d in index.store.iter():
        batch.append(d)
        if len(batch) >= 500:
            flush()
    if batch:
        flush()
    return doc_tokens, piece_tokens


def document_groups(index: BuildingIndex, config: CorpusBuildConfig, tokens_path: Path) -> tuple[list[list[int]], dict]:
    """The documents of each grouped unit, and what the grouping was (the graph it followed, its edges)."""
    grouping = config.grouping
    graph: Graph | None = None
    if grouping in ("auto", "links"):
        graph = links_graph(index.store)
        if grouping == "auto" and graph.edges == 0:
            grouping = "mentions"
        else:
            grouping = "links"
    if grouping == "mentions":
        graph = mentions_graph(index.store)
    elif grouping == "neighbours":
        graph = neighbours_graph(index.document_vectors())
    with np.load(tokens_path) as z:
        sizes = z["doc"]
    groups = group_documents(graph, sizes, config.group_tokens)
    return groups, {"grouping": grouping, "edges": int(graph.edges), "group_tokens": config.group_tokens}


def build_bm25(index: BuildingIndex, kind: str, bar) -> None:
    """The BM25 index over ``kind`` units, written by the same core as a document's (:func:`write_bm25`).

    Unit texts are read 1000 at a time and handed over one by one, so a corpus never sits in memory whole.
    """
    unit_dir = index.dir / "units" / kind
    bm25_dir = unit_dir / "bm25"
    shutil.rmtree(bm25_dir, ignore_errors=True)  # a build that died half-way leaves files tantivy won't reopen
    bm25_dir.mkdir(parents=True)
    n = len(index.units(kind))

    def units():
        for lo in range(0, n, 1000):
            hi = min(lo + 1000, n)
            yield from zip(range(lo, hi), index.unit_texts(kind, range(lo, hi)))
            bar(hi - lo)

    write_bm25(bm25_dir, units(), heap_size=256_000_000, num_threads=min(4, os.cpu_count() or 1))
    (unit_dir / "bm25.done").touch()


def build_faiss(index: BuildingIndex, kind: str, faiss_kind: str, embedder_name: str) -> None:
    faiss = import_faiss()
    vectors = index.vectors(embedder_name)
    d = vectors.shape[1]
    n = len(vectors)
    if faiss_kind == "flat":
        searcher = faiss.IndexFlatIP(d)
    elif faiss_kind == "hnsw":
        searcher = faiss.IndexHNSWFlat(d, 32, faiss.METRIC_INNER_PRODUCT)
    else:
        nlist = max(1, min(int(4 * np.sqrt(n)), n // 39))  # faiss wants >= 39 training points per list
        searcher = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
        rng = np.random.default_rng(0)
        sample = np.sort(rng.choice(n, size=min(n, 256 * nlist), replace=False))
        searcher.train(np.ascontiguousarray(vectors[sample]))
        searcher.nprobe = min(nlist, 16)
    for lo in range(0, n, 65536):
        searcher.add(np.ascontiguousarray(vectors[lo : lo + 65536]))
    path = index.dir / "units" / kind / f"faiss-{faiss_kind}-{file_key(embedder_name)}.index"
    tmp = path.with_name(path.name + ".partial")
    faiss.write_index(searcher, str(tmp))
    os.replace(tmp, path)
