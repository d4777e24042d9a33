"""Zip-based documents that would expand past what one document may be (issue 25, item 11): refused from the zip's
directory, before any part is inflated, naming the file and the limit; a header that lies about a part's size is a
damaged file, never a larger read."""

from __future__ import annotations

import struct
import tracemalloc
import zipfile
from pathlib import Path

import pytest
from document_fixtures import write_docx, write_epub

from lcrag.documents import load_document
from lcrag.documents.archives import check_archive, check_text
from lcrag.errors import InputError

pytestmark = pytest.mark.unit


def with_part(source: Path, target: Path, member: str, head: bytes, body: bytes, repeat: int, tail: bytes) -> Path:
    """``source`` with ``member`` replaced by head + body × repeat + tail, written as it streams (a small file)."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as new:
        for info in old.infolist():
            if info.filename != member:
                new.writestr(info, old.read(info.filename))
        with new.open(member, "w", force_zip64=True) as part:
            part.write(head)
            for _ in range(repeat):
                part.write(body)
            part.write(tail)
    return target


def docx_bomb(tmp_path: Path, megabytes: int = 80) -> Path:
    plain = write_docx(tmp_path / "plain.docx", [("p", "A small paragraph.")])
    paragraph = b"<w:p><w:r><w:t>bomb</w:t></w:r></w:p>" * 1000
    head = (b'<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/'
            b'main"><w:body>')
    return with_part(plain, tmp_path / "report.docx", "word/document.xml", head, paragraph,
                     megabytes * (1 << 20) // len(paragraph), b"</w:body></w:document>")


def refused_within(load, path: Path, peak_mb: float) -> str:
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as refused:
            load(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < peak_mb * (1 << 20), f"{peak / (1 << 20):.0f} MB allocated before refusing"
    return str(refused.value)


def test_a_docx_expanding_hundreds_of_times_is_refused_before_it_expands(tmp_path):
    bomb = docx_bomb(tmp_path)
    assert bomb.stat().st_size < 1 << 20  # 80 MB of XML in a file of a few hundred KB
    message = refused_within(load_document, bomb, peak_mb=20)
    assert "report.docx: word/document.xml expands" in message and "over the 100x limit" in message


def test_an_epub_chapter_expanding_hundreds_of_times_is_refused(tmp_path):
    plain = write_epub(tmp_path / "plain.epub", [("One", ["First chapter."])])
    bomb = with_part(plain, tmp_path / "novel.epub", "OEBPS/text/ch0.xhtml",
                     b"<html xmlns='http://www.w3.org/1999/xhtml'><body>", b"<p>bomb</p>" * 1000, 6000, b"</body></html>")
    message = refused_within(load_document, bomb, peak_mb=20)
    assert "novel.epub: OEBPS/text/ch0.xhtml expands" in message and "limit" in message


def test_a_document_expanding_past_the_total_is_refused_naming_the_limit(tmp_path):
    plain = write_docx(tmp_path / "plain.docx", [("p", "A small paragraph.")])
    with zipfile.ZipFile(plain) as archive:
        expanded = sum(i.file_size for i in archive.infolist())
        with pytest.raises(InputError, match=r"plain\.docx expands to .* over the .* limit for zip-based documents"):
            check_archive(archive, plain, max_expanded_bytes=expanded - 1)
        assert check_archive(archive, plain) is archive


def test_a_part_whose_header_understates_its_size_is_a_damaged_file_not_a_larger_read(tmp_path):
    plain = write_docx(tmp_path / "plain.docx", [("p", "A small paragraph.")])
    lying = tmp_path / "lying.docx"
    with zipfile.ZipFile(plain) as old, zipfile.ZipFile(lying, "w", zipfile.ZIP_DEFLATED) as new:
        for info in old.infolist():
            body = old.read(info.filename)
            if info.filename == "word/document.xml":
                body = body.replace(b"<w:body>", b"<w:body>" + b"<w:p><w:r><w:t>bomb</w:t></w:r></w:p>" * 200_000)
            new.writestr(info.filename, body)
    data = bytearray(lying.read_bytes())
    # The central directory's entry for word/document.xml now says it expands to 1,000 bytes.
    entry = data.rfind(b"PK\x01\x02", 0, data.rfind(b"word/document.xml"))
    struct.pack_into("<I", data, entry + 24, 1000)
    lying.write_bytes(bytes(data))
    with pytest.raises(InputError, match=r"lying\.docx: not a valid \.docx \(BadZipFile\)"):  # its CRC fails
        load_document(lying)


def test_text_beyond_one_documents_characters_is_refused():
    assert check_text("short", Path("a.docx")) == "short"
    with pytest.raises(InputError, match=r"a\.epub: 11 characters of text, over the 10 limit"):
        check_text("x" * 11, Path("a.epub"), max_chars=10)


def test_ordinary_documents_still_load(tmp_path):
    docx = write_docx(tmp_path / "plain.docx", [("h1", "Intro"), ("p", "The reset code is 7781.")])
    epub = write_epub(tmp_path / "plain.epub", [("One", ["The reset code is 7781."])])
    assert "7781" in load_document(docx).text and "7781" in load_document(epub).text
