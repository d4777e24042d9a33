"""JSON of any size, decoded and encoded a piece at a time, so that a large value never holds the interpreter.

``json.loads`` and ``json.dumps`` run in C and hold the interpreter (the GIL) for their whole call: 100-300 ms for
a parse of a 12 MB file, during which the server's event loop, in another thread of the same process, answers
nobody. Here no step works on more than :data:`PIECE` characters: the bytes are decoded to text a piece at a time,
a long string is scanned a piece at a time (by the C scanner, on a bounded piece), a large array or object by the
standard library's pure-Python scanner (the interpreter is handed on between its steps), and encoding cuts long
strings and long lists the same way. Values of a piece or less go to ``json`` whole, as before.

The results are those of ``json.loads`` and of ``json.dumps(value, ensure_ascii=False, separators=(",", ":"))``
encoded as UTF-8 (a string with a lone surrogate, which UTF-8 cannot hold, as its escapes)."""

from __future__ import annotations

import codecs
import json
import zlib
from collections.abc import Iterator
from json.decoder import JSONDecodeError
from json.scanner import py_make_scanner
from typing import Any

PIECE = 1 << 18  # characters (or bytes) one step may work on: a few milliseconds
HEX = frozenset("0123456789abcdefABCDEF")


# -- decoding -----------------------------------------------------------------------------------------------------
def loads(data: bytes | str) -> Any:
    """``json.loads(data)``, a piece at a time (the same value, or the same kind of error: a ValueError, a
    UnicodeDecodeError, or a RecursionError for a value nested too deeply)."""
    if len(data) <= PIECE:
        return json.loads(data)
    text = data if isinstance(data, str) else _text(data)
    del data  # (the caller's copy aside, the bytes go as soon as they are text)
    if text.startswith("\ufeff"):
        raise JSONDecodeError("Unexpected UTF-8 BOM (decode using utf-8-sig)", text, 0)
    return _decoder().decode(text)


def _text(data: bytes) -> str:
    """``data`` decoded as ``json.loads`` decodes bytes, a piece at a time (a character cut by a piece's end is
    completed by the next piece)."""
    decoder = codecs.getincrementaldecoder(json.detect_encoding(data))("surrogatepass")
    view = memoryview(data)
    parts = [decoder.decode(view[at:at + PIECE]) for at in range(0, len(data), PIECE)]
    parts.append(decoder.decode(b"", final=True))
    view.release()
    return "".join(parts)


def _decoder() -> json.JSONDecoder:
    """A decoder whose scanner is the pure-Python one (the interpreter is handed on between its steps), with
    :func:`scan_string` for strings; one per call (the scanner's memo of keys is not shared between threads)."""
    decoder = json.JSONDecoder()
    decoder.parse_string = scan_string
    decoder.scan_once = py_make_scanner(decoder)
    return decoder


def scan_string(s: str, end: int, strict: bool = True) -> tuple[str, int]:
    """As ``json.decoder.scanstring``: the string whose opening quote is just before ``end``, and the index after
    its closing quote; a long one scanned a piece at a time (each piece cut between two escapes, never inside one,
    nor between the two halves of an escaped surrogate pair, which json joins into one character)."""
    pieces = []
    while len(s) - end > PIECE:
        cut = _between_escapes(s, end, end + PIECE)
        piece, after = json.decoder.scanstring(s[end:cut] + '"', 0, strict)
        if after < cut - end + 1:  # the string's own closing quote is in this piece
            pieces.append(piece)
            return "".join(pieces), end + after
        if piece and "\ud800" <= piece[-1] <= "\udbff" and s[cut - 1] in HEX:
            piece, cut = piece[:-1], cut - 6  # an escaped high surrogate: scanned again with what follows it
        pieces.append(piece)
        end = cut
    last, end = json.decoder.scanstring(s, end, strict)
    pieces.append(last)
    return "".join(pieces) if len(pieces) > 1 else last, end


def _between_escapes(s: str, start: int, stop: int) -> int:
    """``stop``, or the start of the escape that ``stop`` would cut (escapes are at most 6 characters; ``start`` is
    not inside one). A backslash starts an escape when the run of backslashes it ends is odd in length."""
    last = s.rfind("\\", max(start, stop - 5), stop)
    if last < 0:
        return stop
    before = s[max(start, last - 63):last + 1]
    if not before.strip("\\"):  # a long run: counted from the start
        before = s[start:last + 1]
    run = len(before) - len(before.rstrip("\\"))
    if run % 2 == 0:
        return stop  # the second of an escaped backslash: the escape ends at or before stop
    return last if last + (6 if s[last + 1] == "u" else 2) > stop else stop


# -- encoding -----------------------------------------------------------------------------------------------------
def encoded(value: Any) -> Iterator[bytes]:
    """The UTF-8 bytes of ``value`` as compact JSON, in pieces (each at most a few :data:`PIECE`)."""
    for piece in _pieces(value):
        # a lone surrogate a parser let through (UTF-8 cannot hold it) as its JSON escape: it comes back as it was
        yield piece.encode("utf-8", "backslashreplace")


def compressed(value: Any, level: int = 1) -> bytes:
    """``zlib.compress`` of :func:`encoded`, a piece at a time (zlib hands the interpreter on while it works)."""
    packer = zlib.compressobj(level)
    out = [packer.compress(piece) for piece in encoded(value)]
    out.append(packer.flush())
    return b"".join(out)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def _size(value: Any, budget: int) -> int:
    """About the characters of ``value``'s JSON, counted until they pass ``budget``."""
    if isinstance(value, str):
        return len(value) + 2
    if isinstance(value, dict):
        value = [part for pair in value.items() for part in pair]
    if not isinstance(value, (list, tuple)):
        return 8
    total = 2
    for item in value:
        total += _size(item, budget - total) + 1
        if total > budget:
            break
    return total


def _pieces(value: Any) -> Iterator[str]:
    """``_dumps(value)`` in pieces: a value of a piece or less whole, a longer string cut, an object key by key, an
    array in runs of items that make a piece."""
    if _size(value, PIECE) <= PIECE:
        yield _dumps(value)
    elif isinstance(value, str):
        yield '"'
        for at in range(0, len(value), PIECE):
            yield _dumps(value[at:at + PIECE])[1:-1]
        yield '"'
    elif isinstance(value, dict):
        yield "{"
        for number, (key, item) in enumerate(value.items()):
            yield ("," if number else "") + _dumps(key if isinstance(key, str) else str(key)) + ":"
            yield from _pieces(item)
        yield "}"
    else:
        yield "["
        yield from _runs(value)
        yield "]"


def _runs(items) -> Iterator[str]:
    """The items of an array, comma-separated, as runs of small items (one ``json.dumps`` each) and large items
    in pieces of their own."""
    run, size, first = [], 0, True
    for item in items:
        weight = _size(item, PIECE)
        if run and (weight > PIECE or size + weight > PIECE):
            yield ("" if first else ",") + _dumps(run)[1:-1]
            run, size, first = [], 0, False
        if weight > PIECE:
            yield "" if first else ","
            yield from _pieces(item)
            first = False
        else:
            run.append(item)
            size += weight
    if run:
        yield ("" if first else ",") + _dumps(run)[1:-1]
