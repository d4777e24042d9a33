"""The shared vocabulary: documents, chunks, LLM calls and answers."""

from __future__ import annotations

import hashlib
import re
import sys
from array import array
from dataclasses import asdict, dataclass, field, fields
from functools import cached_property
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from lcrag.core.registry import PartSpec
from lcrag.core.tokenization import Tokenizer

if TYPE_CHECKING:
    from lcrag.core.provenance import Layout, Source


class Ranking(Protocol):
    """A retriever: ranks a source's chunks (a document's, a collection's, a corpus's units) for a query, best first."""

    name: str

    def run(self, query: str, k: int | None = None) -> list[ScoredChunk]:
        """At most ``k`` chunks (all ranked chunks when ``k`` is None)."""
        ...


class ReadText(Protocol):
    """Text fitted to a token limit (:class:`lcrag.assembly.truncation.TruncatedText`)."""

    text: str
    kept_tokens: int

    @property
    def cut_tokens(self) -> int: ...


# What LC reads of a source that is not read as one text: (question, tokenizer, limit) -> the text that fits.
LongRead = Callable[[str, Tokenizer, int], ReadText]


class SourceIndex(Protocol):
    """What a strategy reads a source through: its retrievers, each made from its spec (name and options) on every
    kind of source, its chunks' token counts, their sentences, and the best of it that fits a limit."""

    def retriever(self, spec: PartSpec | str) -> Ranking: ...  # a spec, or a name with its defaults

    def chunk_tokens(self, chunks: list[Chunk], tokenizer: Tokenizer) -> list[int]: ...

    def sentence_spans(self, start: int, end: int) -> tuple[tuple[int, int], ...]: ...  # relative to start

    def search(self, spec: PartSpec, query: str, depth: int | None) -> Ranked:
        """The chunks the retriever ``spec`` ranks best for ``query`` (at most ``depth``; None: all it ranks), with
        the reader calls it made for it and, when it built summaries, what building them cost."""
        ...

    def read_best(self, question: str, retriever: PartSpec, tokenizer: Tokenizer, limit: int) -> ReadText:
        """The units ``retriever`` ranks best for ``question`` (a corpus's units, a collection's files), whole, while
        they fit ``limit`` tokens: what LC reads of a source over the window that is not cut as one text."""
        ...


class IndexParts(Protocol):
    """What the pipeline lends a source to make its index for one question: the choices that shape it and the two
    ways an index is made and kept (a text's chunks, a corpus's units); the pipeline's reader, embedder, cache and
    memory stay behind them."""

    chunking: str  # how a text is cut: the question's choice, else its strategy's default
    chosen_chunking: str | None  # what the question chose (None: nothing), which a corpus refuses
    unit: str | None  # a corpus's units to retrieve (None: the source's own, else the smallest built)

    def text_index(self, document: Document, made_as: Callable[..., SourceIndex] | None = None) -> SourceIndex:
        """``document``'s index for :attr:`chunking`, kept; ``made_as``: an index class taking
        :class:`lcrag.retrieval.index.DocumentIndex`'s arguments (default: that class)."""
        ...

    def unit_index(self, directory: str, unit: str | None) -> SourceIndex:
        """The units of the corpus index in ``directory``, opened once and kept open."""
        ...


class QuestionSource(Protocol):
    """What questions are asked over, one protocol for three kinds: a :class:`Document` (one text), a collection's
    files (one text, indexed by file: :class:`lcrag.store.segments.CollectionDocument`) and a corpus index read
    unit by unit (:class:`lcrag.documents.indexed_corpus.CorpusSource`, which has no text). The pipeline asks each
    for its index and for what LC reads; a strategy declares the ``kind`` s it reads (its registered ``reads``),
    and asked over another kind it is refused in one line."""

    kind: ClassVar[str]  # "document" or "corpus"
    id: str
    source: str

    @property
    def content_hash(self) -> str: ...

    @property
    def text(self) -> str | None: ...  # its one text; None: it is read through its index alone

    def open_index(self, parts: IndexParts) -> SourceIndex:
        """Its index for one question (made, or found where ``parts`` keeps it)."""
        ...

    def long_read(self, index: Callable[[], SourceIndex], retriever: PartSpec) -> LongRead | None:
        """What LC reads for a question when it is not this source's text cut in the middle (None: it is)."""
        ...


