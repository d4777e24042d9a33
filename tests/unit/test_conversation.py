"""A follow-up made to stand alone (lcrag.strategies.conversation) and answered by the pipeline: the reader's rewrite,
the joined turns without a model, auto's choice between them, and what the answer tells of it."""

from __future__ import annotations

import pytest

from lcrag.core.errors import InputError
from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.strategies.conversation import AUTO_MIN_PARAMETERS, Turn, standalone
from lcrag.core.types import Document

HISTORY = [{"role": "system", "content": "You answer questions about the tool's manual."},
           {"role": "user", "content": "What does the fit command do?"},
           {"role": "assistant", "content": "It trains a model on the data."}]
FOLLOW_UP = "Which algorithm does it use?"
SECTIONS = {
    "fit": "The fit command trains a model on the rows. Internally fit relies on the L-BFGS algorithm.",
    "plot": "The plot command draws charts. The algorithm it uses to lay out points is a force layout.",
    "export": "The export command writes the model to disk. Export uses the ONNX format for portable files.",
}


def rewriting(text: str):
    """A reader that rewrites a follow-up as ``text`` and answers anything else with "answer"."""
    return lambda messages: text if "Standalone question:" in messages[-1]["content"] else "answer"


def test_a_question_with_no_earlier_user_turn_is_asked_as_it_is(scripted_reader):
    reader = scripted_reader()
    for history in ([], [{"role": "system", "content": "Be brief."}]):
        asked = standalone(reader, history, FOLLOW_UP, "reader")
        assert (asked.method, asked.question, asked.query, asked.calls) == ("as-asked", FOLLOW_UP, FOLLOW_UP, [])
    assert reader.calls == []


def test_joined_turns_need_no_model_and_write_the_conversation_out_for_the_reader(scripted_reader):
    reader = scripted_reader()
    asked = standalone(reader, HISTORY, FOLLOW_UP, "join")
    assert asked.method == "joined" and reader.calls == [] and asked.calls == []
    assert asked.query == "What does the fit command do? Which algorithm does it use?"
    assert asked.question.startswith("The conversation so far:\nSystem: You answer questions about the tool's manual.\n"
                                     "User: What does the fit command do?\nAssistant: It trains a model on the data.")
    assert asked.question.endswith("The question now: Which algorithm does it use?")


def test_the_readers_rewrite_is_both_the_query_and_the_question_and_its_call_is_counted(scripted_reader):
    reader = scripted_reader(rewriting("Standalone question: Which algorithm does the fit command use?\nextra"))
    asked = standalone(reader, HISTORY, FOLLOW_UP, "reader")
    assert asked.method == "condensed"
    assert asked.question == asked.query == "Which algorithm does the fit command use?"
    assert [c.stage for c in asked.calls] == ["condense"] and asked.calls[0].prompt_tokens > 0
    assert "User: What does the fit command do?" in reader.calls[0][-1]["content"]


@pytest.mark.parametrize("rewrite, problem", [("", "it was empty"), ("x " * 2000, "it was longer than a question")])
def test_an_unusable_rewrite_falls_back_to_the_joined_turns_and_says_why(scripted_reader, rewrite, problem):
    asked = standalone(scripted_reader(rewriting(rewrite)), HISTORY, FOLLOW_UP, "reader")
    assert asked.method == "joined" and asked.note.endswith(problem)
    assert [c.stage for c in asked.calls] == ["condense"]  # paid for, so counted


@pytest.mark.parametrize("parameters, method", [(None, "condensed"), (AUTO_MIN_PARAMETERS, "condensed"),
                                                (135_000_000, "joined")])
def test_auto_rewrites_unless_the_reader_says_it_is_small(scripted_reader, parameters, method):
    reader = scripted_reader(rewriting("Which algorithm does the fit command use?"))
    reader.parameter_count = parameters
    assert standalone(reader, HISTORY, FOLLOW_UP, "auto").method == method


def test_only_the_latest_turns_are_read(scripted_reader):
    history = [{"role": "user", "content": f"old question {i}"} for i in range(10)] + HISTORY[1:]
    asked = standalone(scripted_reader(), history, FOLLOW_UP, "join", turns=2)
    assert "old question" not in asked.question and asked.query.startswith("What does the fit command do?")
    assert standalone(scripted_reader(), history, FOLLOW_UP, "join", turns=0).method == "as-asked"


@pytest.mark.parametrize("message, error", [({"role": "tool", "content": "x"}, "role is one of"),
                                            ("hello", "an object with a role"),
                                            ({"role": "user", "content": ["a"]}, "content is text")])
def test_a_malformed_history_is_refused_in_one_line(scripted_reader, message, error):
    with pytest.raises(InputError, match=error):
        standalone(scripted_reader(), [message], FOLLOW_UP)


def test_turns_are_checked_when_made():
    with pytest.raises(InputError, match="role is one of"):
        Turn("developer", "x")


def manual() -> Document:
    return Document("\n\n".join(SECTIONS.values()), source="manual.txt")


@pytest.mark.parametrize("condense, rewrite", [("join", ""), ("reader", "Which solver does the fit command use?")])
def test_the_pipeline_retrieves_for_the_standalone_question_and_tells_how_it_was_made(scripted_reader, tmp_path,
                                                                                      condense, rewrite):
    reader = scripted_reader(rewriting(rewrite))
    pipeline = Pipeline(Settings(cache=False, cache_dir=tmp_path, chunking="sentences:20", k=1, strategy="rag",
                                 condense=condense), reader=reader)
    document = manual()
    read = lambda answer: document.text[answer.chunks[0].start:answer.chunks[0].end]  # noqa: E731
    assert "force layout" in read(pipeline.ask(document, FOLLOW_UP))  # the follow-up alone finds the wrong command
    answer = pipeline.ask(document, FOLLOW_UP, history=HISTORY)
    assert "L-BFGS" in read(answer) and answer.sources[0].file == "manual.txt"
    assert answer.question == FOLLOW_UP and answer.conversation["method"] == {"join": "joined",
                                                                              "reader": "condensed"}[condense]
    assert answer.calls[-1].stage == "answer" and answer.prompt_tokens == sum(c.prompt_tokens for c in answer.calls)
    assert answer.to_dict()["conversation"]["retrieval_query"] == answer.conversation["retrieval_query"]
    if condense == "reader":
        assert [c.stage for c in answer.calls] == ["condense", "answer"]


def test_an_lc_conversation_keeps_the_document_before_the_conversation(scripted_reader, tmp_path):
    """The prompt prefix a reader's KV cache reuses turn after turn: the document, whatever is asked after it."""
    reader = scripted_reader()
    pipeline = Pipeline(Settings(cache=False, cache_dir=tmp_path, strategy="lc", condense="join"), reader=reader)
    pipeline.ask(manual(), "What does the fit command do?")
    pipeline.ask(manual(), FOLLOW_UP, history=HISTORY)
    first, second = (call[-1]["content"] for call in reader.calls)
    shared = first.index("Now, answer")
    assert first[:shared] == second[:shared] and SECTIONS["export"] in first[:shared]
    assert "The conversation so far:" in second[shared:]
