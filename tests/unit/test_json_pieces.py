"""JSON decoded and encoded a piece at a time (lcrag.core.json_pieces): the values and errors of json.loads and
json.dumps, with no step of json's own C code given more than a piece (issue 42, reproduced 8: a 12 MB parse held
the server's interpreter, and its event loop, for 100-300 ms)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lcrag.core import json_pieces
from lcrag.core.json_pieces import compressed, encoded, loads

PIECE = 64  # small pieces, so that short values cross many of their edges

# Text with what JSON escapes (quotes, backslashes, control characters), non-ASCII, astral characters and lone
# surrogates, runs of each, so that pieces end inside and next to every kind of escape
CHARS = st.sampled_from(['"', "\\", "\n", "\x00", "\x1f", "/", "a", "é", "€", "\U0001f600", "\ud83d", "\ude00",
                         "\udbff", "\udc00", "u", "0"])
TEXTS = st.lists(st.tuples(CHARS, st.integers(1, 40)), max_size=12).map(lambda runs: "".join(c * n for c, n in runs))
SCALARS = st.none() | st.booleans() | st.integers(-10**20, 10**20) | st.floats(allow_nan=False) | TEXTS
VALUES = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=40) | st.dictionaries(TEXTS, inner, max_size=8),
                      max_leaves=120)


@pytest.fixture(autouse=True)
def small_pieces(monkeypatch):
    monkeypatch.setattr(json_pieces, "PIECE", PIECE)


def reference(value) -> bytes:
    """What the sandbox sent before: json.dumps whole (escaping everything when UTF-8 cannot hold a text)."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(value, separators=(",", ":")).encode("ascii")


def same(a, b) -> bool:
    return json.dumps(a, sort_keys=False) == json.dumps(b, sort_keys=False)  # (a NaN-free value: by its JSON)


@settings(max_examples=120, deadline=None)
@given(VALUES)
def test_decoding_gives_what_json_gives(value):
    for data in (reference(value), json.dumps(value).encode("ascii"), json.dumps(value, indent=1).encode()):
        assert same(loads(data), json.loads(data))


@settings(max_examples=120, deadline=None)
@given(VALUES)
def test_encoding_gives_what_json_gives(value):
    data = b"".join(encoded(value))
    assert same(json.loads(data), json.loads(reference(value)))
    assert same(loads(data), json.loads(reference(value)))


@settings(max_examples=120, deadline=None)
@given(VALUES, st.data())
def test_damaged_json_is_refused_as_json_refuses_it(value, data):
    """Cut short, or a byte changed: the same value, or an error of the same kind (what the callers catch)."""
    raw = bytearray(reference(value))
    if len(raw) < 2:
        return
    at = data.draw(st.integers(0, len(raw) - 1))
    damaged = bytes(raw[:at]) if data.draw(st.booleans()) else bytes(raw[:at] + bytes([data.draw(
        st.sampled_from(b'"\\u{[,:0a\x00\xff'))]) + raw[at + 1:])
    caught = (ValueError, UnicodeDecodeError, RecursionError)
    try:
        expected = json.loads(damaged)
    except caught as exc:
        with pytest.raises(caught) as got:
            loads(damaged)
        assert isinstance(got.value, ValueError) == isinstance(exc, ValueError)
    else:
        assert same(loads(damaged), expected)


def test_a_surrogate_pair_escaped_across_a_piece_edge_is_one_character():
    for before in range(PIECE - 14, PIECE + 2):
        data = ('"' + "a" * before + "\\ud83d\\ude00" + "b" * PIECE + '"').encode()
        assert loads(data) == json.loads(data) == "a" * before + "\U0001f600" + "b" * PIECE


def test_no_step_of_json_works_on_more_than_a_piece(monkeypatch):
    """The C scanner is handed one piece of a long string at a time, json.dumps one piece, and the bytes are
    decoded a piece at a time: the steps that hold the interpreter are bounded by the piece, not by the value."""
    scanned, dumped = [], []
    scanstring, dumps = json.decoder.scanstring, json.dumps

    def scanning(s, end, strict=True):
        text, after = scanstring(s, end, strict)
        scanned.append(after - end)
        return text, after

    def dumping(value, **kw):
        out = dumps(value, **kw)
        dumped.append(len(out))
        return out

    monkeypatch.setattr(json.decoder, "scanstring", scanning)
    monkeypatch.setattr(json, "dumps", dumping)
    value = {"documents": [{"text": "Crane manual é\n\"quoted\" \\ " * 400, "segments": [[i, i + 1, None, 0]
                                                                                         for i in range(300)]}]}
    data = b"".join(encoded(value))
    assert json.loads(data) == value
    assert loads(data) == value
    assert len(data) > 20 * PIECE and max(scanned) <= 2 * PIECE and max(dumped) <= 2 * PIECE


def test_small_values_go_to_json_whole(monkeypatch):
    monkeypatch.setattr(json_pieces, "PIECE", 1 << 18)
    value = {"text": "short", "n": [1, 2, 3]}
    assert list(encoded(value)) == [reference(value)]
    assert loads(reference(value)) == value


def test_compressed_is_zlib_of_the_json():
    import zlib

    value = {"text": "x\udc80y" * 100, "list": list(range(200))}
    assert json.loads(zlib.decompress(compressed(value))) == json.loads(reference(value))


def test_runs_of_backslashes_across_piece_edges():
    """Whether a backslash starts an escape depends on how many come before it, however many that is: an odd run
    escapes what follows it, an even one is that many halved (then a quote ends the string)."""
    for run in range(55, 140):
        for after in ("u00e9", "n", '"', "ud83d\\ude00"):
            data = ('"' + "a" * 7 + "\\" * run + after + "z" * PIECE + '"').encode()
            try:
                expected = json.loads(data)
            except ValueError:
                with pytest.raises(ValueError):
                    loads(data)
                continue
            assert loads(data) == expected