# Source kinds, and what a strategy reads unless it says otherwise (its text: ``ctx.document.text``).
DOCUMENT, CORPUS = "document", "corpus"
READS_DEFAULT = (DOCUMENT,)
HASH_PIECE = 1 << 18  # characters of a text encoded and hashed at a time
_LINE_BREAK = re.compile("\n")


@dataclass(frozen=True)
class Document:
    """A text to ask questions about."""

    kind: ClassVar[str] = DOCUMENT
    text: str
    id: str = ""
    title: str = ""
    source: str = ""
    # For a document joined from several files or records: (offset in ``text``, the part). Indexes that can be
    # built per part (RAPTOR) use them, so adding a file to a collection leaves the other files' indexes alone.
    parts: tuple[tuple[int, Document], ...] = field(default=(), compare=False, repr=False)
    # Pages and sections of the extracted text (PDF, DOCX, HTML, EPUB, Markdown); None for plain text.
    layout: Layout | None = field(default=None, compare=False, repr=False)

    def open_index(self, parts: IndexParts) -> SourceIndex:
        """Its chunks' index, as every text's."""
        return parts.text_index(self)

    def long_read(self, index: Callable[[], SourceIndex], retriever: PartSpec) -> LongRead | None:
        """None: LC reads its text, cut in the middle when it exceeds the window."""
        return None

    def memory_bytes(self, seen: set[int] | None = None) -> int:
        """The bytes this document holds in memory: its text, its layout (segments, page labels, section table) and
        its parts' (a joined document's parts hold texts of their own), each object counted once."""
        seen = set() if seen is None else seen
        size = 0
        for held in (self.text, self.layout):
            if held is not None and id(held) not in seen:
                seen.add(id(held))
                size += held.memory_bytes() if held is self.layout else sys.getsizeof(held)
        return size + sum(part.memory_bytes(seen) for _, part in self.parts)

    @cached_property  # a frozen dataclass still allows it: the value goes straight into __dict__
    def content_hash(self) -> str:
        """The text's SHA-256; for extracted text, of the text and the extractor's version, so an index built from
        one library version's text is rebuilt when an upgrade may change it."""
        extractors = sorted({d.layout.extractor for d in (self, *(p for _, p in self.parts)) if d.layout})
        digest = hashlib.sha256()
        # a piece at a time: a large text is never copied (and encoded) whole, which held the interpreter, and so a
        # server's event loop, for as long as it took (issue 42)
        for at in range(0, len(self.text), HASH_PIECE):
            digest.update(self.text[at:at + HASH_PIECE].encode("utf-8"))
        if extractors:
            digest.update(("\0" + "\0".join(extractors)).encode("utf-8"))
        return digest.hexdigest()

    @cached_property
    def line_breaks(self) -> array:
        """Where the text's line breaks are (ascending offsets), found once: a citation's line numbers are then two
        bisects, where counting the breaks before it read half of a 2 MB text at every citation."""
        return array("q", (m.start() for m in _LINE_BREAK.finditer(self.text)))


@dataclass(frozen=True)
class Chunk:
    """A piece of a document: ``document.text[start:end] == text`` for layer 0.

    Summary nodes (RAPTOR, tree index) have ``layer >= 1``: their text is generated, and ``start``/``end`` span the
    text they summarise (so document order still means something for them).
    """

    index: int
    start: int
    end: int
    text: str
    layer: int = 0


class SpanChunk(Chunk):
    """A layer-0 chunk whose text is sliced from ``source`` when it is read, not held as a copy beside it: a
    collection's chunks then hold no second copy of its files' texts (issue 43, item 7: they were 17 MB for 6 MB of
    text). ``start`` and ``end`` are in the document; ``source`` is the document's text, or a part of it that begins
    at ``offset`` (a file's own text, shared by the collection's later versions). Equal to a :class:`Chunk` with the
    same fields."""

    def __init__(self, index: int, start: int, end: int, source: str, offset: int = 0):
        for name, value in (("index", index), ("start", start), ("end", end), ("layer", 0), ("source", source),
                            ("offset", offset)):
            object.__setattr__(self, name, value)  # (a frozen dataclass's fields, set as its own __init__ does)

    @property
    def text(self) -> str:
        return self.source[self.start - self.offset:self.end - self.offset]

    def __repr__(self) -> str:
        return f"SpanChunk(index={self.index}, start={self.start}, end={self.end})"

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Chunk):
            return NotImplemented
        return (self.index, self.start, self.end, self.layer, self.text) == (other.index, other.start, other.end,
                                                                             other.layer, other.text)

    __hash__ = Chunk.__hash__


