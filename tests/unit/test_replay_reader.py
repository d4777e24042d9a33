"""The replay reader (``replay:SOURCE``): recorded answers by (question, mode) on their document, through a real
evaluation run; the checks on recordings; the ``recordings`` dataset format; the token-count cache."""

import logging
import re
from dataclasses import replace
from pathlib import Path

import pytest
from replay_recordings import DOCS, RECORDS, SHARED, logs, tokenizer_json, write_jsonl  # noqa: F401 - fixtures

from lcrag.core.errors import InputError
from lcrag.evaluation.datasets import detect_format, load_dataset
from lcrag.evaluation.runner import EvalRunner, expand_configs
from lcrag.pipeline.pipeline import Settings
from lcrag.readers import make_reader
from lcrag.readers.call_context import Asking
from lcrag.readers.base import GenerationParams
from lcrag.readers.replay import TEMPLATE_TOKENS_PER_MESSAGE, Recordings, ReplayReader, TokenizerStandIn
from lcrag.core.errors import DatasetError
from lcrag.strategies.base import QueryContext, Timer, call_reader
from lcrag.core.types import Document
from tests.conftest import WhitespaceTokenizer


def replay(source: Path, counts: Path | None = None) -> ReplayReader:
    return ReplayReader(Recordings.load(source), TokenizerStandIn(WhitespaceTokenizer(), "whitespace"), counts)


def stand_in_count(messages) -> int:
    tok = WhitespaceTokenizer()
    return sum(len(tok.encode(m["content"])) + TEMPLATE_TOKENS_PER_MESSAGE for m in messages)


class Spy:
    """Records the messages of every call the reader answers."""

    def __init__(self, reader):
        self.reader, self.seen = reader, []
        complete = reader.complete

        def spied(messages, params):
            completion = complete(messages, params)
            self.seen.append((messages, completion))
            return completion

        reader.complete = spied


def run_eval(logs: Path, out: Path, reader) -> list[dict]:
    items = load_dataset(logs).items
    runner = EvalRunner(items, expand_configs(["lc", "self-route"], ["bm25"], [2], []), out,
                        Settings(chunking="words:20"), reader=reader, dataset_path=logs)
    return runner.run()


# -- a real evaluation run ------------------------------------------------------------------------------------------
def test_eval_writes_lc_and_self_route_rows_from_the_recordings(logs, tmp_path):
    reader = replay(logs, tmp_path / "counts.sqlite")
    spy = Spy(reader)
    rows = {(r["question"], r["answers"][0], r["config"]): r for r in run_eval(logs, tmp_path / "run", reader)}
    assert len(rows) == 6  # 3 distinct (question, document) x 2 configs
    lc, rag = rows[(SHARED, "K1", "lc")], rows[(SHARED, "K1", "self-route|bm25|k2")]
    assert (lc["prediction"], lc["route"]) == ("K1 (alpha, lc)", "lc")
    assert (rag["prediction"], rag["route"]) == ("K1 (alpha, rag)", "rag")
    assert rag["chunk_scores"] and rag["decline_probability"] is None  # lcrag's retrieval; no log-probabilities
    # the same question on the other document: that document's recordings
    assert rows[(SHARED, "K2", "lc")]["prediction"] == "K2 (beta, lc)"
    assert rows[(SHARED, "K2", "self-route|bm25|k2")]["prediction"] == "K2 (beta, rag)"
    # a recorded RAG decline sends Self-Route to the recorded LC answer, both calls billed
    routed = rows[("Who founded Alpha?", "Ada", "self-route|bm25|k2")]
    assert (routed["prediction"], routed["route"], routed["raw_route_answer"]) == ("Ada", "lc", "unanswerable")
    assert [c["stage"] for c in routed["calls"]] == ["route", "answer"] and routed["score"] == 1.0
    # every call's prompt tokens are the stand-in tokenizer's count of the prompt it was sent; the answer's its own
    assert len(spy.seen) == 6 and routed["calls"][1]["from_cache"]  # its LC call is the lc row's, from the run cache
    for messages, completion in spy.seen:
        assert completion.prompt_tokens == stand_in_count(messages) > 0
        assert completion.completion_tokens == len(WhitespaceTokenizer().encode(completion.text))
        assert completion.model == "replay:big-model" and completion.logprobs is None
    assert lc["prompt_tokens"] > len(DOCS["docs/alpha.txt"].split())  # LC read the whole document, never cut
    assert lc["truncated_tokens"] == 0


