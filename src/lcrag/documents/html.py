"""HTML pages through trafilatura (Apache-2.0): the main text only, without navigation, scripts, sidebars and
footers, with its headings as section paths; tables kept as rows of cells, lists as items, code as code. EPUB
chapters (XHTML) come through here too.

Measured against a selectolax tag-stripper on Debian's Python and Bash HTML manuals (docs/documents.md):
trafilatura keeps the body text and its structure and drops the page furniture; the stripper is faster but
needs per-site rules to drop sidebars and breaks lines inside paragraphs."""

from __future__ import annotations

import functools
from importlib.metadata import version
from pathlib import Path

from lcrag.documents.files import decode_text, read_regular_file
from lcrag.documents.limits import ParseLimits, TextBudget
from lcrag.core.provenance import TextBuilder
from lcrag.core.errors import InputError
from lcrag.core.registry import LOADERS
from lcrag.core.types import Document

EXTRACT_OPTIONS = dict(output_format="xml", include_tables=True, favor_recall=True, include_comments=False,
                       include_formatting=False, include_links=False, include_images=False, deduplicate=False)
_PERMALINK = "¶"  # Sphinx and others end headings with a link sign


def extractor_version() -> str:
    return f"trafilatura {version('trafilatura')}"


def _flat(element) -> str:
    return " ".join("".join(element.itertext()).split())


def _block_text(element) -> str:
    """A block of the extracted main text as plain lines: paragraphs flowed, code kept verbatim, list items one
    per line, table rows as cells separated by ' | '."""
    tag = element.tag
    if tag == "code":
        return "".join(element.itertext()).strip("\n")
    if tag == "list":
        return "\n".join(f"- {text}" for text in map(_flat, element.iter("item")) if text)
    if tag == "table":
        return "\n".join(" | ".join(_flat(cell) for cell in row.iter("cell")) for row in element.iter("row"))
    return _flat(element)


@functools.cache
def _config():
    """trafilatura's defaults, but a short page (an EPUB chapter, a FAQ entry) keeps its own main text: below the
    default 250 characters trafilatura would switch to a fallback extractor that lets navigation in."""
    from trafilatura.settings import use_config

    config = use_config()
    config.set("DEFAULT", "MIN_EXTRACTED_SIZE", "1")
    config.set("DEFAULT", "MIN_OUTPUT_SIZE", "1")
    return config


def extract_main(markup: str | bytes) -> str | None:
    """trafilatura's XML view of the page's main text, or None when it finds none."""
    import trafilatura

    return trafilatura.extract(markup, config=_config(), **EXTRACT_OPTIONS)


def _level(block) -> int:
    """A heading's level, 1 to 6 (trafilatura's ``rend="h2"``; h2 when it says none or something else)."""
    rend = (block.get("rend") or "h2").lstrip("h")
    return min(6, max(1, int(rend))) if rend.isdigit() else 2


def add_main_text(builder: TextBuilder, markup: str, chapter: str | None = None,
                  budget: TextBudget | None = None) -> bool:
    """Append the page's main text to ``builder``, each block under its heading path (below the section open in
    ``builder`` now, e.g. an EPUB chapter's, titled ``chapter``), counting each block against ``budget`` as it is
    added; False when the page has no main text."""
    from lxml import etree

    extracted = extract_main(markup)
    if not extracted:
        return False
    main = etree.fromstring(extracted.encode("utf-8")).find("main")
    sections, outer = builder.sections, builder.sections.current
    added = False
    for block in (main if main is not None else []):
        if block.tag == "head":
            title = _flat(block).rstrip(_PERMALINK).strip()
            if budget is not None:
                budget.add(len(title) + 2)
            if chapter and title.lower() == chapter.lower():  # the chapter's own title, already its section
                builder.add(title, section_id=outer)
                continue
            sections.enter(_level(block), title)
            builder.add(title)
            continue
        text = _block_text(block)
        if budget is not None:
            budget.add(len(text) + 2)
        if text.strip():
            builder.add(text)
            added = True
    return added


def html_document(path: Path, limits: ParseLimits | None = None) -> Document:
    """The document at ``path``, read within ``limits`` (None: the defaults)."""
    limits = limits or ParseLimits()
    data = read_regular_file(path, limits.file_bytes)
    markup = decode_text(path, data)
    budget = TextBudget(path, limits, len(data))
    builder = budget.builder()
    if not add_main_text(builder, markup, budget=budget):
        raise InputError(f"{path}: no main text found in the HTML page (only navigation, scripts or markup); save "
                         "the article itself, or convert it to text")
    return Document(text=builder.text, id=path.stem, title=path.stem, source=str(path),
                    layout=builder.layout(None, extractor_version()))


@LOADERS.register("html", help="HTML page: main text without navigation and boilerplate (trafilatura), headings as "
                  "sections", suffixes=(".html", ".htm", ".xhtml"), forms=(".html",))
def load_html(path: Path, limits: ParseLimits) -> list[Document]:
    return [html_document(path, limits)]