@dataclass(frozen=True)
class ScoredChunk:
    chunk: Chunk
    score: float


@dataclass
class Usage:
    """What one reader call reported: the model, its token counts, its time, and whether a cache answered it."""

    model: str
    prompt_tokens: int
    completion_tokens: int
    cached_prompt_tokens: int = 0
    seconds: float = 0.0
    from_cache: bool = False


@dataclass
class LLMCall(Usage):
    """One request to a reader in an answer: its stage (answer, route, condense, ...) and its usage."""

    stage: str = field(kw_only=True)

    @classmethod
    def from_completion(cls, stage: str, completion: Usage) -> LLMCall:
        """The accounting part of a reader's ``Completion`` (everything but the text)."""
        return cls(stage=stage, **{f.name: getattr(completion, f.name) for f in fields(Usage)})


@dataclass
class ChunkUsed:
    index: int
    start: int
    end: int
    score: float
    tokens: int | None = None
    layer: int = 0  # 0: the document's own text; >= 1: a summary node


@dataclass
class Ranked:
    """What a search over a source's index found: the chunks, best first; the reader calls the retriever made for
    this query (a tree index navigating); and, for a retriever that built summaries, its build's cost (calls,
    tokens, seconds, whether it was built now and whether this question is the one billed for it)."""

    chunks: list[ScoredChunk]
    calls: list[LLMCall] = field(default_factory=list)
    build: dict[str, object] | None = None


@dataclass
class Answer:
    """What every strategy returns."""

    text: str
    question: str
    strategy: str
    route: str
    calls: list[LLMCall] = field(default_factory=list)
    chunks: list[ChunkUsed] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    truncated_tokens: int = 0
    raw_route_answer: str | None = None
    long_answer: str | None = None  # LongRAG's turn-1 answer, before short-answer extraction
    context_tokens: int | None = None  # reader tokens of the retrieved context, when a strategy measures it
    # How a corpus index was searched (LongRAG): {"unit": "passage", "scorer": "bm25"}; the route stays the route.
    retrieval: dict[str, str] | None = None
    # One-off cost of building the retriever's index for this document (RAPTOR / tree-index summaries): a dict with
    # calls, prompt_tokens, completion_tokens, seconds, document. Not part of the per-question ``calls``.
    index_cost: dict[str, Any] | None = None
    # Self-Route's first step: the probability that the reader's answer starts with the decline ("unanswerable"),
    # from its token log-probabilities; None when the reader returned none.
    decline_probability: float | None = None
    context: str | None = field(default=None, repr=False)  # the text the reader saw (kept out of to_dict: long)
    # Where the answer's text came from: the retrieved chunks' places, or for an LC answer the located ones.
    sources: list[Source] = field(default_factory=list)
    # The chunks the final answer was read from when they are not ``chunks`` (a routed answer keeps its first
    # step's chunks there, for the router's features); None: ``chunks``.
    answer_chunks: list[ChunkUsed] | None = field(default=None, repr=False)
    # A follow-up in a conversation: how it was made to stand alone (method, the question the reader was asked, the
    # retrieval query; lcrag.strategies.conversation); None: a question asked on its own.
    conversation: dict[str, Any] | None = None
    # A learned router's choice (lcrag.strategies.routing.share_control.Decision): its score, the threshold, the LC share
    # it holds and the realized LC share and cost share after this question; None: no such router decided.
    routing: dict[str, Any] | None = None

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt_tokens for c in self.calls)

    @property
    def completion_tokens(self) -> int:
        return sum(c.completion_tokens for c in self.calls)

    @property
    def seconds(self) -> float:
        return sum(self.timings.values())

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data.pop("context")
        data.pop("answer_chunks")
        data["sources"] = [source.to_dict() for source in self.sources]
        data["prompt_tokens"] = self.prompt_tokens
        data["completion_tokens"] = self.completion_tokens
        data["seconds"] = round(self.seconds, 4)
        return data
