"""Reading user files safely: regular files only, a size limit, and text that decodes or is refused.

Documents, datasets, corpora and prompt files all come through here, so a FIFO, a device, a huge file or random
bytes get the same one-line error wherever they are given.
"""

from __future__ import annotations

import codecs
import logging
import os
import re
import stat
from pathlib import Path

from lcrag.core.errors import InputError

log = logging.getLogger(__name__)

# Larger inputs are refused unless the caller gives a larger limit (``lcrag --max-file-mb``; a loader is given it in
# its ParseLimits, ``file_mb``): passed to every reader of a file, never read from the environment.
DEFAULT_MAX_FILE_MB = 512
DEFAULT_MAX_FILE_BYTES = DEFAULT_MAX_FILE_MB << 20
_RAISE_LIMIT = "raise it with --max-file-mb"


def megabytes(mb: float) -> int:
    """``mb`` megabytes (a file size limit as a user gives it) in bytes."""
    return int(mb * 1024 * 1024)


def _mb(size: int) -> str:
    if size < 2**20 / 10:
        return f"{size:,} bytes"
    return f"{size / 2**20:.1f}".removesuffix(".0") + " MB"


def check_regular_file(path: Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> int:
    """The size of ``path``, after checking it is a readable regular file within the size limit (never blocks)."""
    path = Path(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{path} does not exist") from None
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if stat.S_ISDIR(info.st_mode):
        raise InputError(f"{path} is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{path} is not a regular file (a pipe, socket or device); give a file")
    if info.st_size > max_bytes:
        raise InputError(f"{path} is {_mb(info.st_size)}, over the {_mb(max_bytes)} limit ({_RAISE_LIMIT})")
    return info.st_size


def read_regular_file(path: Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> bytes:
    """The bytes of a regular file within ``max_bytes``; anything else is an :class:`InputError`."""
    check_regular_file(path, max_bytes)
    limit = max_bytes
    try:
        with open(path, "rb") as f:
            # Read what the file holds, not a buffer the size of the limit (512 MB, allocated up front by read(n));
            # a file that grew since the check is read on, up to the limit.
            size = os.fstat(f.fileno()).st_size
            data = f.read(min(limit, size) + 1)
            if len(data) > size:
                data += f.read(limit + 1 - len(data))
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > limit:
        raise InputError(f"{path} is over the {_mb(limit)} limit ({_RAISE_LIMIT})")
    return data


# UTF-32 marks first: the UTF-32-LE mark begins with the UTF-16-LE one.
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"), (codecs.BOM_UTF32_BE, "utf-32"), (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"), (codecs.BOM_UTF16_BE, "utf-16"),
)
_SNIFF_BYTES = 8192
# Control characters other than whitespace; a text with more than this share of them is binary data that happens to
# decode (e.g. bytes 0x01-0x7f are all valid UTF-8).
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0e-\x1f\x7f-\x9f]")
_MAX_CONTROL_SHARE = 0.05
_SAVE_AS_UTF8 = "save it as UTF-8"


def decode_text(path: str | Path, data: bytes) -> str:
    """The text of a file's bytes, or an :class:`InputError` naming the file and saying why it is not text.

    The rule, most certain first: a byte-order mark names UTF-8/16/32; valid UTF-8 is UTF-8; NUL bytes in the
    pattern of ASCII-range UTF-16 are UTF-16 without a mark, other NUL bytes mean binary. Anything else is read as
    Windows-1252 (the superset of Latin-1's printable range that "Latin-1" files usually really are), and kept only
    when charset-normalizer's mess detector finds that reading clean: random bytes, and text in other legacy code
    pages (Cyrillic, Greek, ...), are refused rather than guessed, since a wrong guess reads as fluent garbage.
    Known limit: a few words of another code page inside Western text can pass as Windows-1252.
    """
    text = _decode_with_bom(path, data)
    if text is None:
        text = _decode_utf16_without_bom(data) if b"\x00" in data[:_SNIFF_BYTES] else _decode_utf8_or_1252(path, data)
    if text is None:
        raise InputError(f"{path} looks like a binary file (it holds NUL bytes), not text")
    controls = len(_CONTROL_CHARS.findall(text))
    if controls > _MAX_CONTROL_SHARE * len(text):
        raise InputError(f"{path} looks like a binary file, not text ({controls:,} of {len(text):,} characters are "
                         f"control characters)")
    return text


def _decode_with_bom(path: str | Path, data: bytes) -> str | None:
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError as exc:
                raise InputError(f"{path} starts with a {encoding.upper().removesuffix('-SIG')} byte-order mark but "
                                 f"does not decode as such at byte {exc.start:,}; {_SAVE_AS_UTF8}") from None
    return None


def _decode_utf16_without_bom(data: bytes) -> str | None:
    """UTF-16 text of mostly ASCII-range characters has a NUL in every other byte; None when ``data`` does not."""
    sample = data[:_SNIFF_BYTES]
    even, odd = sample[0::2], sample[1::2]
    for encoding, zeros, others in (("utf-16-le", odd, even), ("utf-16-be", even, odd)):
        if len(data) % 2 == 0 and zeros.count(0) >= 0.9 * len(zeros) and others.count(0) <= 0.1 * len(others):
            try:
                return data.decode(encoding)
            except UnicodeDecodeError:
                return None
    return None


def _decode_utf8_or_1252(path: str | Path, data: bytes) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        first_bad, line = exc.start, data.count(b"\n", 0, exc.start) + 1
    text = _as_windows_1252(data)
    if text is not None:
        log.info("%s: not UTF-8; read as Windows-1252 (Latin-1)", path)
        return text
    bad = data.decode("utf-8", errors="replace").count("\ufffd")
    raise InputError(f"{path} is not text in UTF-8 or Windows-1252/Latin-1: {bad:,} invalid UTF-8 byte sequence(s) in "
                     f"{len(data):,} bytes, the first (0x{data[first_bad]:02x}) on line {line}; {_SAVE_AS_UTF8}")


def _as_windows_1252(data: bytes) -> str | None:
    """``data`` read as Windows-1252, or None when a byte is undefined there or the reading is a mess."""
    from charset_normalizer import from_bytes  # only non-UTF-8 input pays for the import

    try:
        text = data.decode("cp1252")
    except UnicodeDecodeError:
        return None
    # Sample up to 64 chunks of 4 KiB spread over the file (the library's default samples 5 x 512 bytes).
    chunk = min(len(data), 4096)
    steps = max(1, min(64, len(data) // chunk))
    clean = from_bytes(data, cp_isolation=["cp1252"], steps=steps, chunk_size=chunk).best() is not None
    return text if clean else None