def test_replay_reader_from_its_spec_and_the_completion_cache(logs, tokenizer_json, tmp_path):
    reader = make_reader(f"replay:{logs}", tokenizer=str(tokenizer_json))
    assert reader.model == "replay:big-model" and reader.context_window == 10_000_000
    assert "tokenizer.json" in reader.stand_in_tokenizer
    sha = __import__("hashlib").sha256(logs.read_bytes()).hexdigest()
    assert sha in reader.identity  # two recordings never share cached answers
    out = tmp_path / "run"
    first = run_eval(logs, out, reader)
    (out / "rows.jsonl").unlink()  # answered again: from the run's completion cache, not the reader
    again = run_eval(logs, out, make_reader(f"replay:{logs}", tokenizer=str(tokenizer_json)))
    assert [r["prediction"] for r in again] == [r["prediction"] for r in first]
    assert all(c["from_cache"] for r in again for c in r["calls"])
    assert [r["prompt_tokens"] for r in again] == [r["prompt_tokens"] for r in first]
    with pytest.raises(InputError, match="no --context-window"):
        make_reader(f"replay:{logs}", tokenizer=str(tokenizer_json), context_window=4096)
    with pytest.raises(InputError, match="does not exist"):
        make_reader(f"replay:{tmp_path / 'nowhere.jsonl'}")


# -- matching a call to its recording -------------------------------------------------------------------------------
def answer(reader, question, document, route):
    """An answering call for ``question`` on ``route``, as a strategy makes one: what it is for in its parameters."""
    params = GenerationParams(asking=Asking(question, document, route))
    return reader.complete([{"role": "user", "content": f"{question}"}], params).text


def test_a_question_on_two_documents_is_matched_by_text_or_path(logs, tmp_path):
    reader = replay(logs)
    assert answer(reader, SHARED, Document(DOCS["docs/beta.txt"]), "rag") == "K2 (beta, rag)"
    assert answer(reader, SHARED, Document(DOCS["docs/alpha.txt"]), "lc") == "K1 (alpha, lc)"
    # a document with a source path: its path names it (a suffix of the recorded one), whatever its text
    assert answer(reader, SHARED, Document("extracted text", source="docs/beta.txt"), "lc") == "K2 (beta, lc)"
    assert answer(reader, SHARED, Document("x", source=str(tmp_path / "docs/alpha.txt")), "lc") == "K1 (alpha, lc)"
    with pytest.raises(InputError, match="recorded on 2 documents .* none of which has this document's text"):
        answer(reader, SHARED, Document("another text"), "lc")


def test_calls_that_are_not_answering_calls_are_refused(logs):
    reader = replay(logs)
    # e.g. a summariser's call while a question is answered: its parameters name no question
    with pytest.raises(InputError, match="this call is for no question .*summariser"):
        reader.complete([{"role": "user", "content": "x"}], GenerationParams())
    with pytest.raises(InputError, match="'rag-wide' call has none"):
        answer(reader, SHARED, Document(DOCS["docs/alpha.txt"]), "rag-wide")
    with pytest.raises(InputError, match="a call on no route has none"):
        answer(reader, SHARED, Document(DOCS["docs/alpha.txt"]), None)
    # a strategy's own route is the default of its calls
    assert Asking("Who founded Alpha?", None, "lc").on_route(None).route == "lc"


def test_the_question_reaches_the_reader_through_its_parameters_not_ambient_state(logs):
    """A strategy run by the pipeline gives each call the question it answers: the replay reader finds it in the
    call's parameters, with no context variable set anywhere (issue 45, item 6)."""
    import contextvars

    reader = replay(logs)
    seen: list[GenerationParams] = []
    complete = reader.complete
    reader.complete = lambda messages, params: seen.append(params) or complete(messages, params)
    ctx = QueryContext(Document(DOCS["docs/alpha.txt"]), reader, index=lambda: None,
                       asking=Asking("Who founded Alpha?", Document(DOCS["docs/alpha.txt"]), "lc"))
    # run in a fresh, empty context: nothing ambient to read the question from
    text, call = contextvars.Context().run(call_reader, ctx, "answer", [{"role": "user", "content": "x"}], Timer())
    assert text == "Ada" and seen[0].asking.question == "Who founded Alpha?" and seen[0].asking.route == "lc"
    # and the same reader called without the question in its parameters has none to answer
    with pytest.raises(InputError, match="no question"):
        call_reader(replace(ctx, asking=None), "answer", [{"role": "user", "content": "x"}], Timer())


