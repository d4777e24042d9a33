"""LaRA as a dataset: loading its layout (fixtures written here, never LaRA's own files), its prompts byte for byte,
its chunk format, and its RAG chunker (LlamaIndex's SentenceSplitter)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from lcrag.assembly import ContextAssembler
from lcrag.chunking import make_chunker
from lcrag.chunking.sentence_splitter import SentenceSplitterChunker, _Punkt
from lcrag.pipeline.config import parse_chunking
from lcrag.core.errors import DatasetError, InputError, LcragError
from lcrag.evaluation.datasets import EvalItem, detect_format, load_dataset
from lcrag.evaluation.prompts import prompts_for, with_unanswerable
from lcrag.evaluation.prompts_lara import LARA_CHUNK_FORMAT, LARA_FULL_TEMPLATES, LARA_RAG_TEMPLATES
from lcrag.readers.base import GenerationParams
from lcrag.retrieval import DocumentIndex
from lcrag.strategies import PromptSet, QueryContext, make_strategy
from lcrag.core.types import Chunk, Document, ScoredChunk

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


def upstream_rag_context(texts: list[str]) -> str:
    """eval_rag.py's loop, as written there."""
    context = ''
    for i, node_txt in enumerate(texts):
        context += f'chunk {i}: {node_txt}.' + '\n\n'
    return context


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


def test_loads_a_lara_root(lara, caplog):
    with caplog.at_level(logging.WARNING):
        items = load_dataset(lara).items
    assert [i.id for i in items] == EXPECTED_IDS
    first = items[0]
    assert (first.dataset, first.task, first.metric, first.question, first.answers) == (
        "lara-32k", "lara_book", "lara", "Who signed the register?", ["The clergyman."])
    assert first.context == BOOK  # the document, not the record's "context" excerpt
    assert first.meta == {"type": "book", "task": "location", "level": "location", "length": "32k",
                          "file": "A Tiny Carol.txt", "document": "32k/book/A Tiny Carol.txt", "context_order": 0,
                          "record_type": "novelette_fake"}
    by_id = {i.id: i for i in items}
    assert by_id["32k_book_comp/1"].meta["comp_parts"] == [0, 2]
    assert by_id["32k_paper_reasoning/1"].meta["context_order"] == "full"
    assert by_id["32k_financial_hallu/1"].metric == "lara_hallu" and by_id["32k_financial_hallu/1"].task == "lara_financial"
    # read as LaRA reads it: UTF-8, the BOM kept, universal newlines
    assert by_id["32k_financial_hallu/1"].context == "\ufeffAcme, Inc. had revenue of $5 million in 2023.\nIts CEO is J. Doe.\n"
    # one str per document, shared by its questions
    assert items[0].context is items[1].context is items[2].context
    assert by_id["128k_book_location/1"].context is by_id["128k_book_hallu/1"].context
    assert by_id["128k_book_hallu/1"].dataset == "lara-128k"


def test_rebuilds_a_split_from_predictions_and_reports_gaps(lara, caplog):
    with caplog.at_level(logging.WARNING):
        items = {i.id: i for i in load_dataset(lara).items}
    rebuilt = items["128k_book_location/2"]
    stand_in = lara / "predictions" / "model-a" / "full_preds_model-a_128k_book_location.jsonl"
    assert (rebuilt.question, rebuilt.answers, rebuilt.task, rebuilt.metric) == (
        "Where did Ishmael go (1)?", ["To sea."], "lara_book", "lara")
    assert rebuilt.meta["context_order"] == 1 and rebuilt.meta["rebuilt_from"] == str(stand_in)
    messages = [r.getMessage() for r in caplog.records]
    assert any("128k_book_location.jsonl" in m and "rebuilt from" in m and str(stand_in) in m for m in messages)
    # a question about a document the dataset lacks: skipped and counted, not fatal
    assert "128k_book_hallu/2" not in items
    assert any("skipped 1 question(s)" in m and "128k/book/Missing Stone.txt (1)" in m for m in messages)
    # a question asked twice of one document: both kept, counted, marked
    assert items["32k_financial_hallu/2"].meta["duplicate_of"] == "32k_financial_hallu/1"
    assert "duplicate_of" not in items["32k_financial_hallu/1"].meta
    assert any("1 question(s) asked again" in m and "32k_financial_hallu/2 = 32k_financial_hallu/1" in m
               for m in messages)


def test_datasets_folder_query_folder_and_one_file(lara):
    assert [i.id for i in load_dataset(lara / "datasets").items] == EXPECTED_IDS
    assert [i.id for i in load_dataset(lara / "datasets" / "query").items] == EXPECTED_IDS
    one = lara / "datasets" / "query" / "32k_book_location.jsonl"
    assert detect_format(one) == "lara"
    assert [i.id for i in load_dataset(one).items] == ["32k_book_location/1", "32k_book_location/2"]
    assert [i.id for i in load_dataset(one, fmt="lara").items] == ["32k_book_location/1", "32k_book_location/2"]
    assert [i.id for i in load_dataset(lara, limit=1).items] == [
        "32k_book_location/1", "32k_book_comp/1", "32k_financial_hallu/1", "32k_paper_reasoning/1",
        "128k_book_location/1", "128k_book_hallu/1"]


