from pathlib import Path

import pytest

from lcrag.assembly import ContextAssembler
from lcrag.core.errors import InputError
from lcrag.chunking import WordChunker
from lcrag.readers.base import GenerationParams
from lcrag.retrieval import DocumentIndex
from lcrag.strategies import PromptSet, QueryContext, is_unanswerable, make_strategy
from lcrag.strategies.base import lc_document_limit
from lcrag.core.types import Document

DOC = Document(
    " ".join(["Filler words about nothing in particular."] * 40)
    + " The treasure is buried under the old oak tree. "
    + " ".join(["More filler about the weather and the sea."] * 40)
)


def make_ctx(tmp_path: Path, reader, k=2, window=100_000, max_tokens=16):
    index = DocumentIndex(DOC, WordChunker(20), tmp_path)
    reader.context_window = window
    return QueryContext(
        document=DOC, reader=reader, index=lambda: index, retriever="bm25",
        assembler=ContextAssembler(k=k), prompts=PromptSet(), params=GenerationParams(max_tokens=max_tokens),
    )


@pytest.mark.parametrize("text, declined", [
    ("unanswerable", True), ("Unanswerable.", True), ("  UNANSWERABLE!\n", True), ("The unanswerable", True),
    ("It is unanswerable from the text", False), ("oak tree", False), ("", False),
])
def test_unanswerable_parse(text, declined):
    assert is_unanswerable(text) is declined


def test_self_route_answers_with_rag_when_answerable(tmp_path, scripted_reader):
    reader = scripted_reader(lambda m: "under the old oak tree")
    answer = make_strategy("self-route").run(make_ctx(tmp_path, reader), "Where is the treasure buried?")
    assert answer.route == "rag" and answer.text == "under the old oak tree"
    assert len(reader.calls) == 1 and [c.stage for c in answer.calls] == ["route"]
    assert "unanswerable" in reader.calls[0][-1]["content"]
    assert "treasure is buried" in reader.calls[0][-1]["content"]
    assert len(answer.chunks) == 2


def test_self_route_falls_back_to_lc_when_declined(tmp_path, scripted_reader):
    reader = scripted_reader(lambda m: "Unanswerable." if "unanswerable" in m[-1]["content"] else "oak tree")
    answer = make_strategy("self-route").run(make_ctx(tmp_path, reader), "Where is the treasure buried?")
    assert answer.route == "lc" and answer.text == "oak tree"
    assert answer.raw_route_answer == "Unanswerable."
    assert [c.stage for c in answer.calls] == ["route", "answer"]
    route_tokens, lc_tokens = (c.prompt_tokens for c in answer.calls)
    assert lc_tokens > route_tokens
    assert answer.prompt_tokens == route_tokens + lc_tokens
    assert DOC.text in reader.calls[1][-1]["content"]


def test_lc_puts_document_before_question(tmp_path, scripted_reader):
    reader = scripted_reader()
    make_strategy("lc").run(make_ctx(tmp_path, reader), "Where?")
    prompt = reader.calls[0][-1]["content"]
    assert prompt.index(DOC.text) < prompt.index("Question: Where?")


def test_lc_cuts_the_middle_to_fit_the_window(tmp_path, scripted_reader):
    reader = scripted_reader()
    ctx = make_ctx(tmp_path, reader, window=200, max_tokens=16)
    answer = make_strategy("lc").run(ctx, "Where is the treasure buried?")
    sent = reader.count_prompt_tokens(reader.calls[0])
    doc_tokens = len(reader.tokenizer.encode(DOC.text))
    assert answer.truncated_tokens > 0
    assert sent <= 200 - 16
    # exactly as much as fits was kept (an even number of tokens, LongBench's rule)
    overhead = reader.count_prompt_tokens(ctx.prompts.messages(ctx.prompts.lc, "Where is the treasure buried?", ""))
    limit = lc_document_limit(200, 16, overhead)
    assert 0 <= 200 - 16 - overhead - limit < max(1, (200 - 16 - overhead) // 16)
    assert doc_tokens - answer.truncated_tokens == 2 * (limit // 2)


def test_lc_limit_is_shared_by_questions_of_similar_length():
    assert lc_document_limit(8192, 64, 70) == lc_document_limit(8192, 64, 90) == 7936
    assert lc_document_limit(8192, 64, 70) % 256 == 0
    assert lc_document_limit(100, 10, 20) == 68  # step 4 for a small room
    with pytest.raises(InputError, match="fills"):
        lc_document_limit(100, 50, 60)


def test_op_rag_orders_by_position_and_rag_by_score(tmp_path, scripted_reader):
    reader = scripted_reader()
    ctx = make_ctx(tmp_path, reader, k=3)
    rag = make_strategy("rag").run(ctx, "weather sea treasure")
    op = make_strategy("op-rag").run(ctx, "weather sea treasure")
    assert sorted(c.index for c in rag.chunks) == sorted(c.index for c in op.chunks)
    assert [c.start for c in op.chunks] == sorted(c.start for c in op.chunks)
    assert [c.score for c in rag.chunks] == sorted((c.score for c in rag.chunks), reverse=True)
    assert "[Chunk " in reader.calls[0][-1]["content"] and "[Chunk " not in reader.calls[1][-1]["content"]


def test_self_route_with_document_order(tmp_path, scripted_reader):
    reader = scripted_reader()
    answer = make_strategy("self-route", order="document").run(make_ctx(tmp_path, reader, k=3), "weather sea treasure")
    assert [c.start for c in answer.chunks] == sorted(c.start for c in answer.chunks)


def test_closed_book_sends_no_document(tmp_path, scripted_reader):
    reader = scripted_reader()
    answer = make_strategy("closed-book").run(make_ctx(tmp_path, reader), "Where?")
    assert reader.calls[0][-1]["content"] == "Answer briefly with no explanation, Where?"
    assert answer.chunks == []


def test_custom_prompts_validated(tmp_path):
    with pytest.raises(InputError, match="placeholders"):
        PromptSet(lc="no placeholders here")
    path = tmp_path / "p.json"
    path.write_text('{"closed_book": "Q: {question}"}')
    assert PromptSet.from_file(path).closed_book == "Q: {question}"
    path.write_text('{"nonsense": 1}')
    with pytest.raises(InputError, match="keys"):
        PromptSet.from_file(path)
