"""Zip-based documents (DOCX, EPUB) checked before anything expands them: a small file can hold gigabytes of XML (a
decompression bomb), which a parser would build in memory.

The zip's directory says what each part expands to, but it is written by whoever made the file. Python's zipfile
stops a part at its declared size, yet ``ZipFile.read`` (which python-docx uses) first inflates the whole part in
one call: a part declared as 1 KB that really holds 1 GB takes 1 GB, and a forged checksum then even passes. So every
compressed part is inflated once here, in bounded steps, and refused when it yields more than it declares; only then
do the directory's sizes bound every read that follows.

Limits are the module's ``MAX_*`` values, read at each call, or keywords of :func:`open_archive` and
:func:`check_text` (the characters a document may yield: :mod:`lcrag.documents.limits`)."""

from __future__ import annotations

import io
import re
import struct
import zipfile
import zlib
from pathlib import Path

from lcrag.documents.limits import MAX_DOCUMENT_CHARS, check_chars
from lcrag.core.errors import InputError

# What one document may expand to in all (text, markup and media together: python-docx holds every part in memory),
# and how far one sizeable part may expand beyond its compressed size. Word and EPUB XML compresses 5-30x; bombs are
# hundreds or thousands to one.
MAX_EXPANDED_BYTES = 256 << 20
MAX_RATIO = 100
RATIO_FLOOR_BYTES = 1 << 20  # parts smaller than this are never a bomb, whatever their ratio
MAX_PARTS = 10_000
MAX_TEXT_CHARS = MAX_DOCUMENT_CHARS  # the characters a document may yield: lcrag.documents.limits

_CENTRAL_ENTRY = b"PK\x01\x02"  # starts each part's entry in the zip's directory
_LOCAL_HEADER = b"PK\x03\x04"
_STEP = 1 << 20  # bytes inflated at a time while checking a part


def _mb(size: int) -> str:
    return f"{size / (1 << 20):,.0f} MB" if size >= 1 << 20 else f"{size:,} bytes"


def _shown(part: str) -> str:
    """A part's name as a message may show it: the name is the file maker's, so one line and short."""
    return re.sub(r"[\x00-\x1f\x7f]", "?", part)[:120]


def open_archive(data: bytes, path: Path, *, max_expanded_bytes: int | None = None, max_ratio: float | None = None,
                 max_parts: int | None = None) -> zipfile.ZipFile:
    """The zip in ``data`` (the file ``path``), once its directory keeps within the limits and each part inflates to
    no more than the directory says; else an :class:`InputError` naming the file, the part and the limit (a damaged
    zip: :class:`zipfile.BadZipFile`)."""
    parts_limit = MAX_PARTS if max_parts is None else max_parts
    # zipfile builds an object per directory entry as it opens the file, and each entry starts with this signature.
    if (entries := data.count(_CENTRAL_ENTRY)) > parts_limit:
        raise InputError(f"{path.name}: {entries:,} parts in one zip, over the {parts_limit:,} a document may have")
    archive = zipfile.ZipFile(io.BytesIO(data))
    try:
        _check_directory(archive.infolist(), len(data), path.name, max_expanded_bytes, max_ratio)
        for part in archive.infolist():
            _check_inflated_size(data, part, path.name)
    except BaseException:
        archive.close()
        raise
    return archive


def _check_directory(parts: list[zipfile.ZipInfo], file_size: int, name: str, max_expanded_bytes: int | None,
                     max_ratio: float | None) -> None:
    limit = MAX_EXPANDED_BYTES if max_expanded_bytes is None else max_expanded_bytes
    ratio = MAX_RATIO if max_ratio is None else max_ratio
    total = sum(p.file_size for p in parts)
    if total > limit:
        raise InputError(f"{name} expands to {_mb(total)}, over the {_mb(limit)} limit for zip-based documents")
    # Parts sharing compressed bytes, or claiming more than the file holds, would make the ratio below meaningless.
    if sum(p.compress_size for p in parts) > file_size:
        raise InputError(f"{name}: its parts claim more compressed data than the file holds (overlapping parts: a "
                         "damaged file or a decompression bomb)")
    for part in parts:
        if part.file_size > RATIO_FLOOR_BYTES and part.file_size > ratio * (packed := max(part.compress_size, 1)):
            raise InputError(f"{name}: {_shown(part.filename)} expands {part.file_size // packed:,}x"
                             f" (to {_mb(part.file_size)}), over the {ratio:g}x limit for a part of a zip-based "
                             "document (a decompression bomb?)")


def _check_inflated_size(data: bytes, part: zipfile.ZipInfo, name: str) -> None:
    """Refuse ``part`` when its compressed bytes inflate past its declared size (a stored part is copied, never
    more than the bytes it has in the file)."""
    if part.compress_type == zipfile.ZIP_STORED:
        return
    if part.compress_type != zipfile.ZIP_DEFLATED or part.flag_bits & 0x1:
        # DOCX (ECMA-376 part 2) and EPUB (OCF) allow only stored or deflated parts, unencrypted.
        raise zipfile.BadZipFile(f"{_shown(part.filename)}: compression method {part.compress_type} or encrypted")
    head = data[part.header_offset:part.header_offset + 30]
    if len(head) < 30 or head[:4] != _LOCAL_HEADER:
        raise zipfile.BadZipFile(f"{_shown(part.filename)}: bad local header")
    start = part.header_offset + 30 + sum(struct.unpack_from("<HH", head, 26))  # after its name and extra field
    try:
        inflated = _inflated_size(memoryview(data)[start:start + part.compress_size], part.file_size)
    except zlib.error as exc:
        raise zipfile.BadZipFile(f"{_shown(part.filename)}: {exc}") from None
    if inflated > part.file_size:
        raise InputError(f"{name}: {_shown(part.filename)} expands past the {_mb(part.file_size)} its zip header "
                         "declares (a forged header: a decompression bomb?)")


def _inflated_size(raw: memoryview, most: int) -> int:
    """The bytes the raw deflate stream ``raw`` inflates to, counted a step at a time (never more than a step in
    memory) and no further than just past ``most``."""
    inflater, at, total = zlib.decompressobj(-zlib.MAX_WBITS), 0, 0
    while not inflater.eof and total <= most:
        feed = inflater.unconsumed_tail
        if not feed:
            feed, at = raw[at:at + _STEP], at + _STEP
        out = inflater.decompress(feed, _STEP)
        total += len(out)
        if not out and not feed:  # input used up and nothing left inside the inflater
            break
    return total


def check_text(text: str, path: Path, max_chars: int) -> str:
    """``text`` when within the ``max_chars`` characters one document may yield, else an :class:`InputError`."""
    check_chars(len(text), path, max_chars)
    return text
