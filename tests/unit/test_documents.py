import json
import logging
import os
import random
import signal

import pytest

from lcrag.documents import load_document, load_documents
from lcrag.documents.limits import ParseLimits
from lcrag.core.errors import InputError


def test_text_and_markdown_files(tmp_path):
    (tmp_path / "a.txt").write_text("Alpha text.")
    (tmp_path / "b.md").write_text("# Beta\n\nBeta text.")
    assert load_document(tmp_path / "a.txt").text == "Alpha text."
    docs = load_documents(tmp_path)
    assert [d.id for d in docs] == ["a", "b"]


def test_directory_joined_in_order(tmp_path):
    (tmp_path / "2.txt").write_text("second")
    (tmp_path / "1.txt").write_text("first")
    text = load_document(tmp_path).text
    assert text.index("first") < text.index("second")


def test_jsonl_with_optional_fields(tmp_path):
    path = tmp_path / "docs.jsonl"
    path.write_text(json.dumps({"text": "one", "id": "x", "title": "T"}) + "\n\n" + json.dumps({"text": "two"}) + "\n")
    docs = load_documents(path)
    assert [(d.id, d.title, d.text) for d in docs] == [("x", "T", "one"), ("docs-3", "", "two")]


@pytest.mark.parametrize(
    "content, message",
    [
        (b"", "is empty"),
        (b"   \n\t", "is empty"),
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
    ],
)
def test_bad_text_files(tmp_path, content, message):
    path = tmp_path / "doc.txt"
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        load_document(path)


@pytest.mark.parametrize(
    "lines, message",
    [
        (['{"text": "ok"}', "{not json"], r"docs.jsonl:2: invalid JSON"),
        (['{"title": "no text"}'], r"docs.jsonl:1: .*'text'"),
        (['{"text": ""}'], r"docs.jsonl:1: 'text' is empty"),
        (["[1, 2]"], r"docs.jsonl:1"),
    ],
)
def test_bad_jsonl(tmp_path, lines, message):
    path = tmp_path / "docs.jsonl"
    path.write_text("\n".join(lines))
    with pytest.raises(InputError, match=message):
        load_documents(path)


