"""EPUB e-books: the zip's XHTML chapters in reading order (the package's spine), each through the HTML path
(:mod:`lcrag.documents.html`), under its table-of-contents title as the first level of the section path. Read with
the standard library's zipfile and lxml, not ebooklib (AGPL)."""

from __future__ import annotations

import posixpath
import zipfile
from pathlib import Path
from urllib.parse import unquote

from lcrag.documents.archives import check_text, open_archive
from lcrag.documents.files import read_regular_file
from lcrag.documents.html import add_main_text, extractor_version
from lcrag.documents.limits import ParseLimits, TextBudget
from lcrag.core.errors import InputError
from lcrag.core.registry import LOADERS
from lcrag.core.types import Document

_NS = {"c": "urn:oasis:names:tc:opendocument:xmlns:container", "opf": "http://www.idpf.org/2007/opf",
       "ncx": "http://www.daisy.org/z3986/2005/ncx/", "x": "http://www.w3.org/1999/xhtml",
       "epub": "http://www.idpf.org/2007/ops"}


def _xml(book: zipfile.ZipFile, name: str):
    from lxml import etree

    return etree.fromstring(book.read(name), parser=etree.XMLParser(resolve_entities=False, no_network=True))


def _package(book: zipfile.ZipFile) -> tuple[str, list[str], dict[str, str]]:
    """The package file's folder, the spine's chapter paths in reading order, and manifest paths by id."""
    container = _xml(book, "META-INF/container.xml")
    opf_path = container.find(".//c:rootfile", _NS).get("full-path")
    opf = _xml(book, opf_path)
    base = posixpath.dirname(opf_path)
    items = {item.get("id"): item for item in opf.iterfind(".//opf:manifest/opf:item", _NS)}
    paths = {i: posixpath.normpath(posixpath.join(base, unquote(item.get("href")))) for i, item in items.items()}
    # Each chapter once, where the spine first lists it: a spine may list one chapter hundreds of times (by one id,
    # or by many manifest items naming one file), which epubcheck calls an error (OPF-034, OPF-074) and would be read
    # that many times over.
    spine = list(dict.fromkeys(paths[ref.get("idref")] for ref in opf.iterfind(".//opf:spine/opf:itemref", _NS)
                               if ref.get("idref") in paths and ref.get("linear", "yes") != "no"))
    toc = next((paths[i] for i, item in items.items() if "nav" in (item.get("properties") or "").split()), None)
    toc = toc or next((paths[i] for i, item in items.items() if item.get("media-type") == "application/x-dtbncx+xml"),
                      None)
    return toc or "", spine, paths


def _toc_titles(book: zipfile.ZipFile, toc: str) -> dict[str, str]:
    """Chapter titles by chapter path, from the EPUB 3 navigation document or the EPUB 2 NCX."""
    if not toc:
        return {}
    tree, base, titles = _xml(book, toc), posixpath.dirname(toc), {}
    links = [(a.get("href"), " ".join("".join(a.itertext()).split())) for a in tree.iterfind(".//x:nav//x:a", _NS)]
    links += [(p.find("ncx:content", _NS).get("src"), " ".join("".join(p.find("ncx:navLabel", _NS).itertext()).split()))
              for p in tree.iterfind(".//ncx:navPoint", _NS) if p.find("ncx:content", _NS) is not None]
    for href, title in links:
        if href and title:
            titles.setdefault(posixpath.normpath(posixpath.join(base, unquote(href.split("#")[0]))), title)
    return titles


def epub_document(path: Path, limits: ParseLimits | None = None) -> Document:
    """The document at ``path``, read within ``limits`` (None: the defaults)."""
    limits = limits or ParseLimits()
    from lxml import etree

    data = read_regular_file(path, limits.file_bytes)
    try:
        book = open_archive(data, path)  # before any part expands
        if any(name == "META-INF/encryption.xml" for name in book.namelist()):
            raise InputError(f"{path}: the e-book is encrypted (DRM); lcrag reads only unencrypted EPUB files")
        toc, spine, _ = _package(book)
        titles = _toc_titles(book, toc)
        budget = TextBudget(path, limits, len(data))
        builder = budget.builder()
        for chapter in spine:
            title = titles.get(chapter)
            builder.sections.close_all()  # a chapter's headings end with it
            if title:
                builder.sections.enter(0, title)  # its headings (levels 1 to 6) below it
            add_main_text(builder, book.read(chapter), chapter=title, budget=budget)
    except (zipfile.BadZipFile, KeyError, AttributeError, etree.XMLSyntaxError) as exc:
        raise InputError(f"{path}: not a valid EPUB ({exc.__class__.__name__}: {exc}); re-save it, e.g. with Calibre's "
                         "ebook-convert") from None
    if not check_text(builder.text, path, limits.chars):
        raise InputError(f"{path}: the e-book holds no text (its chapters may be images: run OCR first)")
    return Document(text=builder.text, id=path.stem, title=path.stem, source=str(path),
                    layout=builder.layout(None, extractor_version() + "; epub 1"))


@LOADERS.register("epub", help="EPUB e-book: chapters in reading order through the HTML path, chapter titles as "
                  "sections", suffixes=(".epub",), forms=(".epub",))
def load_epub(path: Path, limits: ParseLimits) -> list[Document]:
    return [epub_document(path, limits)]
