"""Split a document into chunks that keep their index and character offsets."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

from lcrag.core.errors import InputError
from lcrag.core.text import CHUNK_WORD
from lcrag.core.registry import CHUNKERS, Option
from lcrag.core.tokenization import Tokenizer
from lcrag.core.types import Chunk, Document



class Chunker(Protocol):
    def run(self, document: Document) -> list[Chunk]: ...

    @property
    def key(self) -> str:
        """Identifies the chunking for cache keys: same key, same chunks."""
        ...


def _group_spans(text: str, spans: list[tuple[int, int]], size: int, overlap: int) -> list[Chunk]:
    """Chunks of ``size`` consecutive spans, each starting ``size - overlap`` spans after the previous."""
    if size <= 0:
        raise InputError("chunk size must be positive")
    if not 0 <= overlap < size:
        raise InputError("chunk overlap must be at least 0 and smaller than the chunk size")
    chunks: list[Chunk] = []
    step = size - overlap
    for first in range(0, len(spans), step):
        group = spans[first : first + size]
        start, end = group[0][0], group[-1][1]
        chunks.append(Chunk(index=len(chunks), start=start, end=end, text=text[start:end]))
        if first + size >= len(spans):
            break
    return chunks


def pack_sentences(text: str, sentences: list[tuple[int, int, int]], limit: int) -> list[Chunk]:
    """Consecutive (start, end, size) sentences packed greedily into chunks whose sizes sum to at most ``limit``.

    A sentence larger than ``limit`` becomes a chunk of its own: sentences are never cut.
    """
    chunks: list[Chunk] = []
    group_start: int | None = None
    group_end = total = 0
    for start, end, size in sentences:
        if group_start is not None and total + size > limit:
            chunks.append(Chunk(len(chunks), group_start, group_end, text[group_start:group_end]))
            group_start, total = None, 0
        if group_start is None:
            group_start = start
        group_end, total = end, total + size
    if group_start is not None:
        chunks.append(Chunk(len(chunks), group_start, group_end, text[group_start:group_end]))
    return chunks


@dataclass(frozen=True)
class WordChunker:
    """Chunks of ``size`` whitespace-separated words (Self-Route's baseline: 300). A word is at most
    :data:`lcrag.core.text.MAX_WORD_CHARS` characters, and each CJK character is one: a text without spaces is
    chunked into pieces of a few hundred characters, never one chunk the size of the text."""

    size: int = 300
    overlap: int = 0

    @property
    def key(self) -> str:
        return f"words:{self.size}:{self.overlap}"

    def run(self, document: Document) -> list[Chunk]:
        spans = [m.span() for m in CHUNK_WORD.finditer(document.text)]
        return _group_spans(document.text, spans, self.size, self.overlap)


@dataclass(frozen=True)
class TokenChunker:
    """Chunks of ``size`` reader tokens (OP-RAG: 128, no overlap)."""

    tokenizer: Tokenizer
    size: int = 128
    overlap: int = 0

    @property
    def key(self) -> str:
        return f"tokens:{self.tokenizer.name}:{self.size}:{self.overlap}"

    def run(self, document: Document) -> list[Chunk]:
        spans = self.tokenizer.token_spans(document.text)
        return _group_spans(document.text, spans, self.size, self.overlap)


_SENTENCE_BLOCK = 20_000  # characters syntok reads at a time (see SentenceChunker.sentence_spans)
_LAST_STOP = re.compile(r"[.!?][\"')\]]*\s(?!.*[.!?][\"')\]]*\s)", re.S)  # the last sentence end in a text


def _blocks(text: str, size: int) -> Iterator[tuple[int, str]]:
    """``text`` in pieces of at most about ``size`` characters, with their offsets: each cut after the last blank
    line in the piece, else after its last line break, else (one line longer than ``size``) after its last full
    stop, question or exclamation mark followed by a space (an abbreviation there splits one sentence in two), else
    after its last space."""
    start = 0
    while len(text) - start > size:
        window = text[start:start + size]
        stop = _LAST_STOP.search(window)
        cut = (max(window.rfind("\n\n"), 0) or max(window.rfind("\n"), 0) or (stop.end() - 1 if stop else 0)
               or max(window.rfind(" "), 0) or size - 1)
        yield start, text[start:start + cut + 1]
        start += cut + 1
    yield start, text[start:]


@dataclass(frozen=True)
class SentenceChunker:
    """Whole sentences (syntok), packed into chunks of at most ``max_words`` words.

    A sentence longer than ``max_words`` becomes a chunk of its own; ``max_words=1`` gives one sentence per chunk.
    """

    max_words: int = 300

    @property
    def key(self) -> str:
        return f"sentences:{self.max_words}"

    @staticmethod
    def sentence_spans(text: str) -> list[tuple[int, int]]:
        """The sentences' ``(start, end)`` offsets. syntok reads a text in time that grows faster than its length
        (2 MB whole: 187 s; 100 KB: 0.9 s), so it reads blocks of about :data:`_SENTENCE_BLOCK` characters, cut
        where it cuts paragraphs itself (a blank line), else at a line's end."""
        from syntok import segmenter

        spans: list[tuple[int, int]] = []
        for offset, block in _blocks(text, _SENTENCE_BLOCK):
            for paragraph in segmenter.analyze(block):
                for sentence in paragraph:
                    tokens = [t for t in sentence if t.value]
                    if tokens:
                        spans.append((offset + tokens[0].offset, offset + tokens[-1].offset + len(tokens[-1].value)))
        return spans

    def run(self, document: Document) -> list[Chunk]:
        if self.max_words <= 0:
            raise InputError("max_words must be positive")
        text = document.text
        sized = [(start, end, len(CHUNK_WORD.findall(text, start, end))) for start, end in self.sentence_spans(text)]
        return pack_sentences(text, sized, self.max_words)


@dataclass(frozen=True)
class TokenSentenceChunker:
    """Whole sentences packed into chunks of at most ``max_tokens`` reader tokens (RAPTOR's leaves: 100).

    The text is tokenized once; a sentence's length is the number of tokens that start inside it. A sentence longer
    than ``max_tokens`` is a chunk of its own (RAPTOR splits those further at commas; we keep sentences whole).
    """

    tokenizer: Tokenizer
    max_tokens: int = 100

    @property
    def key(self) -> str:
        return f"token-sentences:{self.tokenizer.name}:{self.max_tokens}"

    def run(self, document: Document) -> list[Chunk]:
        import bisect

        if self.max_tokens <= 0:
            raise InputError("max_tokens must be positive")
        text = document.text
        token_starts = [start for start, _ in self.tokenizer.token_spans(text)]
        sized = [(start, end, bisect.bisect_left(token_starts, end) - bisect.bisect_left(token_starts, start))
                 for start, end in SentenceChunker.sentence_spans(text)]
        return pack_sentences(text, sized, self.max_tokens)


# The largest chunk any unit makes: a chunk is embedded whole and read whole (a longer one is the document itself).
MAX_CHUNK_SIZE = 100_000


def size_option(default: int, what: str) -> Option:
    return Option("size", int, default, what, min=1, max=MAX_CHUNK_SIZE)


@CHUNKERS.register("words", help="SIZE words a chunk (default 300)", options=(size_option(300, "words a chunk"),),
                   overlap=0)
def words_chunker(size: int = 300, tokenizer: Tokenizer | None = None, overlap: int = 0) -> Chunker:
    return WordChunker(size, overlap)


@CHUNKERS.register("tokens", help="SIZE reader tokens a chunk (default 128)",
                   options=(size_option(128, "reader tokens a chunk"),), needs_tokenizer=True, overlap=0)
def tokens_chunker(size: int = 128, tokenizer: Tokenizer | None = None, overlap: int = 0) -> Chunker:
    if tokenizer is None:
        raise InputError("chunking by tokens needs the reader's tokenizer")
    return TokenChunker(tokenizer, size, overlap)


@CHUNKERS.register("sentences", help="whole sentences, at most SIZE words a chunk (default 300)",
                   options=(size_option(300, "words a chunk, at most"),))
def sentences_chunker(size: int = 300, tokenizer: Tokenizer | None = None, overlap: int = 0) -> Chunker:
    return SentenceChunker(size)


def make_chunker(unit: str, size: int | None = None, tokenizer: Tokenizer | None = None,
                 overlap: int | None = None) -> Chunker:
    """A chunker by its registered unit (``words``, ``tokens``, ``sentences``, ...); ``size`` defaults to the unit's
    own, ``overlap`` to its meta ``overlap`` (0 unless it says). Units whose meta says ``needs_tokenizer`` are given
    the reader's tokenizer."""
    part = CHUNKERS.get(unit)  # unknown: an OptionError listing the registered units
    size = part.check_options({"size": size} if size else {})["size"]
    return part.create(size, tokenizer, part.meta.get("overlap", 0) if overlap is None else overlap)
