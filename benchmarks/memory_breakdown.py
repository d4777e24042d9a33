"""Where a replica's memory per MB of text goes (issue 43, item 7): one collection of the text files under the
folders passed, loaded in this process as `lcrag serve` loads it (the embedded store, BM25 offered: nothing embedded,
the vectors' share is counted from the chunks), and the bytes of each structure that holds its text — every file's
parsed text, the collection's joined text, the chunks' texts — beside the process's RSS growth.

    python benchmarks/memory_breakdown.py ../shared/data/lara/datasets/32k --out benchmarks/results/scale_memory_breakdown.md
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, md_table  # noqa: E402

from lcrag.pipeline.pipeline import Settings  # noqa: E402
from lcrag.service.answering import Answering  # noqa: E402

DIMENSION = 384  # the bundled MiniLM's: a dense or hybrid collection holds one float32 row of it per chunk


def rss_mb() -> float:
    line = next(l for l in Path("/proc/self/status").read_text().splitlines() if l.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def load(folders: list[Path], cache: Path) -> tuple[Answering, object, int]:
    answering = Answering(Settings(cache_dir=cache, strategy="rag", retriever="bm25"), cache / "collections")
    answering.collections.create("held")
    files = sorted(p for folder in folders for p in folder.rglob("*.txt"))
    for number, path in enumerate(files):
        with open(path, "rb") as f:
            answering.collections.add_file("held", f"{number:03d}-{path.stem[:60]}.txt", iter([f.read()]), 1 << 30)
    answering.collections.wait("held", 3600)
    return answering, answering.document("held"), sum(p.stat().st_size for p in files)


def breakdown(document, index) -> list[tuple[str, int, str]]:
    file_texts = [f.document.text for f in document.files]
    shared = sum(part.text is text for (_, part), text in zip(document.parts, file_texts))
    chunks = index.chunks
    return [
        ("files' parsed texts", sum(map(sys.getsizeof, file_texts)), f"{len(file_texts)} files"),
        ("the collection's joined text", sys.getsizeof(document.text),
         f"a copy of them (the parts are the files' own texts: {shared} of {len(file_texts)})"),
        ("chunks' texts", sum(sys.getsizeof(vars(c)["text"]) for c in chunks if "text" in vars(c)),
         f"{len(chunks):,} chunks; {sum('text' not in vars(c) for c in chunks):,} read from their file's text when "
         "asked (lcrag.core.types.SpanChunk), the rest copies of slices"),
        ("chunk objects", sum(sys.getsizeof(c) + sys.getsizeof(vars(c)) for c in chunks), "instances and their fields"),
        ("dense vectors if offered (float32)", len(chunks) * DIMENSION * 4, f"{len(chunks):,} x {DIMENSION} x 4 B"),
        ("... as float16", len(chunks) * DIMENSION * 2, "half"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    before = rss_mb()
    with tempfile.TemporaryDirectory() as tmp:
        answering, document, size = load(args.folders, Path(tmp))
        index = answering.base.index(document)
        index.retriever("bm25")
        after = rss_mb()
        rows = [[what, f"{n / 1e6:.1f}", f"{n / size:.2f}", note] for what, n, note in breakdown(document, index)]
        answering.close()
    command = "python benchmarks/memory_breakdown.py " + " ".join(map(str, args.folders)) + (
        f" --out {args.out}" if args.out else "")
    text = (f"### Where the memory per MB of text goes\n\nMachine: {machine()}. Command: `{command}`.\n"
            f"{size / 1e6:.1f} MB of text files in one collection, loaded in-process as lcrag serve loads it "
            f"(embedded store, BM25): RSS {before:.0f} -> {after:.0f} MB "
            f"(+{(after - before) / (size / 1e6):.1f} MB per MB of text, the parse sandbox's processes apart).\n\n"
            + md_table(["held", "MB", "per byte of file", "what"], rows) + "\n")
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