# -- checking recordings --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("bad, message", [
    ({"question": "Q?", "document": "docs/alpha.txt", "mode": "lc"}, "missing field(s) 'prediction'"),
    ({"question": "Q?", "document": "docs/alpha.txt", "mode": "full", "prediction": "x"},
     "'mode' must be 'lc' or 'rag', not 'full'"),
    ({"question": "Q?", "document": "docs/gone.txt", "mode": "lc", "prediction": "x"}, "docs/gone.txt does not exist"),
    ({"question": "Q?", "document": "docs/alpha.txt", "mode": "lc", "prediction": 3}, "'prediction' must be a string"),
    ("{not json", "invalid JSON"),
])
def test_a_bad_record_is_one_line_naming_file_and_line(logs, bad, message):
    write_jsonl(logs, [RECORDS[0], bad])
    with pytest.raises(InputError) as caught:
        Recordings.load(logs)
    assert str(caught.value).startswith(f"{logs}:2: ") and message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_duplicates_identical_kept_once_conflicting_refused_naming_both_lines(logs):
    write_jsonl(logs, [RECORDS[0], RECORDS[1], RECORDS[0]])
    assert Recordings.load(logs).counts()["duplicates"] == 1
    write_jsonl(logs, [RECORDS[0], RECORDS[1], {**RECORDS[0], "prediction": "K9"}])
    with pytest.raises(InputError, match=rf"^{logs}:3: a different prediction .* recorded at {logs}:1$"):
        Recordings.load(logs)


def test_empty_predictions_are_skipped_counted_and_an_error_when_asked(logs, caplog):
    write_jsonl(logs, [RECORDS[0], {**RECORDS[1], "prediction": None}, {**RECORDS[2], "prediction": ""},
                       {**RECORDS[3], "prediction": False}])
    with caplog.at_level(logging.WARNING):
        reader = replay(logs)
    skipped = [r.message for r in caplog.records if "empty prediction" in r.message]
    assert len(skipped) == 1 and "skipped 3 recorded answer(s)" in skipped[0] and "logs.jsonl: 3" in skipped[0]
    assert reader.recordings.counts() == {"lc": 1, "rag": 0, "skipped": 3, "missing_documents": 0, "duplicates": 0,
                                          "conflicts": 0}
    assert any("standing in" in r.message and "1 lc and 0 rag" in r.message for r in caplog.records)
    with pytest.raises(InputError, match=re.escape(f"no rag recording of the question '{SHARED}' on alpha.txt in "
                                                   f"{logs}: its prediction at {logs}:2 is empty")):
        answer(reader, SHARED, Document(DOCS["docs/alpha.txt"]), "rag")


# -- a LaRA predictions folder --------------------------------------------------------------------------------------
def lara(tmp_path) -> Path:
    """LARA_ROOT/datasets/{32k,128k}/book/ and predictions/m1/, one question asked on both lengths."""
    root = tmp_path / "lara"
    for length, text in (("32k", DOCS["docs/alpha.txt"]), ("128k", DOCS["docs/beta.txt"])):
        (root / "datasets" / length / "book").mkdir(parents=True)
        (root / "datasets" / length / "book" / "Book.txt").write_text(text, encoding="utf-8")
    preds = root / "predictions" / "m1"
    preds.mkdir(parents=True)
    for kind in ("full", "rag"):
        for length in ("32k", "128k"):
            records = [{"type": "novel", "level": "location", "file": "Book.txt", "context_order": 0,
                        "question": SHARED, "prediction": f"{kind} {length}", "ground_truth": "K"},
                       {"file": "Book.txt", "question": "Failed?", "prediction": False, "ground_truth": "x"}]
            if length == "32k":
                records += [{"file": "Gone.txt", "question": "Missing?", "prediction": "y", "ground_truth": "x"}]
            if length == "128k":
                records += [{"file": "Book.txt", "question": "Twice?", "prediction": "one", "ground_truth": "a"},
                            {"file": "Book.txt", "question": "Twice?", "prediction": "two", "ground_truth": "b"}]
            write_jsonl(preds / f"{kind}_preds_other-name_{length}_book_location.jsonl", records)
    return preds


