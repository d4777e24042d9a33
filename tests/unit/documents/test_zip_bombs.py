"""Zip-based documents that would expand past what one document may be (issue 25, item 11): refused before any part
is inflated whole, naming the file (never its folder) and the limit, within a few MB of memory; a zip header that
lies about a part's size is refused too, never a larger read."""

from __future__ import annotations

import re
import struct
import tracemalloc
import zipfile
import zlib
from pathlib import Path

import pytest
from document_fixtures import write_docx, write_epub

from lcrag.documents import load_document
from lcrag.documents.archives import check_chars, check_text, open_archive
from lcrag.documents.limits import MAX_DOCUMENT_CHARS
from lcrag.core.errors import InputError

pytestmark = pytest.mark.unit

PARAGRAPH = b"<w:p><w:r><w:t>bomb</w:t></w:r></w:p>" * 1000
BODY_HEAD = (b'<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/'
             b'main"><w:body>')


def with_part(source: Path, target: Path, member: str, head: bytes, body: bytes, repeat: int, tail: bytes) -> Path:
    """``source`` with ``member`` replaced by head + body × repeat + tail, written as it streams (a small file)."""
    with zipfile.ZipFile(source) as old, zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as new:
        for info in old.infolist():
            if info.filename != member:
                new.writestr(info, old.read(info.filename))
        with new.open(member, "w") as part:
            part.write(head)
            for _ in range(repeat):
                part.write(body)
            part.write(tail)
    return target


