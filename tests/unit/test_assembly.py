import pytest

from lcrag.assembly import ContextAssembler, truncate_middle
from lcrag.core.errors import InputError
from lcrag.core.types import Chunk, ScoredChunk

TEXT = "zero one two three four five six seven eight nine"


def ranked():
    words = TEXT.split()
    chunks, pos = [], 0
    for i, w in enumerate(words):
        start = TEXT.index(w, pos)
        chunks.append(Chunk(i, start, start + len(w), w))
        pos = start + len(w)
    # best first: 7, 2, 9, 0
    return [ScoredChunk(chunks[i], s) for i, s in [(7, 4.0), (2, 3.0), (9, 2.0), (0, 1.0)]]


def test_score_order_prefixes_chunk_index():
    ctx = ContextAssembler(k=3, order="score").run(ranked(), TEXT)
    assert ctx.text == "[Chunk 7] seven\n\n[Chunk 2] two\n\n[Chunk 9] nine"
    assert [c.index for c in ctx.chunks] == [7, 2, 9]


def test_document_order_keeps_position():
    ctx = ContextAssembler(k=3, order="document").run(ranked(), TEXT)
    assert ctx.text == "two\n\nseven\n\nnine"
    assert [c.index for c in ctx.chunks] == [2, 7, 9]
    assert [c.score for c in ctx.chunks] == [3.0, 4.0, 2.0]


def test_budget_takes_best_chunks_that_fit():
    counts = {7: 5, 2: 3, 9: 4, 0: 1}
    ctx = ContextAssembler(k=None, budget=9, order="score").run(ranked(), TEXT, lambda cs: [counts[c.index] for c in cs])
    assert [c.index for c in ctx.chunks] == [7, 2]
    assert ctx.chunk_tokens == 8
    ctx = ContextAssembler(k=None, budget=12, order="document").run(ranked(), TEXT, lambda cs: [counts[c.index] for c in cs])
    assert [c.index for c in ctx.chunks] == [2, 7, 9]


def test_bad_assembly_settings():
    with pytest.raises(InputError):
        ContextAssembler(order="random")
    with pytest.raises(InputError):
        ContextAssembler(k=0)
    with pytest.raises(InputError):
        ContextAssembler(budget=0)


def test_middle_truncation_exact(whitespace_tokenizer):
    text = " ".join(f"w{i}" for i in range(100))
    out = truncate_middle(text, whitespace_tokenizer, 10)
    assert out.original_tokens == 100
    assert out.kept_tokens == 10 and out.cut_tokens == 90
    assert out.text == "w0 w1 w2 w3 w4 w95 w96 w97 w98 w99"
    # odd limits keep 2 * (limit // 2) tokens, as LongBench does
    assert truncate_middle(text, whitespace_tokenizer, 11).kept_tokens == 10
    # within the limit: unchanged
    assert truncate_middle(text, whitespace_tokenizer, 100).text == text
