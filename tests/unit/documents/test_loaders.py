"""Loading files: a JSONL record nested too deep and a parser's own failure are one skipped file each, never an
exception that stops the others (issue 25, item 6)."""

from __future__ import annotations

import pytest

from lcrag.documents import loaders
from lcrag.documents.loaders import load_documents, load_files
from lcrag.core.errors import InputError


def test_a_jsonl_record_nested_too_deep_is_an_input_error_naming_its_line(tmp_path):
    deep = tmp_path / "deep.jsonl"
    deep.write_text('{"text": "fine"}\n{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n")
    with pytest.raises(InputError, match=r"deep.jsonl:2: JSON nested too deeply"):
        load_documents(deep)


def test_a_file_a_parser_fails_on_is_skipped_and_the_others_are_read(tmp_path, monkeypatch):
    good, bad = tmp_path / "good.txt", tmp_path / "bad.md"
    good.write_text("The crane reset code is 7781.")
    bad.write_text("# Heading")

    def parse(path, limits=None):
        if path == bad:
            raise KeyError("a parser's own failure")
        return load_documents(path, limits)

    monkeypatch.setattr(loaders, "load_documents", parse)
    docs, skipped = load_files([bad, good])
    assert [d.text for d in docs] == ["The crane reset code is 7781."]
    assert skipped == [f"{bad}: could not be read (KeyError: \"a parser's own failure\")"]