def test_a_lara_predictions_folder(tmp_path, caplog):
    with caplog.at_level(logging.WARNING):
        reader = replay(lara(tmp_path))
    assert reader.model == "replay:m1"  # the folder names the model, whatever the files say
    assert reader.recordings.counts() == {"lc": 2, "rag": 2, "skipped": 4, "missing_documents": 2, "duplicates": 0,
                                          "conflicts": 2}
    assert answer(reader, SHARED, Document(DOCS["docs/beta.txt"]), "lc") == "full 128k"
    assert answer(reader, SHARED, Document(DOCS["docs/alpha.txt"]), "rag") == "rag 32k"
    assert answer(reader, SHARED, Document("x", source="32k/book/Book.txt"), "lc") == "full 32k"
    with pytest.raises(InputError, match="no lc recording of the question 'Failed[?]' .*: its prediction at .*"
                                         "full_preds_other-name_128k_book_location.jsonl:2 is empty"):
        answer(reader, "Failed?", Document(DOCS["docs/beta.txt"]), "lc")
    with pytest.raises(InputError, match=r"recorded at .*_128k_book_location.jsonl:3 and .*:4 with predictions that "
                                         r"differ"):
        answer(reader, "Twice?", None, "lc")
    with pytest.raises(InputError, match="Gone.txt does not exist"):
        answer(reader, "Missing?", None, "rag")
    warnings = [r.message for r in caplog.records]
    assert sum("empty prediction" in m for m in warnings) == 1 and sum("do not exist" in m for m in warnings) == 1


# -- the recordings dataset format ----------------------------------------------------------------------------------
def test_the_recordings_file_is_a_dataset_of_its_distinct_questions(logs):
    assert detect_format(logs) == "recordings"
    items = load_dataset(logs).items
    assert [(i.id, i.question, i.answers, i.meta["document"]) for i in items] == [
        ("logs/1", SHARED, ["K1"], "docs/alpha.txt"), ("logs/3", SHARED, ["K2"], "docs/beta.txt"),
        ("logs/5", "Who founded Alpha?", ["Ada"], "docs/alpha.txt")]
    assert items[0].context == DOCS["docs/alpha.txt"] and items[2].meta["recorded_lines"] == [5, 6]


def test_the_recordings_dataset_refuses_what_it_cannot_score(logs):
    write_jsonl(logs, [RECORDS[1], RECORDS[4]])  # line 1 has no gold answer anywhere
    with pytest.raises(DatasetError, match=rf"^{logs}:1: no gold answer .*\(lines 1\)"):
        load_dataset(logs)
    report = load_dataset(logs, skip_bad=True)
    assert [i.question for i in report.items] == ["Who founded Alpha?"] and report.skipped == 1
    write_jsonl(logs, [RECORDS[0], {**RECORDS[1], "answer": "K7"}])
    with pytest.raises(DatasetError, match=rf"^{logs}:2: gold answers differ from those of line 1"):
        load_dataset(logs)
    write_jsonl(logs, [RECORDS[0], {**RECORDS[1], "mode": "long"}])
    with pytest.raises(DatasetError, match=rf"^{logs}:2: 'mode' must be 'lc' or 'rag'"):
        load_dataset(logs)


# -- token counts ---------------------------------------------------------------------------------------------------
class CountingStandIn(TokenizerStandIn):
    def __init__(self):
        super().__init__(WhitespaceTokenizer(), "whitespace")
        self.counted = 0

    def count_prompt_tokens(self, messages, tokenizer):
        self.counted += 1
        return super().count_prompt_tokens(messages, tokenizer)


def test_prompt_token_counts_are_kept_on_disk_for_the_next_reader(logs, tmp_path):
    counts = tmp_path / "counts.sqlite"
    long_prompt = [{"role": "user", "content": DOCS["docs/alpha.txt"] * 3}]
    first = ReplayReader(Recordings.load(logs), CountingStandIn(), counts)
    n = first.count_prompt_tokens(long_prompt)
    assert n == stand_in_count(long_prompt) and first.stand_in.counted == 1
    first.close()
    second = ReplayReader(Recordings.load(logs), CountingStandIn(), counts)  # another process, another reader
    assert second.count_prompt_tokens(long_prompt) == n and second.stand_in.counted == 0
    # a long text's ids: the length from the cache, the ids themselves computed only when read
    text = long_prompt[0]["content"]
    second.tokenizer.encode(text)
    third = ReplayReader(Recordings.load(logs), CountingStandIn(), counts)
    ids = third.tokenizer.encode(text)
    assert third.tokenizer._inner is None and len(ids) == len(WhitespaceTokenizer().encode(text))
    assert third.tokenizer.decode(ids[:3]) == " ".join(text.split()[:3])
