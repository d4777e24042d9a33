"""Documents' content hashes (lcrag.core.types): the SHA-256 of the text (and, for extracted text, its extractors),
taken a piece at a time so that a large text is never copied and encoded whole while the interpreter is held
(issue 42: each whole copy of a 12 MB text held a server's event loop 13-29 ms)."""

from __future__ import annotations

import hashlib

from lcrag.core.provenance import Layout, Segment
from lcrag.core.types import HASH_PIECE, Document


def test_the_content_hash_is_the_texts_and_its_extractors_sha256_whatever_its_length():
    for text in ("", "crane", "é" * HASH_PIECE + "x", "a" * (3 * HASH_PIECE + 7), "😀" * (HASH_PIECE + 1)):
        assert Document(text=text).content_hash == hashlib.sha256(text.encode("utf-8")).hexdigest()
        extracted = Document(text=text, layout=Layout((Segment(0, len(text), None, 0),), extractor="pdfium 4.30"))
        part = Document(text="x", layout=Layout((Segment(0, 1, None, 0),), extractor="docx 1.1"))
        joined = Document(text=text, layout=extracted.layout, parts=((0, part),))
        assert extracted.content_hash == hashlib.sha256(f"{text}\0pdfium 4.30".encode("utf-8")).hexdigest()
        assert joined.content_hash == hashlib.sha256(f"{text}\0docx 1.1\0pdfium 4.30".encode("utf-8")).hexdigest()
