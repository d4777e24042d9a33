"""Dataset records: the item every format yields, strict reading of dataset files (regular, size-limited, gzip
checked, UTF-8), and the field checks the formats share (each a :class:`RecordError` saying what came instead)."""

from __future__ import annotations

import ast
import codecs
import gzip
import io
import json
import math
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lcrag.documents.files import DEFAULT_MAX_FILE_BYTES, read_regular_file
from lcrag.core.errors import DatasetError, InputError

_SNIFF_BYTES = 8192  # a NUL byte this early means binary data or UTF-16, not UTF-8 JSON


class RecordError(ValueError):
    """One bad record; the loader adds ``file:line`` and stops, or skips it with ``skip_bad``."""


# -- reading files: regular, size-limited, gzip checked, strict UTF-8 -------------------------------------------------
def _json_text(source: str | Path, data: bytes) -> str:
    """A dataset file's bytes as UTF-8 (JSON's encoding; a BOM allowed). Binary data, UTF-16 and legacy encodings
    are refused naming the line of the first bad byte: decoding "with replacement" would silently change questions
    and answers, and a guessed code page could misread them."""
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise DatasetError(f"{source}:1: UTF-16 text; save it as UTF-8")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise DatasetError(f"{source}:{line}: not UTF-8 text (byte 0x{data[exc.start]:02x} at column {column}; "
                           f"binary data, or Latin-1/cp1252 text?); save it as UTF-8") from None
    nul = text.find("\x00", 0, _SNIFF_BYTES)  # valid UTF-8, yet ASCII stored as UTF-16 without a BOM looks like this
    if nul != -1:
        line = text.count("\n", 0, nul) + 1
        raise DatasetError(f"{source}:{line}: binary data or UTF-16 text (a NUL byte), not UTF-8 text")
    return text


def _gunzip(path: Path, data: bytes, limit: int) -> bytes:
    if not data.startswith(b"\x1f\x8b"):
        raise DatasetError(f"{path}: not gzip data, though its name ends in .gz")
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(data)) as f:
            out = f.read(limit + 1)  # bounded: a small .gz can expand enormously
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DatasetError(f"{path}: damaged gzip data ({exc})") from None
    if len(out) > limit:
        raise DatasetError(f"{path}: over {limit / 2**20:.0f} MB uncompressed (raise the limit with --max-file-mb)")
    return out


def _read_bytes(path: Path, max_bytes: int) -> bytes:
    try:
        return read_regular_file(path, max_bytes)  # FIFOs, devices and oversized files are refused without blocking
    except InputError as exc:
        raise DatasetError(str(exc)) from None


def _file_text(path: Path, max_bytes: int) -> str:
    """The file's text: at most ``max_bytes`` read, and as many once a .gz file is uncompressed."""
    data = _read_bytes(path, max_bytes)
    return _json_text(path, _gunzip(path, data, max_bytes) if path.suffix == ".gz" else data)


def _parse_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError as exc:  # JSONDecodeError, and over-long integers
        raise RecordError(f"invalid JSON ({getattr(exc, 'msg', exc)})") from None
    except RecursionError:
        raise RecordError("invalid JSON (nested too deeply)") from None


def jsonl_records(path: Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Iterator[tuple[int, Any]]:
    # split on "\n" only: JSON strings may hold U+2028 and other characters str.splitlines() would break on
    for lineno, line in enumerate(_file_text(path, max_bytes).split("\n"), start=1):
        if line.strip():
            try:
                yield lineno, _parse_json(line)
            except RecordError as exc:
                yield lineno, exc


def json_list_records(path: Path, max_bytes: int = DEFAULT_MAX_FILE_BYTES) -> Iterator[tuple[int, Any]]:
    try:
        data = json.loads(_file_text(path, max_bytes))
    except json.JSONDecodeError as exc:
        raise DatasetError(f"{path}:{exc.lineno}: invalid JSON ({exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise DatasetError(f"{path}: invalid JSON ({exc})") from None
    if not isinstance(data, list):
        raise DatasetError(f"{path}: expected a JSON list of records")
    yield from enumerate(data, start=1)


# -- fields: the type each format promises, or a RecordError saying what came instead --------------------------------
def kind_of(value: Any) -> str:
    if isinstance(value, float) and not math.isfinite(value):
        return f"a number ({value})"  # NaN/Infinity: Python's json accepts them, pandas writes them
    names = {bool: "a boolean", type(None): "null", int: "a number", float: "a number", str: "a string",
             list: "a list", dict: "an object"}
    return names.get(type(value), type(value).__name__)


def need_fields(record: dict, *names: str) -> None:
    missing = [n for n in names if n not in record]
    if missing:
        raise RecordError(f"missing field(s) {', '.join(repr(m) for m in missing)}")


def string_field(value: Any, name: str) -> str:
    if not isinstance(value, str):
        raise RecordError(f"{name!r} must be a string, not {kind_of(value)}")
    return value


def optional_string(record: dict, name: str, default: str) -> str:
    value = record.get(name)
    return default if value is None else string_field(value, name)


def answer_text(value: Any, name: str) -> str:
    """A gold answer: a string, or a finite number written as one (``1945``)."""
    if isinstance(value, str):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return str(value)
    raise RecordError(f"{name!r} must hold strings, not {kind_of(value)}")


def string_list(value: Any, name: str, allow_empty: bool = False) -> list[str]:
    """A list of strings, given as a list, as one string (one answer: ``"1945"``, ``"True"``), or as a string holding
    a Python list literal (LongBench and L-Eval dumps: ``"['yes', 'Yes.']"``)."""
    if isinstance(value, str):
        parsed = python_list(value)
        value = parsed if parsed is not None else [value]
    if not isinstance(value, list):
        raise RecordError(f"{name!r} must be a list of strings (or one string), not {kind_of(value)}")
    if not value and not allow_empty:
        raise RecordError(f"{name!r} is empty")
    return [answer_text(v, name) for v in value]


def python_list(text: str) -> list | None:
    if not text.lstrip().startswith("["):
        return None
    try:
        parsed = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return parsed if isinstance(parsed, list) else None


def record_id(record: dict, name: str, default: int) -> str:
    value = record.get(name, default)
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise RecordError(f"{name!r} must be a string or an integer, not {kind_of(value)}")
    return str(value)


def class_list(record: dict, required: bool) -> list[str] | None:
    value = record.get("all_classes")
    if value is None and not required:
        return None
    if not isinstance(value, list) or not value or not all(isinstance(c, str) for c in value):
        raise RecordError(f"'all_classes' must be a non-empty list of strings (the task is scored by class), "
                          f"not {kind_of(value)}")
    return value


def file_stem(path: Path) -> str:
    """The name that qualifies a file's ids: its name without ``.gz`` and ``.jsonl``/``.json``."""
    name = path.name.removesuffix(".gz")
    for suffix in (".jsonl", ".json"):
        name = name.removesuffix(suffix)
    return name
