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

Modules, by concern: :mod:`~lcrag.retrieval.corpus.settings` (what an index is built with, checked against
meta.json), :mod:`~lcrag.retrieval.corpus.files` (file names, atomic writes, the build lock),
:mod:`~lcrag.retrieval.corpus.build` (the steps), :mod:`~lcrag.retrieval.corpus.search` (MaxP, faiss, BM25) and
:mod:`~lcrag.retrieval.corpus.index` (:class:`CorpusIndex`, which opens, reads and searches a built index).
"""

from lcrag.retrieval.corpus.build import BuildReport, ProgressFactory
from lcrag.retrieval.corpus.files import INDEX_FILES, index_directory
from lcrag.retrieval.corpus.index import CorpusIndex
from lcrag.retrieval.corpus.search import UnitHit, maxp_search, piece_layout
from lcrag.retrieval.corpus.settings import FAISS_KINDS, SCORERS, CorpusBuildConfig

__all__ = [
    "FAISS_KINDS",
    "INDEX_FILES",
    "SCORERS",
    "BuildReport",
    "CorpusBuildConfig",
    "CorpusIndex",
    "ProgressFactory",
    "UnitHit",
    "index_directory",
    "maxp_search",
    "piece_layout",
]