def test_missing_path_and_empty_directory(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        load_document(tmp_path / "nope.txt")
    with pytest.raises(InputError, match="holds no"):
        load_document(tmp_path)


def test_unreadable_path(tmp_path):
    folder = tmp_path / "dir.txt"
    folder.mkdir()
    (folder / "inner.bin").write_bytes(b"x")  # a directory with no text files in it
    with pytest.raises(InputError):
        load_document(folder)


# Defect 1 (issue 14): random bytes were accepted with thousands of U+FFFD; Latin-1 became garbage.
def test_random_high_bytes_are_refused_naming_the_file(tmp_path):
    path = tmp_path / "noise.txt"
    path.write_bytes(bytes(random.Random(0).randint(0x80, 0xFF) for _ in range(24_756)))
    with pytest.raises(InputError, match=r"noise\.txt is not text in UTF-8 or Windows-1252/Latin-1: .* save it as UTF-8"):
        load_document(path)


@pytest.mark.parametrize(
    "text, encoding",
    [
        ("café au lait, Größe, naïve élève", "latin-1"),
        ("He said \u201chello\u201d \u2014 it\u2019s \u20ac5", "cp1252"),
        ("Hello wörld ✓ 你好", "utf-16"),  # with a byte-order mark
        ("Hello wörld, plain text", "utf-16-le"),  # without one
        ("Hello wörld, plain text", "utf-16-be"),
        ("\ufeffhéllo", "utf-8"),
        ("Ünïcödé ✓", "utf-32"),
    ],
)
def test_legacy_and_utf16_text_decodes_correctly(tmp_path, text, encoding):
    path = tmp_path / "doc.txt"
    path.write_bytes(text.encode(encoding))
    assert load_document(path).text == text.removeprefix("\ufeff")


@pytest.mark.parametrize(
    "content, message",
    [
        # Another code page is refused, not guessed.
        (("Привет, как дела? Это русский текст. " * 20).encode("cp1251"), "not text in UTF-8 or Windows-1252"),
        # Valid UTF-8, but mostly control characters.
        (bytes(random.Random(1).randint(1, 0x7F) for _ in range(5000)), "binary file, not text .* control characters"),
        # A UTF-16 byte-order mark, then a lone surrogate.
        (b"\xff\xfe\x00\xd8a\x00", "starts with a UTF-16 byte-order mark but does not decode"),
    ],
)
def test_undecodable_text_is_refused(tmp_path, content, message):
    path = tmp_path / "doc.txt"
    path.write_bytes(content)
    with pytest.raises(InputError, match=r"doc\.txt .*" + message):
        load_document(path)


@pytest.fixture
def no_hang():
    """Turns a blocking read (of a FIFO, say) into a failure after 30 s instead of a stuck test run."""

    def hang(signum, frame):
        raise TimeoutError("blocked reading a file")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(30)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


# Defect 2 (issue 14): a FIFO hung forever and /dev/zero ended in MemoryError.
@pytest.mark.parametrize("name", ["doc.txt", "docs.jsonl"])
def test_fifo_is_refused_without_blocking(tmp_path, no_hang, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)  # nobody writes: opening it for reading would block forever
    with pytest.raises(InputError, match=f"{name} is not a regular file"):
        load_document(fifo)


def test_device_is_refused(no_hang):
    with pytest.raises(InputError, match="/dev/zero is not a regular file"):
        load_document("/dev/zero")


def test_directory_skips_fifos_and_devices(tmp_path, no_hang, caplog):
    (tmp_path / "a.txt").write_text("Alpha text.")
    os.mkfifo(tmp_path / "pipe.txt")
    (tmp_path / "zero.txt").symlink_to("/dev/zero")
    with caplog.at_level(logging.WARNING):
        docs = load_documents(tmp_path)
    assert [d.id for d in docs] == ["a"]
    assert "skipped 2 entries that are not regular files" in caplog.text


def test_size_limit_has_its_own_message(tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("word " * 300_000)  # 1.5 MB
    with pytest.raises(InputError, match=r"big\.txt is 1\.4 MB, over the 1 MB limit \(raise it with --max-file-mb"):
        load_document(path, ParseLimits(file_mb=1))
    assert load_document(path, ParseLimits(file_mb=2)).text.startswith("word word")


# Corpora are streamed line by line, so they are strict UTF-8: an undecodable line is a bad record, never garbage.
def test_corpus_refuses_pipes_and_undecodable_lines(tmp_path, no_hang):
    from lcrag.documents.corpus import CorpusStore

    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="pipe.jsonl is not a regular file"):
        CorpusStore.ingest(fifo, tmp_path / "a.sqlite")
    good = json.dumps({"id": "1", "title": "T", "text": "fine"}).encode() + b"\n"
    latin1 = json.dumps({"id": "2", "title": "T", "text": "café"}, ensure_ascii=False).encode("latin-1") + b"\n"
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(good + latin1)
    with pytest.raises(InputError, match=r"mixed.jsonl:2: not valid UTF-8 \(byte 0xe9 at column 39\)"):
        CorpusStore.ingest(mixed, tmp_path / "b.sqlite")
    store, report = CorpusStore.ingest(mixed, tmp_path / "c.sqlite", skip_bad=True)
    assert (len(store), report.skipped) == (1, 1)
    store.close()
    utf16 = tmp_path / "utf16.jsonl"
    utf16.write_bytes((good + good).decode().encode("utf-16"))
    with pytest.raises(InputError, match="utf16.jsonl is UTF-16 or UTF-32 text"):
        CorpusStore.ingest(utf16, tmp_path / "d.sqlite")
