"""Real documents (issue 17): answers with citations over a real PDF manual, and extraction throughput per format.

Part 1, citations: the questions of benchmarks/documents/bashref_questions.jsonl (written from the Bash Reference
Manual's text, each with the physical page(s) that state its answer) asked of bashref.pdf with every strategy (rag,
op-rag, self-route, lc) and each reader given. Per strategy and reader: answer quality (contains: a gold answer,
normalised, inside the normalised prediction; and LongBench's qa_f1), citation accuracy (a gold page among the
cited pages), prompt/completion/cached tokens as the reader reported them, money priced as --price-as, wall time.
Rows are written as they come (``--out DIR/rows.jsonl``) and a re-run skips those done, so a long run resumes.

Part 2, extraction: each format's loader against the bare library call on the same file, alternating, best of
--rounds: PDF (pypdfium2 text of every page), DOCX (python-docx paragraphs and tables), HTML (trafilatura.extract),
EPUB (zip + trafilatura.extract per chapter), Markdown (markdown-it-py parse), on real files from Debian packages
(bash-doc; python3.11-doc for the EPUB's chapters) and, for DOCX, the manual's HTML text saved as .docx.

    bash benchmarks/fetch_documents.sh /tmp/docs
    python benchmarks/bench_documents.py --pdf /tmp/docs/bashref.pdf --html /tmp/docs/bash.html \\
        --chapters /tmp/docs/pylib --readers smollm2,/work/models/qwen2.5-0.5b.gguf --out benchmarks/results/documents
"""

from __future__ import annotations

import argparse
import io
import json
import sys
import tempfile
import time
import zipfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import log, machine, md_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
STRATEGIES = ("rag", "op-rag", "self-route", "lc")


def reader_name(spec: str) -> str:
    return Path(spec).stem if spec.endswith(".gguf") else spec