def docx_bomb(tmp_path: Path, megabytes: int) -> Path:
    plain = write_docx(tmp_path / "plain.docx", [("p", "A small paragraph.")])
    return with_part(plain, tmp_path / "report.docx", "word/document.xml", BODY_HEAD, PARAGRAPH,
                     megabytes * (1 << 20) // len(PARAGRAPH), b"</w:body></w:document>")


def patch_directory(path: Path, member: str, **fields: int) -> Path:
    """Rewrite ``member``'s entry in the zip's directory: ``crc``, ``compress_size``, ``file_size``."""
    data = bytearray(path.read_bytes())
    entry = data.rfind(b"PK\x01\x02", 0, data.rfind(member.encode()))
    for field, offset in (("crc", 16), ("compress_size", 20), ("file_size", 24)):
        if field in fields:
            struct.pack_into("<I", data, entry + offset, fields[field])
    path.write_bytes(bytes(data))
    return path


def refused_within(path: Path, peak_mb: float = 20) -> str:
    """The message ``path`` is refused with, after checking the refusal allocated at most ``peak_mb``."""
    tracemalloc.start()
    try:
        with pytest.raises(InputError) as refused:
            load_document(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < peak_mb * (1 << 20), f"{peak / (1 << 20):.0f} MB allocated before refusing"
    message = str(refused.value)
    assert "\n" not in message and str(path.parent) not in message  # one line, the file's name, no server folder
    return message


def test_a_docx_expanding_past_the_total_is_refused_naming_the_limit(tmp_path):
    bomb = docx_bomb(tmp_path, megabytes=300)
    assert bomb.stat().st_size < 2 << 20  # 300 MB of XML in a file of about 1 MB
    message = refused_within(bomb)
    assert re.match(r"report\.docx expands to 30\d MB, over the 256 MB limit for zip-based documents", message)


def test_a_docx_part_expanding_hundreds_of_times_is_refused(tmp_path):
    message = refused_within(docx_bomb(tmp_path, megabytes=80))
    assert message.startswith("report.docx: word/document.xml expands") and "over the 100x limit" in message


def test_an_epub_chapter_expanding_hundreds_of_times_is_refused(tmp_path):
    plain = write_epub(tmp_path / "plain.epub", [("One", ["First chapter."])])
    head = b"<html xmlns='http://www.w3.org/1999/xhtml'><body>"
    bomb = with_part(plain, tmp_path / "novel.epub", "OEBPS/text/ch0.xhtml", head, b"<p>bomb</p>" * 1000, 6000,
                     b"</body></html>")
    message = refused_within(bomb)
    assert message.startswith("novel.epub: OEBPS/text/ch0.xhtml expands") and "over the 100x limit" in message


def test_a_part_whose_header_understates_its_size_is_refused_without_inflating_it(tmp_path):
    # The body is a real document followed by 100 MB of spaces; the directory says it is only the document, with
    # that document's checksum, so zipfile's own check passes: python-docx alone would inflate all 100 MB at once.
    plain = write_docx(tmp_path / "plain.docx", [("p", "A small paragraph.")])
    with zipfile.ZipFile(plain) as z:
        body = z.read("word/document.xml")
    lying = with_part(plain, tmp_path / "lying.docx", "word/document.xml", body, b" " * (1 << 20), 100, b"")
    patch_directory(lying, "word/document.xml", crc=zlib.crc32(body), file_size=len(body))
    message = refused_within(lying, peak_mb=10)
    assert message.startswith("lying.docx: word/document.xml expands past the") and "zip header declares" in message


def test_parts_claiming_more_compressed_data_than_the_file_holds_are_refused(tmp_path):
    # A larger compressed size would pass the ratio check: 80 MB from "8 MB" is 10x.
    bomb = patch_directory(docx_bomb(tmp_path, megabytes=80), "word/document.xml", compress_size=8 << 20)
    assert "report.docx: its parts claim more compressed data than the file holds" in refused_within(bomb)


def test_a_zip_of_too_many_parts_is_refused_before_it_is_opened(tmp_path):
    crowded = tmp_path / "crowded.epub"
    with zipfile.ZipFile(crowded, "w") as z:
        for i in range(20_000):
            z.writestr(f"p{i}", b"")
    assert refused_within(crowded, peak_mb=10).startswith("crowded.epub: 20,000 parts in one zip, over the 10,000")


def test_a_part_in_a_compression_docx_does_not_allow_is_a_damaged_file(tmp_path):
    plain = write_docx(tmp_path / "plain.docx", [("p", "A small paragraph.")])
    other = tmp_path / "other.docx"
    with zipfile.ZipFile(plain) as old, zipfile.ZipFile(other, "w", zipfile.ZIP_BZIP2) as new:
        for info in old.infolist():
            new.writestr(info.filename, old.read(info.filename))
    with pytest.raises(InputError, match=r"other\.docx: not a valid \.docx \(BadZipFile\)"):
        load_document(other)


def test_each_limit_can_be_given(tmp_path):
    plain = write_docx(tmp_path / "plain.docx", [("p", "A small paragraph.")])
    data = plain.read_bytes()
    with zipfile.ZipFile(plain) as z:
        parts, expanded = len(z.infolist()), sum(i.file_size for i in z.infolist())
    open_archive(data, plain, max_expanded_bytes=expanded, max_parts=parts).close()
    with pytest.raises(InputError, match=r"^plain\.docx expands to .* over the .* limit for zip-based documents"):
        open_archive(data, plain, max_expanded_bytes=expanded - 1)
    with pytest.raises(InputError, match=rf"^plain\.docx: {parts} parts in one zip, over the {parts - 1} "):
        open_archive(data, plain, max_parts=parts - 1)
    bomb = docx_bomb(tmp_path, megabytes=80)
    open_archive(bomb.read_bytes(), bomb, max_ratio=1000).close()


def test_text_beyond_one_documents_characters_is_refused():
    assert check_text("short", Path("/srv/a.docx"), MAX_DOCUMENT_CHARS) == "short"
    with pytest.raises(InputError, match=r"^a\.epub: 11 characters of text, over the 10 limit"):
        check_text("x" * 11, Path("/srv/a.epub"), max_chars=10)
    with pytest.raises(InputError, match=r"^a\.docx: 51,000,000 characters of text, over the 50,000,000 limit"):
        check_chars(51_000_000, Path("/srv/a.docx"), MAX_DOCUMENT_CHARS)


def test_ordinary_documents_still_load(tmp_path):
    docx = write_docx(tmp_path / "plain.docx", [("h1", "Intro"), ("p", "The reset code is 7781."), ("page", None),
                                                ("p", "Second page.")])
    epub = write_epub(tmp_path / "plain.epub", [("One", ["The reset code is 7781."])])
    loaded = load_document(docx)
    assert "7781" in loaded.text and "7781" in load_document(epub).text
    assert loaded.layout.segments[-1].page == "2"  # the page break found by the streamed search of the body
