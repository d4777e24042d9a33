"""Documents' content hashes (lcrag.core.types): the SHA-256 of the text (and, for extracted text, its extractors),
taken a piece at a time so that a large text is never copied and encoded whole while the interpreter is held
(issue 42: each whole copy of a 12 MB text held a server's event loop 13-29 ms); a span chunk reads its text from
its source, holding no copy, and is the chunk it stands for."""

from __future__ import annotations

import dataclasses
import hashlib
import pickle

from lcrag.core.provenance import Layout, Segment
from lcrag.core.types import HASH_PIECE, Chunk, Document, SpanChunk


def test_the_content_hash_is_the_texts_and_its_extractors_sha256_whatever_its_length():
    for text in ("", "crane", "é" * HASH_PIECE + "x", "a" * (3 * HASH_PIECE + 7), "😀" * (HASH_PIECE + 1)):
        assert Document(text=text).content_hash == hashlib.sha256(text.encode("utf-8")).hexdigest()
        extracted = Document(text=text, layout=Layout((Segment(0, len(text), None, 0),), extractor="pdfium 4.30"))
        part = Document(text="x", layout=Layout((Segment(0, 1, None, 0),), extractor="docx 1.1"))
        joined = Document(text=text, layout=extracted.layout, parts=((0, part),))
        assert extracted.content_hash == hashlib.sha256(f"{text}\0pdfium 4.30".encode("utf-8")).hexdigest()
        assert joined.content_hash == hashlib.sha256(f"{text}\0docx 1.1\0pdfium 4.30".encode("utf-8")).hexdigest()


def test_a_span_chunk_reads_its_text_from_its_source_and_equals_the_chunk_it_stands_for():
    document = "Preface. " + "The lighthouse keeper wrote the password on the wall."
    file_text = document[9:]  # a file's own text, at offset 9 of the collection's
    span = SpanChunk(4, 13, 33, file_text, 9)
    copy = Chunk(4, 13, 33, document[13:33])
    assert span.text == document[13:33] == "lighthouse keeper wr"
    assert "text" not in vars(span) and span.source is file_text  # the file's text itself, no slice kept
    assert span == copy and copy == span and hash(span) == hash(copy) and len({span, copy}) == 1
    assert span != Chunk(4, 13, 33, "something else") and span != Chunk(5, 13, 33, copy.text)
    assert pickle.loads(pickle.dumps(span)) == copy and dataclasses.asdict(span) == dataclasses.asdict(copy)
    assert span.layer == 0 and "lighthouse" not in repr(span)  # a repr never prints a whole file
