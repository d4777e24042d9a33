"""A corpus index (LongRAG): the ingested corpus, its pieces and retrieval units, piece embeddings, BM25 over units.

Layout of ``INDEX/``::

    corpus.sqlite                 the documents (streamed in, see lcrag.documents.corpus)
    pieces.npz                    piece -> (document, start, end)
    tokens-<tokenizer>.npz        token counts of every document and piece
    embeddings-<embedder>.npy     one unit-norm row per piece (memory-mapped; resumable)
    units/<kind>/units.npz        unit -> documents, piece -> unit (passage | document | grouped)
    units/<kind>/bm25/            tantivy over the units' text
    units/<kind>/faiss-*.index    optional faiss index over the pieces
    meta.json                     build settings, counts and per-step seconds

Each step writes its files atomically and is skipped when they exist, so an interrupted build resumes where it
stopped (embedding resumes mid-way, batch by batch). meta.json records what each step was built from: the corpus by
content (sha256) and the piece size for everything, the tokenizer, grouping and group size for the grouped units. A
build whose settings differ is refused, naming them, unless ``rebuild`` is set: then only the affected steps are
built again. Builds of one index take a lock (``.build.lock``), so a second process waits and then finds them done.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
import hashlib
import json
import logging
import os
import shutil
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path

from filelock import Timeout

from lcrag.chunking.units import (
    GROUPINGS,
    UNIT_KINDS,
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
from lcrag.documents.files import check_regular_file
from lcrag.errors import InputError
from lcrag.lazy import lazy_module
from lcrag.retrieval.bm25 import query_terms
from lcrag.retrieval.dense import EmbedBatches, embed_rows, local_batches
from lcrag.retrieval.embedders import Embedder
from lcrag.storage import atomic_write_text, file_lock
from lcrag.tokenization import Tokenizer, count_many

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use (see lcrag.lazy)
    np = lazy_module("numpy")

SCORERS = ("dense", "bm25")
FAISS_KINDS = ("flat", "ivf", "hnsw")
ProgressFactory = Callable[[str, int], Callable[..., None]]
# What an index holds besides the lock: removed by a rebuild whose corpus content or piece size changed.
INDEX_FILES = ("meta.json*", "corpus.sqlite*", "pieces.npz*", "tokens-*", "embeddings-*", "units")
log = logging.getLogger("lcrag")


def _key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def _save_npz(path: Path, **arrays: np.ndarray) -> None:
    tmp = path.with_name(path.name + ".partial.npz")
    np.savez(tmp, **arrays)
    os.replace(tmp, path)


@dataclass(frozen=True)
class CorpusBuildConfig:
    units: tuple[str, ...] = UNIT_KINDS
    piece_words: int = 100  # passages / MaxP pieces; the bundled embedder reads 256 tokens (~190 words)
    grouping: str = "auto"  # auto: links when the corpus has them, else title mentions
    group_tokens: int = 4096  # LongRAG's ~4K-token units
    embedder: str | None = "minilm"  # None: BM25 only
    bm25: bool = True
    faiss: str | None = None  # flat | ivf | hnsw (pip install lcrag[faiss])
    executor: str = "local"  # local | ray
    batch: int = 256  # pieces per embedding batch

    def check(self) -> None:
        bad = [u for u in self.units if u not in UNIT_KINDS]
        if bad or not self.units:
            raise InputError(f"unknown unit {', '.join(bad) or '(none)'}; choose from {', '.join(UNIT_KINDS)}")
        if self.grouping not in GROUPINGS:
            raise InputError(f"unknown grouping {self.grouping!r}; choose one of {', '.join(GROUPINGS)}")
        if self.grouping == "neighbours" and not self.embedder:
            raise InputError("grouping by embedding neighbours needs an embedder")
        if self.faiss and self.faiss not in FAISS_KINDS:
            raise InputError(f"unknown faiss index {self.faiss!r}; choose one of {', '.join(FAISS_KINDS)}")
        if self.faiss and not self.embedder:
            raise InputError("a faiss index needs an embedder")
        from lcrag.options import at_least

        for name in ("piece_words", "group_tokens", "batch"):
            at_least(name, getattr(self, name), 1)


@dataclass
class UnitHit:
    unit: int
    score: float


@dataclass
class BuildReport:
    seconds: dict[str, float] = field(default_factory=dict)
    embedded_pieces: int = 0


class CorpusIndex:
    """Open a built index; ``CorpusIndex.build`` makes one."""

    def __init__(self, path: str | Path, embedder: Embedder | None = None):
        self.dir = Path(path)
        meta_path = self.dir / "meta.json"
        if not meta_path.exists():
            raise InputError(f"{self.dir} is not a corpus index (no meta.json); build one with `lcrag corpus build`")
        if not (self.dir / "pieces.npz").exists():  # meta.json is written first, so a build may stop before these
            raise InputError(f"{self.dir} is not finished building; resume it with `lcrag corpus build`")
        self.meta = json.loads(meta_path.read_text())
        self.store = CorpusStore(self.dir / "corpus.sqlite")
        with np.load(self.dir / "pieces.npz") as z:
            self.pieces = Pieces(z["doc"], z["start"], z["end"])
        self._embedder = embedder
        self._units: dict[str, Units] = {}
        self._bm25: dict[str, object] = {}
        self._faiss: dict[str, object] = {}
        self._vectors: dict[str, np.ndarray] = {}
        self._layouts: dict[str, tuple] = {}

    # -- building --------------------------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        source: str | Path,
        out: str | Path,
        config: CorpusBuildConfig,
        tokenizer: Tokenizer,
        embedder: Embedder | None = None,
        embed_batches: EmbedBatches | None = None,
        progress: ProgressFactory | None = None,
        skip_bad: bool = False,
        rebuild: bool = False,
    ) -> tuple[CorpusIndex, BuildReport]:
        """Build (or finish building) the index at ``out`` from the JSONL corpus ``source``.

        ``embedder`` embeds queries and, unless ``embed_batches`` (e.g. Ray) is given, the pieces too. An ``out``
        built with other settings is refused unless ``rebuild``, which rebuilds the affected steps.
        """
        config.check()
        out = index_directory(out)
        source_bytes, source_sha256 = _fingerprint(source)  # by content: the same path may hold another corpus
        identity = {"source_sha256": source_sha256, "piece_words": config.piece_words}
        with _build_lock(out):  # a concurrent build of the same index waits here, then finds its steps done
            grouped = _grouped_settings(config, tokenizer.name) if "grouped" in config.units else None
            meta = _reconcile(out, identity, grouped, rebuild)
            meta.update(identity, source=str(source), source_bytes=source_bytes, tokenizer=tokenizer.name)
            _write_meta(out / "meta.json", meta)  # before the first file, so no file is of unknown settings
            return cls._build_steps(source, out, meta, config, tokenizer, embedder=embedder,
                                    embed_batches=embed_batches, progress=progress, skip_bad=skip_bad)

    @classmethod
    def _build_steps(cls, source: str | Path, out: Path, meta: dict, config: CorpusBuildConfig, tokenizer: Tokenizer, *,
                     embedder: Embedder | None, embed_batches: EmbedBatches | None, progress: ProgressFactory | None,
                     skip_bad: bool) -> tuple[CorpusIndex, BuildReport]:
        report = BuildReport()
        tick = progress or (lambda description, total: (lambda n=1, description=None: None))
        meta_path = out / "meta.json"

        @contextmanager
        def step(name: str):
            started = time.perf_counter()
            yield  # a step that raises records no time
            report.seconds[name] = round(time.perf_counter() - started, 3)

        # 1. documents
        db = out / "corpus.sqlite"
        if not db.exists():
            with step("ingest"):
                store, ingest = CorpusStore.ingest(source, db, skip_bad=skip_bad, progress=tick("reading corpus", None))
                meta["skipped_records"] = ingest.skipped
            store.close()
        store = CorpusStore(db)
        n_docs = len(store)

        # 2. pieces
        pieces_path = out / "pieces.npz"
        if not pieces_path.exists():
            with step("pieces"):
                p = cut_pieces(store, config.piece_words, progress=tick("cutting pieces", n_docs))
                _save_npz(pieces_path, doc=p.doc, start=p.start, end=p.end)
        meta["documents"] = n_docs
        _write_meta(meta_path, meta)
        index = cls(out, embedder=embedder)
        index.meta = meta

        # 3. token counts (sizes of groups, budgets)
        tokens_path = out / f"tokens-{_key(tokenizer.name)}.npz"
        if not tokens_path.exists():
            with step("tokens"):
                doc_tokens, piece_tokens = index._count_tokens(tokenizer, tick("counting tokens", n_docs))
                _save_npz(tokens_path, doc=doc_tokens, piece=piece_tokens)

        # 4. piece embeddings
        if config.embedder:
            if embedder is None:
                raise InputError("dense retrieval needs an embedder")
            path = index._embeddings_path(embedder.name)
            if not path.exists():
                with step("embed"):
                    bar = tick("embedding pieces", len(index.pieces))
                    embed_rows(len(index.pieces), index.piece_texts, embed_batches or local_batches(embedder),
                               path, dimension=embedder.dimension, batch=config.batch, progress=bar)
                report.embedded_pieces = len(index.pieces)
            meta["embedder"] = embedder.name

        # 5. units, 6. BM25 and faiss per unit kind
        for kind in config.units:
            unit_dir = out / "units" / kind
            unit_dir.mkdir(parents=True, exist_ok=True)
            if not (unit_dir / "units.npz").exists():
                stamp = {"settings": _grouped_settings(config, tokenizer.name)} if kind == "grouped" else {}
                meta.setdefault("units", {})[kind] = stamp  # recorded before the file: no file of unknown settings
                _write_meta(meta_path, meta)
                with step(f"units:{kind}"):
                    groups, graph_info = None, {}
                    if kind == "grouped":
                        groups, graph_info = index._groups(config, tokens_path)
                    units = make_units(kind, index.pieces, n_docs, groups)
                    _save_npz(unit_dir / "units.npz", ptr=units.ptr, docs=units.docs, piece_unit=units.piece_unit)
                    meta["units"][kind] = {"count": len(units), **graph_info, **stamp}
                    _write_meta(meta_path, meta)
            if config.bm25 and not (unit_dir / "bm25.done").exists():
                with step(f"bm25:{kind}"):
                    index._build_bm25(kind, tick(f"BM25 over {kind} units", len(index.units(kind))))
            if config.faiss and not (unit_dir / f"faiss-{config.faiss}-{_key(embedder.name)}.index").exists():
                with step(f"faiss:{kind}"):
                    index._build_faiss(kind, config.faiss, embedder.name)
        meta["build"] = _build_record(meta.get("build", {}), config, index.unit_kinds)
        meta.setdefault("seconds", {}).update(report.seconds)
        meta["pieces"] = len(index.pieces)
        _write_meta(meta_path, meta)
        index.meta = meta
        return index, report

    def _count_tokens(self, tokenizer: Tokenizer, bar) -> tuple[np.ndarray, np.ndarray]:
        doc_tokens = np.zeros(len(self.store), dtype=np.int32)
        piece_tokens = np.zeros(len(self.pieces), dtype=np.int32)
        bounds = np.searchsorted(self.pieces.doc, np.arange(len(self.store) + 1))
        batch: list[CorpusDocument] = []

        def flush() -> None:
            texts: list[str] = []
            slots: list[tuple[int, int, int]] = []  # (document, first piece, last piece) counted by texts[i]
            for d in batch:
                first, last = int(bounds[d.idx]), int(bounds[d.idx + 1])
                if last - first == 1 and self.pieces.start[first] == 0 and self.pieces.end[first] == len(d.text):
                    # a one-piece document: piece text == document text, count it once
                    texts.append(render_document(d))
                    slots.append((d.idx, first, last))
                    continue
                texts.append(render_document(d))
                slots.append((d.idx, 0, 0))
                for p in range(first, last):
                    texts.append(render_document(d, int(self.pieces.start[p]), int(self.pieces.end[p])))
                    slots.append((-1, p, p + 1))
            for (doc, first, last), n in zip(slots, count_many(tokenizer, texts)):
                if doc >= 0:
                    doc_tokens[doc] = n
                piece_tokens[first:last] = n
            bar(len(batch))
            batch.clear()

        for d in self.store.iter():
            batch.append(d)
            if len(batch) >= 500:
                flush()
        if batch:
            flush()
        return doc_tokens, piece_tokens

    def _groups(self, config: CorpusBuildConfig, tokens_path: Path) -> tuple[list[list[int]], dict]:
        grouping = config.grouping
        graph: Graph | None = None
        if grouping in ("auto", "links"):
            graph = links_graph(self.store)
            if grouping == "auto" and graph.edges == 0:
                grouping = "mentions"
            else:
                grouping = "links"
        if grouping == "mentions":
            graph = mentions_graph(self.store)
        elif grouping == "neighbours":
            graph = neighbours_graph(self.document_vectors())
        with np.load(tokens_path) as z:
            sizes = z["doc"]
        groups = group_documents(graph, sizes, config.group_tokens)
        return groups, {"grouping": grouping, "edges": int(graph.edges), "group_tokens": config.group_tokens}

    def _build_bm25(self, kind: str, bar) -> None:
        import tantivy

        unit_dir = self.dir / "units" / kind
        bm25_dir = unit_dir / "bm25"
        shutil.rmtree(bm25_dir, ignore_errors=True)  # a build that died half-way leaves files tantivy won't reopen
        bm25_dir.mkdir(parents=True)
        builder = tantivy.SchemaBuilder()
        builder.add_integer_field("idx", stored=True, indexed=False)
        builder.add_text_field("text", stored=False, tokenizer_name="default", index_option="freq")
        index = tantivy.Index(builder.build(), path=str(bm25_dir))
        writer = index.writer(heap_size=256_000_000, num_threads=min(4, os.cpu_count() or 1))
        n = len(self.units(kind))
        for lo in range(0, n, 1000):
            hi = min(lo + 1000, n)
            for u, text in zip(range(lo, hi), self.unit_texts(kind, range(lo, hi))):
                writer.add_document(tantivy.Document(idx=u, text=text))
            bar(hi - lo)
        writer.commit()
        writer.wait_merging_threads()
        (unit_dir / "bm25.done").touch()

    def _build_faiss(self, kind: str, faiss_kind: str, embedder_name: str) -> None:
        faiss = _import_faiss()
        vectors = self.vectors(embedder_name)
        d = vectors.shape[1]
        n = len(vectors)
        if faiss_kind == "flat":
            index = faiss.IndexFlatIP(d)
        elif faiss_kind == "hnsw":
            index = faiss.IndexHNSWFlat(d, 32, faiss.METRIC_INNER_PRODUCT)
        else:
            nlist = max(1, min(int(4 * np.sqrt(n)), n // 39))  # faiss wants >= 39 training points per list
            index = faiss.IndexIVFFlat(faiss.IndexFlatIP(d), d, nlist, faiss.METRIC_INNER_PRODUCT)
            rng = np.random.default_rng(0)
            sample = np.sort(rng.choice(n, size=min(n, 256 * nlist), replace=False))
            index.train(np.ascontiguousarray(vectors[sample]))
            index.nprobe = min(nlist, 16)
        for lo in range(0, n, 65536):
            index.add(np.ascontiguousarray(vectors[lo : lo + 65536]))
        path = self.dir / "units" / kind / f"faiss-{faiss_kind}-{_key(embedder_name)}.index"
        tmp = path.with_name(path.name + ".partial")
        faiss.write_index(index, str(tmp))
        os.replace(tmp, path)

    # -- reading ---------------------------------------------------------------------------------------------------
    @property
    def unit_kinds(self) -> list[str]:
        return [k for k in UNIT_KINDS if (self.dir / "units" / k / "units.npz").exists()]

    def units(self, kind: str) -> Units:
        if kind not in self._units:
            path = self.dir / "units" / kind / "units.npz"
            if not path.exists():
                built = ", ".join(self.unit_kinds) or "none"
                raise InputError(f"{self.dir} has no {kind!r} units (built: {built}); build them with --unit {kind}")
            with np.load(path) as z:
                self._units[kind] = Units(kind, z["ptr"], z["docs"], z["piece_unit"])
        return self._units[kind]

    def tokens(self, tokenizer_name: str | None = None) -> tuple[np.ndarray, np.ndarray]:
        """(document, piece) token counts of the build's tokenizer."""
        path = self.dir / f"tokens-{_key(tokenizer_name or self.meta['tokenizer'])}.npz"
        with np.load(path) as z:
            return z["doc"], z["piece"]

    def unit_tokens(self, kind: str) -> np.ndarray:
        """Tokens of each unit's text: a group counts its documents, plus one separator token between them."""
        doc_tokens, piece_tokens = self.tokens()
        if kind == "passage":
            return piece_tokens
        units = self.units(kind)
        if kind == "document":
            return doc_tokens
        per_doc = doc_tokens[units.docs].astype(np.int64)
        sums = np.add.reduceat(per_doc, units.ptr[:-1]) if len(per_doc) else per_doc
        return (sums + np.diff(units.ptr) - 1).astype(np.int64)

    def piece_texts(self, lo: int, hi: int) -> list[str]:
        docs = {d.idx: d for d in self.store.get_many(sorted(set(self.pieces.doc[lo:hi].tolist())))}
        return [render_document(docs[int(self.pieces.doc[p])], int(self.pieces.start[p]), int(self.pieces.end[p]))
                for p in range(lo, hi)]

    def unit_documents(self, kind: str, unit: int) -> list[CorpusDocument]:
        """A unit's documents in reading order (by title, then position, as LongRAG orders its context)."""
        docs = self.store.get_many(self.units(kind).unit_docs(unit).tolist())
        return sorted(docs, key=lambda d: (d.title, d.idx))

    def unit_texts(self, kind: str, units: range | list[int]) -> list[str]:
        units = list(units)
        if kind == "passage":
            out = []
            for u in units:  # passage units are pieces
                out.extend(self.piece_texts(u, u + 1))
            return out
        u_obj = self.units(kind)
        all_docs = sorted({int(d) for u in units for d in u_obj.unit_docs(u)})
        by_idx = {d.idx: d for d in self.store.get_many(all_docs)}
        texts = []
        for u in units:
            docs = sorted((by_idx[int(d)] for d in u_obj.unit_docs(u)), key=lambda d: (d.title, d.idx))
            texts.append("\n\n".join(render_document(d) for d in docs))
        return texts

    def unit_titles(self, kind: str, unit: int) -> list[str]:
        return [d.title for d in self.store.get_many(self.units(kind).unit_docs(unit).tolist())]

    def _embeddings_path(self, embedder_name: str) -> Path:
        return self.dir / f"embeddings-{_key(embedder_name)}.npy"

    def vectors(self, embedder_name: str | None = None) -> np.ndarray:
        """The piece embeddings (memory-mapped) of ``embedder_name``, by default the query embedder's."""
        name = embedder_name or (self._embedder.name if self._embedder else self.meta.get("embedder"))
        if not name or not self._embeddings_path(name).exists():
            raise InputError(f"{self.dir} has no embeddings for {name or 'any embedder'}; build with an embedder")
        if name not in self._vectors:
            self._vectors[name] = np.load(self._embeddings_path(name), mmap_mode="r")
        return self._vectors[name]

    def document_vectors(self) -> np.ndarray:
        """One unit-norm vector per document: the mean of its pieces' (pieces of a document are consecutive)."""
        vectors = self.vectors()
        starts = np.searchsorted(self.pieces.doc, np.arange(len(self.store)))
        sums = np.add.reduceat(np.asarray(vectors, dtype=np.float32), starts, axis=0)
        return sums / np.maximum(np.linalg.norm(sums, axis=1, keepdims=True), 1e-12)

    # -- searching -------------------------------------------------------------------------------------------------
    def search(self, query: str, kind: str, scorer: str = "dense", k: int = 10, faiss: str | None = None) -> list[UnitHit]:
        return self.search_many([query], kind, scorer, k, faiss=faiss)[0]

    def search_many(self, queries: list[str], kind: str, scorer: str = "dense", k: int = 10,
                    faiss: str | None = None) -> list[list[UnitHit]]:
        """The top ``k`` units per query, best first; ties broken by unit position (stable across runs)."""
        if scorer not in SCORERS:
            raise InputError(f"unknown scorer {scorer!r}; choose one of {', '.join(SCORERS)}")
        units = self.units(kind)
        k = max(1, min(k, len(units)))
        if scorer == "bm25":
            return [self._bm25_search(q, kind, k) for q in queries]
        if self._embedder is None:
            raise InputError("dense search needs the embedder the index was built with")
        qv = self._embedder.embed(queries)
        if faiss:
            return self._faiss_search(qv, kind, k, faiss)
        if kind not in self._layouts:
            self._layouts[kind] = piece_layout(units.piece_unit)
        return maxp_search(self.vectors(), units.piece_unit, qv, k, layout=self._layouts[kind])

    def _faiss_index(self, kind: str, faiss_kind: str):
        key = f"{kind}:{faiss_kind}"
        if key not in self._faiss:
            faiss = _import_faiss()
            path = self.dir / "units" / kind / f"faiss-{faiss_kind}-{_key(self._embedder.name)}.index"
            if not path.exists():
                raise InputError(f"{self.dir} has no {faiss_kind} faiss index for {kind} units; build with --faiss {faiss_kind}")
            self._faiss[key] = faiss.read_index(str(path))
        return self._faiss[key]

    def _faiss_search(self, qv: np.ndarray, kind: str, k: int, faiss_kind: str) -> list[list[UnitHit]]:
        index = self._faiss_index(kind, faiss_kind)
        units = self.units(kind)
        depth = min(index.ntotal, max(100, 20 * k))  # pieces fetched to find k distinct units
        scores, ids = index.search(np.ascontiguousarray(qv, dtype=np.float32), depth)
        out = []
        for row_scores, row_ids in zip(scores, ids):
            best: dict[int, float] = {}
            for s, p in zip(row_scores.tolist(), row_ids.tolist()):
                if p >= 0:
                    u = int(units.piece_unit[p])
                    if u not in best or s > best[u]:
                        best[u] = s
            ranked = sorted(best.items(), key=lambda item: (-item[1], item[0]))[:k]
            out.append([UnitHit(u, float(s)) for u, s in ranked])
        return out

    def _bm25_search(self, query: str, kind: str, k: int) -> list[UnitHit]:
        import tantivy

        if kind not in self._bm25:
            path = self.dir / "units" / kind / "bm25"
            if not (self.dir / "units" / kind / "bm25.done").exists():
                raise InputError(f"{self.dir} has no BM25 index for {kind} units")
            index = tantivy.Index.open(str(path))
            self._bm25[kind] = (index.schema, index.searcher())
        schema, searcher = self._bm25[kind]
        terms = query_terms(query)
        if not terms:
            return []
        q = tantivy.Query.boolean_query(
            [(tantivy.Occur.Should, tantivy.Query.term_query(schema, "text", t)) for t in terms]
        )
        hits = [UnitHit(searcher.doc(addr)["idx"][0], float(score)) for score, addr in searcher.search(q, k).hits]
        hits.sort(key=lambda h: (-h.score, h.unit))
        return hits

    def close(self) -> None:
        self.store.close()


