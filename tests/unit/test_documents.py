import json
import logging

import pytest

from lcrag.documents import load_document, load_documents
from lcrag.errors import InputError


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


def test_undecodable_bytes_replaced_with_warning(tmp_path, caplog):
    path = tmp_path / "latin1.txt"
    path.write_bytes("café au lait".encode("latin-1"))
    with caplog.at_level(logging.WARNING):
        doc = load_document(path)
    assert doc.text == "caf\ufffd au lait"
    assert "1 undecodable" in caplog.text