@pytest.mark.parametrize("line, message", [
    ("{not json", "invalid JSON"),
    ('["a list"]', "a record must be a JSON object, not a list"),
    (json.dumps({"level": "location", "file": "A Tiny Carol.txt", "context_order": 0, "answer": "x"}),
     "missing field(s) 'question'"),
    (json.dumps(q("b", "location", "A Tiny Carol.txt", "Q?", "A.") | {"context_order": "middle"}),
     "'context_order' must be an integer or \"full\", not a string 'middle'"),
    (json.dumps(q("b", "location", "A Tiny Carol.txt", "Q?", "A.") | {"level": "hallu"}),
     "'level' is 'hallu', but the file holds 32k book location questions"),
    (json.dumps(q("b", "location", "../../secret.txt", "Q?", "A.")), "'file' must be a file name in 32k/book/"),
    (json.dumps(q("b", "location", "A Tiny Carol.txt", "Q?", ["A."])), "'answer' must be a string, not a list"),
])
def test_bad_records_name_file_and_line(lara, line, message):
    path = lara / "datasets" / "query" / "32k_book_location.jsonl"
    path.write_text(path.read_text(encoding="utf-8") + line + "\n", encoding="utf-8")
    with pytest.raises(DatasetError) as err:
        load_dataset(lara)
    assert str(err.value).startswith(f"{path}:3: {message}")
    report = load_dataset(lara, skip_bad=True)
    assert report.skipped == 1 and report.errors[0].startswith(f"{path}:3: ")
    assert [i.id for i in report.items] == EXPECTED_IDS


def test_a_file_in_the_query_folder_that_is_not_a_split_is_refused(lara):
    jsonl(lara / "datasets" / "query" / "notes.jsonl", [{}])
    with pytest.raises(DatasetError, match="notes.jsonl is not a LaRA query file name"):
        load_dataset(lara)


# -- prompts -----------------------------------------------------------------------------------------------------
def test_templates_are_upstreams_byte_for_byte():
    assert LARA_FULL_TEMPLATES == UPSTREAM_FULL and LARA_RAG_TEMPLATES == UPSTREAM_RAG
    assert LARA_CHUNK_FORMAT.format(rank=3, text="T", index=9) == "chunk 3: T." + "\n\n"


@pytest.mark.parametrize("kind", ["book", "financial", "paper"])
def test_prompts_for_lara_items(lara, kind):
    items = [i for i in load_dataset(lara).items if i.meta["type"] == kind]
    prompts, max_tokens = prompts_for(items[0], PromptSet())
    assert max_tokens == 256
    assert (prompts.lc, prompts.rag) == (UPSTREAM_FULL[kind], UPSTREAM_RAG[kind])
    assert prompts.self_route == with_unanswerable(UPSTREAM_RAG[kind]) and "unanswerable" in prompts.self_route
    assert prompts.chunk_format == LARA_CHUNK_FORMAT
    question, document = items[0].question, items[0].context
    assert prompts.messages(prompts.lc, question, document) == [
        {"role": "system", "content": UPSTREAM_SYSTEM},
        {"role": "user", "content": UPSTREAM_FULL[kind].format(context=document, question=question)}]


def test_lara_rag_prompt_is_upstreams_with_its_chunk_format(tmp_path, whitespace_tokenizer, scripted_reader):
    document = Document(DOCS["128k/book/Long Book.txt"] + " The white whale was called Moby Dick. " + "Filler text. " * 50)
    item_prompts, _ = prompts_for(EvalItem("x", "lara-128k", "", ["a"], document.text, task="lara_book"))
    index = DocumentIndex(document, SentenceSplitterChunker(whitespace_tokenizer, 30, 5), tmp_path)
    reader = scripted_reader(lambda m: "Moby Dick")
    ctx = QueryContext(document=document, reader=reader, index=lambda: index, retriever="bm25",
                       assembler=ContextAssembler(k=3), prompts=item_prompts, params=GenerationParams(max_tokens=16))
    question = "Filler text: what was the whale called?"
    answer = make_strategy("rag").run(ctx, question)
    texts = [document.text[c.start:c.end] for c in answer.chunks]  # in retrieval (score) order
    assert len(texts) == 3 and "Moby Dick" in texts[0]
    assert reader.calls[0] == [
        {"role": "system", "content": UPSTREAM_SYSTEM},
        {"role": "user", "content": UPSTREAM_RAG["book"].format(context=upstream_rag_context(texts), question=question)}]
    # without a chunk format the assembler's own labels stay
    plain = make_strategy("rag").run(QueryContext(document=document, reader=reader, index=lambda: index,
                                                  assembler=ContextAssembler(k=3), prompts=PromptSet()), "whale?")
    assert "[Chunk " in reader.calls[-1][-1]["content"] and plain.text == "Moby Dick"