def piece_layout(piece_unit: np.ndarray) -> tuple[np.ndarray | None, np.ndarray, np.ndarray]:
    """How to reduce piece scores to unit scores: an order that puts each unit's pieces together (None when they
    already are, as for passages and documents), where each unit's run starts in that order, and the run's unit."""
    order = None if np.all(piece_unit[1:] >= piece_unit[:-1]) else np.argsort(piece_unit, kind="stable")
    ordered = piece_unit if order is None else piece_unit[order]
    starts = np.flatnonzero(np.concatenate([[True], ordered[1:] != ordered[:-1]])) if len(ordered) else ordered
    return order, starts, ordered[starts]


def maxp_search(vectors: np.ndarray, piece_unit: np.ndarray, qv: np.ndarray, k: int, block: int = 32768,
                layout: tuple | None = None) -> list[list[UnitHit]]:
    """MaxP: a unit's score is the best score of its pieces. Exact: piece scores are computed streaming the
    (memory-mapped) matrix in blocks, then each unit's maximum is one ``reduceat`` over its run of pieces.
    One list of hits per query. ``layout`` (from :func:`piece_layout`) saves re-deriving the runs per call."""
    order, starts, unit_ids = layout if layout is not None else piece_layout(piece_unit)
    n = len(vectors)
    out: list[list[UnitHit]] = []
    per_call = max(1, min(len(qv), (1 << 25) // max(1, n)))  # the piece score matrix stays <= 128 MB
    for q0 in range(0, len(qv), per_call):
        q = np.asarray(qv[q0 : q0 + per_call], dtype=np.float32)
        scores = np.empty((n, len(q)), dtype=np.float32)
        for lo in range(0, n, block):
            scores[lo : lo + block] = np.asarray(vectors[lo : lo + block]) @ q.T
        if order is not None:
            scores = scores[order]
        best = np.maximum.reduceat(scores, starts, axis=0) if n else scores  # (units, queries)
        for j in range(len(q)):
            out.append([UnitHit(int(unit_ids[h.unit]), h.score) for h in _top(best[:, j], k)])
    return out


def _top(scores: np.ndarray, k: int) -> list[UnitHit]:
    k = min(k, len(scores))
    top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    order = sorted(top.tolist(), key=lambda u: (-float(scores[u]), u))
    return [UnitHit(u, float(scores[u])) for u in order if np.isfinite(scores[u])]


def _import_faiss():
    try:
        import faiss
    except ImportError:
        raise InputError("faiss is not installed: pip install 'lcrag[faiss]'") from None
    faiss.omp_set_num_threads(1)  # one query per call: threads only add overhead (measured here)
    return faiss


def index_directory(out: str | Path) -> Path:
    """``out`` as an index directory, created if missing; a file or an uncreatable path is an :class:`InputError`."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise InputError(f"{out} exists and is not a directory; give --out a new or index directory")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"cannot create the index directory {out}: {exc.strerror or exc}") from None
    return out


def _fingerprint(source: str | Path) -> tuple[int, str]:
    """(size, sha256) of the corpus file, streamed. The whole file is hashed: ingesting reads all of it anyway,
    and hashing runs at over 1 GB/s, so a resumed or repeated build pays seconds, never a wrong index."""
    check_regular_file(Path(source), max_bytes=sys.maxsize)  # corpora are streamed, so no size limit here
    digest, size = hashlib.sha256(), 0
    with open(source, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
            size += len(block)
    return size, digest.hexdigest()


@contextmanager
def _build_lock(out: Path) -> Iterator[None]:
    """Hold the index's build lock; say so once when another process holds it, then wait for it."""
    with ExitStack() as stack:
        try:
            stack.enter_context(file_lock(out / ".build.lock", timeout=0))
        except Timeout:
            log.warning("another process is building %s; waiting for it to finish", out)
            stack.enter_context(file_lock(out / ".build.lock"))
        yield


def _grouped_settings(config: CorpusBuildConfig, tokenizer_name: str) -> dict:
    """What grouped units depend on besides the corpus: sizes are in this tokenizer's tokens; neighbours grouping
    also depends on the embedder."""
    settings = {"tokenizer": tokenizer_name, "grouping": config.grouping, "group_tokens": config.group_tokens}
    if config.grouping == "neighbours":
        settings["embedder"] = config.embedder
    return settings


def _differences(built: dict, wanted: dict) -> list[str]:
    def show(value):
        if value is None:
            return "unrecorded"
        return f"{value[:12]}…" if isinstance(value, str) and len(value) == 64 else repr(value)  # sha256: shortened

    return [f"{key} {show(built.get(key))} → {show(value)}" for key, value in wanted.items() if built.get(key) != value]


def _reconcile(out: Path, identity: dict, grouped: dict | None, rebuild: bool) -> dict:
    """The index's meta, after checking that what is built was built with these settings. A difference in the
    corpus content or piece size concerns every step, one in the grouping only the grouped units; it is refused,
    naming it, or with ``rebuild`` the affected files are removed so the build makes them again. ``grouped`` is
    None when this build makes no grouped units (then existing ones are left as they are)."""
    meta_path = out / "meta.json"
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    if not meta:
        return meta
    stale = _differences(meta, identity)
    built_grouped = meta.get("units", {}).get("grouped", {}).get("settings", {})
    has_grouped = (out / "units" / "grouped" / "units.npz").exists()
    stale_grouped = _differences(built_grouped, grouped) if has_grouped and grouped else []
    if not stale and not stale_grouped:
        return meta
    if not rebuild:
        raise InputError(f"{out} holds an index built with other settings ({'; '.join(stale + stale_grouped)}); "
                         "use another --out, or --rebuild to rebuild the affected steps")
    if stale:
        for pattern in INDEX_FILES:
            for path in out.glob(pattern):
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        return {}
    shutil.rmtree(out / "units" / "grouped", ignore_errors=True)
    meta.get("units", {}).pop("grouped", None)
    return meta


def _build_record(previous: dict, config: CorpusBuildConfig, built_units: list[str]) -> dict:
    """The build settings for meta.json. The grouping options are recorded only from a build that made grouped
    units: a later ``--unit passage`` run must not claim a group size its groups were not built with."""
    record = previous | asdict(config) | {"units": built_units}
    if "grouped" not in config.units:
        for key in ("grouping", "group_tokens"):
            record.pop(key)
            if key in previous:
                record[key] = previous[key]
    return record


def _write_meta(path: Path, meta: dict) -> None:
    atomic_write_text(path, json.dumps(meta, indent=1))
