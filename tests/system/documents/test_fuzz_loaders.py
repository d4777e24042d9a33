"""Fuzzing the loaders through the sandbox a service reads uploads in (issue 34, "done when"): hypothesis mutates real
PDF, DOCX, EPUB, HTML and Markdown files made here (bytes flipped, inserted, deleted, repeated thousands of times,
cut short; inside a DOCX or EPUB, the zip's XML parts themselves) and each mutant must be read or refused in one
line naming the file (the sandbox kills a parse past its deadline), with no traceback written and no growth of this
process's memory.

The budget is fixed (derandomized, a set number of examples per format), so CI runs the same cases each time."""

from __future__ import annotations

import io
import os
import zipfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from lcrag.documents.limits import ParseLimits  # noqa: E402
from lcrag.documents.sandbox import Sandbox  # noqa: E402
from lcrag.core.errors import InputError  # noqa: E402

LIMITS = ParseLimits(seconds=5, memory_mb=512, chars=2_000_000)
EXAMPLES = 25  # per format
EXTRA_MB = 100


def _seeds(folder: Path) -> dict[str, bytes]:
    from document_fixtures import FILLER, html_page, write_docx, write_epub, write_pdf

    pdf = write_pdf(folder / "seed.pdf", [["Overview of the crane.", "The reset code is 7781."],
                                          ["Hoist limits.", FILLER]], labels=("r", 1), outline=[("Overview", 0)])
    docx = write_docx(folder / "seed.docx", [("title", "Manual"), ("h1", "Parts"), ("p", "The reset code is 7781."),
                                             ("table", [["Part", "Code"], ["valve", "V-12"]]), ("page", None),
                                             ("p", FILLER)])
    epub = write_epub(folder / "seed.epub", [("One", ["The reset code is 7781."]), ("Two", ["Hoist limits."])])
    html = html_page("Crane manual", [("Controls", ["The reset code is 7781."]), ("Limits", ["Hoist: 12 t."])])
    markdown = ("# Crane manual\n\nThe reset code is *7781*.\n\n## Limits\n\n- hoist: 12 t\n- boom: 30 m\n\n"
                "```\n# not a heading\n```\n\nSetext\n======\n\n> quoted [link](http://example.com) _a_ **b**\n")
    return {".pdf": pdf.read_bytes(), ".docx": docx.read_bytes(), ".epub": epub.read_bytes(),
            ".html": html.encode("utf-8"), ".md": markdown.encode("utf-8")}


def mutate(draw, data: bytes) -> bytes:
    """``data`` with 1-6 mutations: a byte changed, bytes inserted or deleted, a slice repeated up to 5,000 times
    (what amplifies), or the rest cut off."""
    data = bytearray(data)
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["flip", "insert", "delete", "repeat", "truncate"]))
        at = draw(st.integers(0, max(0, len(data) - 1)))
        if kind == "flip" and data:
            data[at] ^= draw(st.integers(1, 255))
        elif kind == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=64))
        elif kind == "delete":
            del data[at:at + draw(st.integers(1, 512))]
        elif kind == "repeat":
            piece = bytes(data[at:at + draw(st.integers(1, 200))])
            data[at:at] = piece * draw(st.integers(2, 5000))
        elif kind == "truncate":
            del data[at:]
    return bytes(data)


@st.composite
def mutants(draw, seed: bytes, zipped: bool) -> bytes:
    """A mutant of ``seed``; for a zip (DOCX, EPUB), of one of its parts, zipped again (a mutated zip's bytes are
    mostly refused by its checksums before any parser sees them) or, now and then, of the zip's own bytes."""
    if not zipped or draw(st.integers(0, 4)) == 0:
        return mutate(draw, seed)
    with zipfile.ZipFile(io.BytesIO(seed)) as archive:
        parts = {info.filename: archive.read(info) for info in archive.infolist()}
    names = sorted(parts)
    name = draw(st.sampled_from([n for n in names if n.endswith((".xml", ".xhtml", ".opf"))] or names))
    parts[name] = mutate(draw, parts[name])
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for part, data in parts.items():
            archive.writestr(part, data)
    return out.getvalue()


def rss_mb() -> float:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / (1 << 20)


@pytest.fixture(scope="module")
def fuzzing(tmp_path_factory):
    folder = tmp_path_factory.mktemp("fuzz")
    sandbox = Sandbox(LIMITS)  # no disk cache: each mutant is parsed
    sandbox.start()
    return folder, _seeds(folder), sandbox, rss_mb()


@pytest.mark.parametrize("suffix", [".pdf", ".docx", ".epub", ".html", ".md"])
def test_mutants_are_read_or_refused_in_one_line_within_the_limits(fuzzing, suffix, capfd):
    folder, seeds, sandbox, rss_before = fuzzing

    @settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                     HealthCheck.data_too_large])
    @given(data=mutants(seeds[suffix], suffix in (".docx", ".epub")))
    def check(data: bytes) -> None:
        path = folder / f"mutant{suffix}"
        path.write_bytes(data)
        try:
            documents = sandbox.load(path)
        except InputError as exc:
            message = str(exc)
            assert "\n" not in message and "Traceback" not in message and path.name in message, message
        else:
            assert all(isinstance(d.text, str) and len(d.text) <= LIMITS.chars for d in documents)
        errors = capfd.readouterr().err
        assert "Traceback" not in errors, errors

    check()
    assert rss_mb() - rss_before < EXTRA_MB