def test_assembler_chunk_format_ranks_in_the_order_shown():
    text = "zero one two three"
    chunks = [Chunk(i, s, e, text[s:e]) for i, (s, e) in enumerate([(0, 4), (5, 8), (9, 12), (13, 18)])]
    ranked = [ScoredChunk(chunks[2], 3.0), ScoredChunk(chunks[0], 2.0), ScoredChunk(chunks[3], 1.0)]
    score = ContextAssembler(k=2, chunk_format="[{rank}/{index}] {text};").run(ranked, text)
    assert score.text == "[0/2] two;[1/0] zero;"
    document = ContextAssembler(k=3, order="document", chunk_format=LARA_CHUNK_FORMAT).run(ranked, text)
    assert document.text == upstream_rag_context(["zero", "two", "three"])
    for bad in ("{rank}", "{text} {other}", "{text!r}", "{text"):
        with pytest.raises(InputError, match="chunk_format"):
            ContextAssembler(chunk_format=bad)
        with pytest.raises(InputError):
            PromptSet(chunk_format=bad)


def test_prompt_identity_is_unchanged_without_a_chunk_format():
    from dataclasses import asdict

    assert PromptSet().identity() == {k: v for k, v in asdict(PromptSet()).items() if k != "chunk_format"}
    assert PromptSet(chunk_format=LARA_CHUNK_FORMAT).identity()["chunk_format"] == LARA_CHUNK_FORMAT


# -- the chunker -------------------------------------------------------------------------------------------------
def test_punkt_untrained_sentences():
    text = "Mr. Smith met J. Bach at 5 p.m. on Monday... then left. Why? “Go now.” She went!  "
    sentences = [text[a:b] for a, b in _Punkt().span_tokenize(text)]
    # no abbreviations known: "Mr." and "p.m." end sentences; an initial before a capital and an ellipsis do not
    # (what NLTK 3.10's PunktSentenceTokenizer() gives, but for the curly quotes)
    assert sentences == ["Mr.", "Smith met J. Bach at 5 p.m.", "on Monday... then left.", "Why?", "“Go now.” She went!"]
    curly = [text[a:b] for a, b in _Punkt(curly_quotes=True).span_tokenize(text)]
    assert curly == sentences[:-1] + ["“Go now.”", "She went!"]  # NLTK 3.10 ends a sentence at .”


def test_sentence_splitter_chunks(whitespace_tokenizer):
    sentence = "One two three four five six seven eight nine. "
    text = sentence * 12 + "\n\n\n" + "A clause, another clause, " * 20 + "end."
    doc = Document(text)
    chunks = SentenceSplitterChunker(whitespace_tokenizer, size=40, overlap=10).run(doc)
    assert [c.index for c in chunks] == list(range(len(chunks)))
    for c in chunks:
        assert doc.text[c.start:c.end] == c.text == c.text.strip()
        assert len(whitespace_tokenizer.encode(c.text)) <= 40
    # whole sentences of 9 tokens: four fit in 40, and one of them (9 <= 10) is carried over as the overlap
    assert chunks[0].text == (sentence * 4).strip()
    assert chunks[1].text == (sentence * 4).strip() and chunks[1].start == 3 * len(sentence)  # the 4th sentence again
    # the long clause list is no sentence: it is cut at the regex's commas
    assert all(c.text.endswith((",", "end.")) for c in chunks if "clause" in c.text)
    assert SentenceSplitterChunker(whitespace_tokenizer, 40, 10).key == "sentence-splitter:whitespace-test:40:10"


def test_sentence_splitter_spec(whitespace_tokenizer):
    assert parse_chunking("sentence-splitter:600:100") == ("sentence-splitter", 600, 100)
    assert parse_chunking("sentence-splitter") == ("sentence-splitter", None, None)
    default = make_chunker("sentence-splitter", None, whitespace_tokenizer)
    assert (default.size, default.overlap) == (600, 100)
    assert make_chunker("sentence-splitter", 300, whitespace_tokenizer, 50).key.endswith(":300:50")
    assert make_chunker("words", 10).key == "words:10:0"  # other units keep no overlap unless given
    for bad in ("sentences:300:10", "sentence-splitter:50", "sentence-splitter:600:600", "sentence-splitter:600:x"):
        with pytest.raises(LcragError):
            parse_chunking(bad)
    with pytest.raises(InputError, match="tokenizer"):
        make_chunker("sentence-splitter")
