"""Zip-based documents (DOCX, EPUB) checked before anything expands them: a small file can hold gigabytes of XML (a
decompression bomb), which a parser would build in memory. The zip's directory says what each part expands to, and
Python's zipfile never inflates a part past that declared size (a part that lies fails its CRC), so checking the
directory bounds every read that follows."""

from __future__ import annotations

import zipfile
from pathlib import Path

from lcrag.errors import InputError

# What one document may expand to in all (text, markup and media together), and how far one sizeable part may expand
# beyond its compressed size. Word and EPUB XML compresses 5-30x; bombs are hundreds or thousands to one.
MAX_EXPANDED_BYTES = 256 << 20
MAX_RATIO = 100
RATIO_FLOOR_BYTES = 1 << 20  # parts smaller than this are never a bomb, whatever their ratio
MAX_PARTS = 10_000
# Text a document may yield (characters): tens of books; beyond it, it is a corpus (`lcrag corpus build`).
MAX_TEXT_CHARS = 50_000_000


def _mb(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MB" if size >= 1 << 20 else f"{size:,} bytes"


def check_archive(archive: zipfile.ZipFile, path: Path, max_expanded_bytes: int = MAX_EXPANDED_BYTES,
                  max_ratio: float = MAX_RATIO) -> zipfile.ZipFile:
    """``archive`` itself when its directory keeps within the limits, else an :class:`InputError` naming the file,
    the part and the limit."""
    parts = archive.infolist()
    if len(parts) > MAX_PARTS:
        raise InputError(f"{path}: {len(parts):,} parts in one zip, over the {MAX_PARTS:,} a document may have")
    total = sum(p.file_size for p in parts)
    if total > max_expanded_bytes:
        raise InputError(f"{path} expands to {_mb(total)}, over the {_mb(max_expanded_bytes)} limit for zip-based "
                         "documents")
    for part in parts:
        if part.file_size > RATIO_FLOOR_BYTES and part.file_size > max_ratio * max(part.compress_size, 1):
            raise InputError(f"{path}: {part.filename} expands {part.file_size // max(part.compress_size, 1):,}x "
                             f"(to {_mb(part.file_size)}), over the {max_ratio:g}x limit for a part of a zip-based "
                             "document (a decompression bomb?)")
    return archive


def check_text(text: str, path: Path, max_chars: int = MAX_TEXT_CHARS) -> str:
    """``text`` when within the characters one document may yield, else an :class:`InputError`."""
    if len(text) > max_chars:
        raise InputError(f"{path}: {len(text):,} characters of text, over the {max_chars:,} limit for one document "
                         "(split it, or index it as a corpus with `lcrag corpus build`)")
    return text
