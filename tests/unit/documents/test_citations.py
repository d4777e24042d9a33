"""Sources of answers: retrieved chunks cite their pages and sections, LC answers cite located ones, Self-Route's
follow its route, and the CLI prints them (fake readers: what is tested is the citing, not the answer)."""

from __future__ import annotations

import json
import sys

import pytest
from document_fixtures import crane_manual

from lcrag.cli import main
from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.core.provenance import PHYSICAL, Layout, Segment, Source, format_sources, locate
from lcrag.core.types import Document

def manual(tmp_path):
    return crane_manual(tmp_path)


def pipeline(tmp_path, scripted_reader, answer, **settings):
    reader = scripted_reader(answer)
    return Pipeline(Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", k=2, **settings),
                    reader=reader)


def test_rag_answers_cite_the_retrieved_chunks_pages(tmp_path, scripted_reader):
    answer = pipeline(tmp_path, scripted_reader, lambda m: "7781").ask(manual(tmp_path), "What is the crane reset code?",
                                                                       strategy="rag")
    assert answer.sources and all(s.how == "retrieved" for s in answer.sources)
    top = answer.sources[0]
    assert top.pages == ["6"] and top.page_numbering == PHYSICAL and top.section == ["Crane Controls"]
    assert "reset code" in top.snippet and top.chunk == answer.chunks[0].index


def test_lc_answers_cite_located_chunks(tmp_path, scripted_reader):
    answer = pipeline(tmp_path, scripted_reader, lambda m: "The reset code is 7781.").ask(
        manual(tmp_path), "What is the crane reset code?", strategy="lc")
    assert not answer.chunks and answer.sources
    assert answer.sources[0].how == "located" and answer.sources[0].pages == ["6"]


def test_self_route_sources_follow_its_route(tmp_path, scripted_reader):
    declines = lambda m: "unanswerable" if "unanswerable" in m[-1]["content"] else "7781"  # noqa: E731
    routed = pipeline(tmp_path, scripted_reader, declines).ask(manual(tmp_path), "What is the crane reset code?")
    assert routed.route == "lc" and {s.how for s in routed.sources} == {"located"}
    kept = pipeline(tmp_path, scripted_reader, lambda m: "7781").ask(manual(tmp_path), "What is the crane reset code?")
    assert kept.route == "rag" and {s.how for s in kept.sources} == {"retrieved"}


def test_cascade_cites_the_step_that_answered(tmp_path, scripted_reader):
    calls = []

    def answer(messages):
        calls.append(messages)
        return "unanswerable" if len(calls) == 1 else "7781"

    result = pipeline(tmp_path, scripted_reader, answer).ask(manual(tmp_path), "What is the crane reset code?",
                                                             strategy="cascade")
    assert result.route == "rag-wide"
    assert len(result.sources) > len(result.chunks)  # the wide step read (and cites) more chunks than the first


def test_closed_book_answers_cite_nothing(tmp_path, scripted_reader):
    answer = pipeline(tmp_path, scripted_reader, lambda m: "7781").ask(manual(tmp_path), "Reset code?",
                                                                       strategy="closed-book")
    assert answer.sources == []


def test_locate_maps_offsets_through_segments_and_parts():
    layout = Layout((Segment(0, 10, "1", 1), Segment(12, 30, "2", 2)), PHYSICAL, "x",
                    sections=((0, ""), (0, "A"), (1, "B")))  # A, then A / B
    part = Document("0123456789\n\nabcdefghijklmnopqr", source="m.pdf", layout=layout)
    assert locate(part, 3, 15) == {"file": "m.pdf", "pages": ["1", "2"], "page_numbering": PHYSICAL, "section": ["A"]}
    text = Document("one\ntwo\nthree", source="t.txt")
    joined = Document("t\n\none\ntwo\nthree\n\nm\n\n" + part.text, parts=((3, text), (20, part)))
    assert locate(joined, 7, 10) == {"file": "t.txt", "lines": [2, 2]}
    assert locate(joined, 34, 36)["pages"] == ["2"]


def test_format_sources_names_a_file_once_and_says_how_pages_are_numbered():
    sources = [Source("dir/manual.pdf", "s", pages=["3"], page_numbering=PHYSICAL),
               Source("dir/manual.pdf", "s", pages=["17"], page_numbering=PHYSICAL, section=["Shell", "Shell Parameters"]),
               Source("dir/manual.pdf", "s", pages=["17"], page_numbering=PHYSICAL, section=["Shell", "Shell Parameters"]),
               Source("notes.txt", "s", lines=[4, 9])]
    assert format_sources(sources) == ("manual.pdf p. 3; p. 17 (§ Shell Parameters); notes.txt l. 4–9 "
                                       "(physical page numbers)")
    located = [Source("book.epub", "s", how="located", section=["The Storm"])]
    assert format_sources(located) == "book.epub § The Storm (located after the answer, not retrieved)"


@pytest.fixture
def cli_reader(monkeypatch, scripted_reader):
    reader = scripted_reader(lambda m: "7781")
    monkeypatch.setattr("lcrag.pipeline.pipeline.make_reader", lambda *a, **k: reader)
    return reader


def run(args, monkeypatch, capsys) -> str:
    monkeypatch.setattr(sys, "argv", ["lcrag", *args])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code in (0, None)
    return capsys.readouterr().out


def test_cli_prints_sources_after_the_answer_and_json_has_them(tmp_path, cli_reader, monkeypatch, capsys):
    pdf = manual(tmp_path)
    args = ["ask", str(pdf), "What is the crane reset code?", "--strategy", "rag", "--chunking", "words:20", "-k", "2",
            "--no-cache", "--cache-dir", str(tmp_path / "c")]
    out = run(args, monkeypatch, capsys).splitlines()
    assert out[0] == "7781"
    assert out[1].startswith("Sources: crane.pdf p. 6 (§ Crane Controls)") and "physical page numbers" in out[1]
    sources = json.loads(run(args + ["--json"], monkeypatch, capsys))["sources"]
    assert sources[0]["pages"] == ["6"] and sources[0]["how"] == "retrieved" and sources[0]["file"] == str(pdf)


def test_a_truncated_lc_answer_cites_only_what_the_reader_saw(tmp_path, scripted_reader):
    reader = scripted_reader(lambda m: "The reset code is 7781.", context_window=150)
    pipeline = Pipeline(Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", max_tokens=8),
                        reader=reader)
    answer = pipeline.ask(manual(tmp_path), "What is the crane reset code?", strategy="lc")
    assert answer.truncated_tokens > 0 and "7781" not in answer.context  # page 6 was in the cut middle
    assert answer.sources and all(s.how == "located" and "6" not in s.pages for s in answer.sources)
    assert all(s.snippet.split(" …")[0][:30] in " ".join(answer.context.split()) for s in answer.sources)


def test_a_citations_lines_are_those_counted_from_the_start():
    """locate's line numbers come from the document's line breaks, found once: the same as counting them."""
    import random

    from lcrag.core.provenance import locate
    from lcrag.core.types import Document

    rng = random.Random(1)
    for _ in range(300):
        text = "".join(rng.choice("ab \n") for _ in range(rng.randint(0, 300)))
        start = rng.randint(0, len(text))
        end = rng.randint(start, len(text))
        first = text.count("\n", 0, start) + 1
        expected = [first, first + text.count("\n", start, max(start, end - 1))]
        assert locate(Document(text=text, id="d"), start, end)["lines"] == expected