def load_questions(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def done_keys(rows_path: Path) -> set[tuple[str, str, str]]:
    if not rows_path.exists():
        return set()
    keys = set()
    for line in rows_path.read_text(encoding="utf-8").splitlines():
        try:
            row = json.loads(line)
        except json.JSONDecodeError:  # a torn last line from an interrupted run: asked again
            continue
        keys.add((row["reader"], row["strategy"], row["id"]))
    return keys


def answer_row(pipeline, pdf: Path, item: dict, strategy: str, reader: str, price_as: str) -> dict:
    from lcrag.evaluation.metrics import contains_answer, qa_f1_score
    from lcrag.evaluation.prices import PriceTable, calls_cost

    started = time.perf_counter()
    answer = pipeline.ask(pdf, item["question"], strategy=strategy)
    seconds = time.perf_counter() - started
    cited = [page for source in answer.sources for page in source.pages]
    return {
        "reader": reader, "strategy": strategy, "id": item["id"], "prediction": answer.text, "route": answer.route,
        "contains": contains_answer(answer.text, item["answers"]),
        "f1": max(qa_f1_score(answer.text, gold) for gold in item["answers"]),
        "cited_pages": cited, "gold_pages": item["gold_pages"],
        "citation_hit": bool(set(cited) & set(item["gold_pages"])),
        "how": sorted({s.how for s in answer.sources}),
        "prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
        "cached_prompt_tokens": sum(c.cached_prompt_tokens for c in answer.calls),
        "usd": calls_cost(answer.calls, PriceTable(), price_as), "seconds": round(seconds, 3),
        "from_cache": bool(answer.calls) and all(c.from_cache for c in answer.calls),
    }


def run_questions(args, questions: list[dict]) -> None:
    from lcrag.pipeline.pipeline import Pipeline, Settings

    rows_path = args.out / "rows.jsonl"
    done = done_keys(rows_path)
    for spec in args.readers.split(","):
        name = reader_name(spec)
        settings = Settings(llm=spec, context_window=args.context_window, cache_dir=args.cache_dir)
        pipeline = Pipeline(settings)
        try:
            for strategy in STRATEGIES:
                for item in questions:
                    if (name, strategy, item["id"]) in done:
                        continue
                    row = answer_row(pipeline, args.pdf, item, strategy, name, args.price_as)
                    with rows_path.open("a", encoding="utf-8") as f:
                        f.write(json.dumps(row, ensure_ascii=False) + "\n")
                    log(f"{name} {strategy} {item['id']}: contains={row['contains']} cited={row['cited_pages']} "
                        f"gold={row['gold_pages']} {row['seconds']}s")
        finally:
            pipeline.close()


def recite(args, questions: list[dict], strategy: str) -> None:
    """Recompute the citations of the recorded rows of one strategy (their answers come from the completion cache,
    unchanged; tokens, money and wall time stay as measured), after a change to how answers cite."""
    from lcrag.pipeline.pipeline import Pipeline, Settings

    rows_path = args.out / "rows.jsonl"
    rows = [json.loads(line) for line in rows_path.read_text(encoding="utf-8").splitlines() if line.strip()]
    by_id = {q["id"]: q for q in questions}
    for spec in args.readers.split(","):
        pipeline = Pipeline(Settings(llm=spec, context_window=args.context_window, cache_dir=args.cache_dir))
        try:
            for row in rows:
                if row["reader"] == reader_name(spec) and row["strategy"] == strategy and row["id"] in by_id:
                    answer = pipeline.ask(args.pdf, by_id[row["id"]]["question"], strategy=strategy)
                    assert answer.text == row["prediction"], "the answer is not the recorded one"
                    row["cited_pages"] = [page for source in answer.sources for page in source.pages]
                    row["citation_hit"] = bool(set(row["cited_pages"]) & set(row["gold_pages"]))
        finally:
            pipeline.close()
    rows_path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")


def summarise(rows: list[dict], price_as: str) -> str:
    out = []
    for reader in dict.fromkeys(r["reader"] for r in rows):
        table = []
        for strategy in STRATEGIES:
            got = [r for r in rows if r["reader"] == reader and r["strategy"] == strategy]
            if not got:
                continue
            n = len(got)
            usd = [r["usd"] for r in got if r["usd"] is not None]
            table.append([strategy, n, f"{100 * sum(r['contains'] for r in got) / n:.1f}",
                          f"{100 * sum(r['f1'] for r in got) / n:.1f}",
                          f"{100 * sum(r['citation_hit'] for r in got) / n:.1f}",
                          f"{sum(r['prompt_tokens'] for r in got) / n:.0f}",
                          f"{sum(r['cached_prompt_tokens'] for r in got) / n:.0f}",
                          f"{sum(r['completion_tokens'] for r in got) / n:.1f}",
                          f"{1000 * sum(usd) / len(usd):.3f}" if usd else "—",
                          f"{sum(r['seconds'] for r in got) / n:.1f}",
                          f"{sum(r['route'] == 'lc' for r in got)}/{n}"])
        out.append(f"#### Reader: {reader}\n\n" + md_table(
            ["strategy", "questions", "contains %", "qa_f1 %", "citation accuracy %", "prompt tokens / q",
             "of which cached / q", "completion tokens / q", f"USD / 1K q ({price_as})", "wall s / q", "routed to LC"],
            table))
    return "\n\n".join(out)


# -- extraction throughput -------------------------------------------------------------------------------------------
def docx_from_html(html: Path, dest: Path) -> Path:
    """The HTML manual's main text saved as a Word file: its headings as Heading styles, paragraphs as paragraphs."""
    import docx

    from lcrag.documents import load_document

    doc, document = docx.Document(), load_document(html)
    for segment in document.layout.segments:
        text, section = document.text[segment.start:segment.end], document.layout.path(segment.section_id)
        for paragraph in text.split("\n\n"):
            if section and paragraph == section[-1]:
                doc.add_heading(paragraph, level=min(len(section), 9))
            else:
                doc.add_paragraph(paragraph)
    doc.save(dest)
    return dest


def epub_from_pages(pages: list[Path], dest: Path) -> Path:
    """An EPUB whose chapters are real HTML pages (Python's library reference from python3.11-doc)."""
    with zipfile.ZipFile(dest, "w") as book:
        book.writestr("mimetype", "application/epub+zip", compress_type=zipfile.ZIP_STORED)
        book.writestr("META-INF/container.xml", "<?xml version='1.0'?><container version='1.0' xmlns='urn:oasis:names:"
                      "tc:opendocument:xmlns:container'><rootfiles><rootfile full-path='content.opf' media-type="
                      "'application/oebps-package+xml'/></rootfiles></container>")
        items = "".join(f"<item id='c{i}' href='c{i}.xhtml' media-type='application/xhtml+xml'/>" for i in range(len(pages)))
        spine = "".join(f"<itemref idref='c{i}'/>" for i in range(len(pages)))
        book.writestr("content.opf", "<?xml version='1.0'?><package xmlns='http://www.idpf.org/2007/opf' version='3.0'>"
                      f"<metadata/><manifest>{items}</manifest><spine>{spine}</spine></package>")
        for i, page in enumerate(pages):
            book.writestr(f"c{i}.xhtml", page.read_bytes())
    return dest


def bare_pdf(path: Path) -> int:
    import pypdfium2 as pdfium

    pdf, n = pdfium.PdfDocument(path.read_bytes()), 0
    for i in range(len(pdf)):
        page = pdf[i]
        textpage = page.get_textpage()
        n += len(textpage.get_text_range())
        textpage.close()
        page.close()
    pdf.close()
    return n


def bare_docx(path: Path) -> int:
    import docx

    doc = docx.Document(io.BytesIO(path.read_bytes()))
    return sum(len(p.text) for p in doc.paragraphs) + sum(len(c.text) for t in doc.tables for r in t.rows for c in r.cells)


def bare_html(path: Path) -> int:
    from lcrag.documents.html import extract_main

    return len(extract_main(path.read_text(encoding="utf-8", errors="replace")) or "")


def bare_epub(path: Path) -> int:
    from lcrag.documents.html import extract_main

    with zipfile.ZipFile(io.BytesIO(path.read_bytes())) as book:
        return sum(len(extract_main(book.read(n)) or "") for n in book.namelist() if n.endswith(".xhtml"))


def bare_markdown(path: Path) -> int:
    from markdown_it import MarkdownIt

    return len(MarkdownIt("commonmark").parse(path.read_text(encoding="utf-8")))


def throughput(files: dict[str, Path], rounds: int) -> str:
    from lcrag.documents import load_document

    bare = {"pdf": bare_pdf, "docx": bare_docx, "html": bare_html, "epub": bare_epub, "markdown": bare_markdown}
    table = []
    for kind, path in files.items():
        ours, library = [], []
        for _ in range(rounds):  # alternating, so a load that comes and goes hits both alike
            started = time.perf_counter()
            bare[kind](path)
            library.append(time.perf_counter() - started)
            started = time.perf_counter()
            document = load_document(path)
            ours.append(time.perf_counter() - started)
        size = path.stat().st_size
        table.append([kind, path.name, f"{size / 1e6:.2f}", f"{len(document.text):,}", f"{min(library):.3f}",
                      f"{min(ours):.3f}", f"{size / 1e6 / min(ours):.2f}", f"{100 * min(library) / min(ours):.0f}%"])
        log(f"extraction {kind}: {table[-1]}")
    return md_table(["format", "file", "MB", "characters extracted", "bare library s (best)", "lcrag loader s (best)",
                     "lcrag MB/s", "throughput vs bare"], table)


def extraction_files(args) -> dict[str, Path]:
    files = {"pdf": args.pdf}
    work = Path(tempfile.mkdtemp(prefix="lcrag-documents-"))  # derived files: never committed
    if args.html:
        files |= {"html": args.html, "docx": docx_from_html(args.html, work / f"{args.html.stem}.docx")}
    if args.chapters:
        files["epub"] = epub_from_pages(sorted(args.chapters.glob("*.html"))[:40], work / "chapters.epub")
    files["markdown"] = args.markdown
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pdf", type=Path, required=True)
    parser.add_argument("--html", type=Path, help="an HTML page (bash.html from bash-doc)")
    parser.add_argument("--chapters", type=Path, help="a folder of HTML pages that become an EPUB's chapters")
    parser.add_argument("--markdown", type=Path, default=ROOT / "README.md")
    parser.add_argument("--questions", type=Path, default=ROOT / "benchmarks/documents/bashref_questions.jsonl")
    parser.add_argument("--readers", default="smollm2")
    parser.add_argument("--context-window", type=int, default=8192)
    parser.add_argument("--price-as", default="gpt-4o-mini")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--skip-questions", action="store_true")
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions (for a slower reader)")
    parser.add_argument("--skip-extraction", action="store_true")
    parser.add_argument("--recite", help="recompute the citations of this strategy's recorded rows (cached answers)")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks/results/documents")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    if not args.skip_extraction:
        extraction = throughput(extraction_files(args), args.rounds)
        (args.out / "extraction.md").write_text(f"Machine: {machine()}\n\n{extraction}\n", encoding="utf-8")
        print(extraction)
    if args.recite:
        recite(args, load_questions(args.questions), args.recite)
    elif not args.skip_questions:
        run_questions(args, load_questions(args.questions)[:args.limit])
    rows = [json.loads(line) for line in (args.out / "rows.jsonl").read_text().splitlines() if line.strip()] \
        if (args.out / "rows.jsonl").exists() else []
    summary = summarise(rows, args.price_as)
    (args.out / "summary.md").write_text(f"Machine: {machine()}\n\n{summary}\n", encoding="utf-8")
    print(summary)


if __name__ == "__main__":
    main()
