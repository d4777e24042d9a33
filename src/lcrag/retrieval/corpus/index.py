""":class:`CorpusIndex`: open a built corpus index, read its units and search them; ``CorpusIndex.build`` makes one."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from lcrag.chunking.units import UNIT_KINDS, Pieces, Units, render_document
from lcrag.documents.corpus import CorpusDocument, CorpusStore
from lcrag.core.errors import InputError
from lcrag.core.lazy import lazy_module
from lcrag.retrieval.corpus.build import BuildReport, BuildRun, ProgressFactory, build_steps
from lcrag.retrieval.corpus.files import build_lock, file_key, fingerprint, index_directory, write_meta
from lcrag.retrieval.corpus.search import UnitBM25, UnitHit, faiss_search, import_faiss, maxp_search, piece_layout
from lcrag.retrieval.corpus.settings import SCORERS, CorpusBuildConfig, grouped_settings, reconcile
from lcrag.retrieval.dense import EmbedBatches
from lcrag.retrieval.embedders import Embedder
from lcrag.core.tokenization import Tokenizer

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")


class CorpusIndex:
    """Open a built index; ``CorpusIndex.build`` makes one."""

    def __init__(self, path: str | Path, embedder: Embedder | None = None):
        self.dir = self.check(path)
        meta_path = self.dir / "meta.json"
        self.meta = json.loads(meta_path.read_text())
        self.store = CorpusStore(self.dir / "corpus.sqlite")
        with np.load(self.dir / "pieces.npz") as z:
            self.pieces = Pieces(z["doc"], z["start"], z["end"])
        self._embedder = embedder
        self._units: dict[str, Units] = {}
        self._bm25: dict[str, UnitBM25] = {}
        self._faiss: dict[str, object] = {}
        self._vectors: dict[str, np.ndarray] = {}
        self._layouts: dict[str, tuple] = {}
        # Per-corpus figures, read or summed once (a question's budget needs them; the corpus does not change).
        self._unit_tokens: dict[str, np.ndarray] = {}
        self._figures_lock = threading.Lock()

    @staticmethod
    def check(path: str | Path) -> Path:
        """``path`` as a finished corpus index's directory, or a one-line error saying what it is instead."""
        directory = Path(path)
        if not (directory / "meta.json").is_file():
            raise InputError(f"{directory} is not a corpus index (no meta.json); build one with `lcrag corpus build`")
        if not (directory / "pieces.npz").exists():  # meta.json is written first, so a build may stop before these
            raise InputError(f"{directory} is not finished building; resume it with `lcrag corpus build`")
        return directory

    @property
    def embedder(self) -> Embedder | None:
        """The query embedder (dense search); may be set after opening, so BM25-only use never loads a model."""
        return self._embedder

    @embedder.setter
    def embedder(self, embedder: Embedder | None) -> None:
        self._embedder = embedder

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
        source_bytes, source_sha256 = fingerprint(source)  # by content: the same path may hold another corpus
        identity = {"source_sha256": source_sha256, "piece_words": config.piece_words}
        with build_lock(out):  # a concurrent build of the same index waits here, then finds its steps done
            grouped = grouped_settings(config, tokenizer.name) if "grouped" in config.units else None
            meta = reconcile(out, identity, grouped, rebuild)
            meta.update(identity, source=str(source), source_bytes=source_bytes, tokenizer=tokenizer.name)
            write_meta(out / "meta.json", meta)  # before the first file, so no file is of unknown settings
            run = BuildRun(out, meta, config, tokenizer, progress)
            return build_steps(cls, source, run, embedder=embedder, embed_batches=embed_batches, skip_bad=skip_bad)

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
        path = self.dir / f"tokens-{file_key(tokenizer_name or self.meta['tokenizer'])}.npz"
        with np.load(path) as z:
            return z["doc"], z["piece"]

    def unit_tokens(self, kind: str) -> np.ndarray:
        """Tokens of each unit's text: a group counts its documents, plus one separator token between them (read and
        summed on first use, then kept)."""
        with self._figures_lock:
            if kind not in self._unit_tokens:
                self._unit_tokens[kind] = self._count_unit_tokens(kind)
            return self._unit_tokens[kind]

    def _count_unit_tokens(self, kind: str) -> np.ndarray:
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

    def embeddings_path(self, embedder_name: str) -> Path:
        return self.dir / f"embeddings-{file_key(embedder_name)}.npy"

    def vectors(self, embedder_name: str | None = None) -> np.ndarray:
        """The piece embeddings (memory-mapped) of ``embedder_name``, by default the query embedder's."""
        name = embedder_name or (self._embedder.name if self._embedder else self.meta.get("embedder"))
        if not name or not self.embeddings_path(name).exists():
            raise InputError(f"{self.dir} has no embeddings for {name or 'any embedder'}; build with an embedder")
        if name not in self._vectors:
            self._vectors[name] = np.load(self.embeddings_path(name), mmap_mode="r")
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
            return [self._unit_bm25(kind).search(q, k) for q in queries]
        if self._embedder is None:
            raise InputError("dense search needs the embedder the index was built with")
        qv = self._embedder.embed(queries)
        if faiss:
            return faiss_search(self._faiss_index(kind, faiss), units.piece_unit, qv, k)
        if kind not in self._layouts:
            self._layouts[kind] = piece_layout(units.piece_unit)
        return maxp_search(self.vectors(), units.piece_unit, qv, k, layout=self._layouts[kind])

    def _faiss_index(self, kind: str, faiss_kind: str):
        key = f"{kind}:{faiss_kind}"
        if key not in self._faiss:
            faiss = import_faiss()
            path = self.dir / "units" / kind / f"faiss-{faiss_kind}-{file_key(self._embedder.name)}.index"
            if not path.exists():
                raise InputError(f"{self.dir} has no {faiss_kind} faiss index for {kind} units; build with --faiss {faiss_kind}")
            self._faiss[key] = faiss.read_index(str(path))
        return self._faiss[key]

    def _unit_bm25(self, kind: str) -> UnitBM25:
        if kind not in self._bm25:
            if not (self.dir / "units" / kind / "bm25.done").exists():
                raise InputError(f"{self.dir} has no BM25 index for {kind} units")
            self._bm25[kind] = UnitBM25(self.dir / "units" / kind / "bm25")
        return self._bm25[kind]

    def close(self) -> None:
        self.store.close()
