"""`lcrag route calibrate`'s questions and labels: generated from a document's sentences (deterministic), read from
the user's JSONL or TSV, and a judge's label in place of the agreement reading."""

from __future__ import annotations

import pytest

from lcrag.core.errors import InputError
from lcrag.evaluation.routing.calibrate import CalibrationQuestion, generate_questions, judged_label, read_questions
from lcrag.core.types import Document

pytestmark = pytest.mark.unit

TEXT = ("The harbour of Tallinn was rebuilt in 1912 after a long winter of storms. Ships from Riga and Helsinki "
        "brought timber for the new piers every week. Short one. The lighthouse keeper Anna Berg kept a log of every "
        "ship that entered the harbour during the war years. Grain prices rose sharply when the railway to "
        "Narva opened in the spring of 1870.")


def test_questions_are_generated_from_sentences_deterministically():
    document = Document(TEXT)
    made = generate_questions([document], 3)
    assert [q.question for q in made] == [q.question for q in generate_questions([Document(TEXT)], 3)]
    assert len(made) == 3 and all(q.document is document for q in made)
    assert made[0].question == "What does the text say about Tallinn?"  # the first name after the first word
    assert all(q.question.startswith("What does the text say about ") for q in made)
    with pytest.raises(InputError, match="no sentence"):
        generate_questions([Document("Too short.")], 5)


def test_questions_are_read_from_jsonl_and_tsv(tmp_path):
    other = tmp_path / "other.txt"
    other.write_text(TEXT)
    path = tmp_path / "q.txt"
    path.write_text('{"question": "Who kept the log?", "answers": ["Anna Berg"]}\n\n'
                    f'When was the harbour rebuilt?\t{other}\t1912\n', encoding="utf-8")
    given = Document(TEXT)
    read = read_questions(path, [given], lambda p: ("loaded", p))
    assert read[0] == CalibrationQuestion("Who kept the log?", given, ("Anna Berg",))
    assert read[1] == CalibrationQuestion("When was the harbour rebuilt?", ("loaded", str(other)), ("1912",))


class Verdicts:
    """A judge's verdicts by answer text (what lcrag.evaluation.judge.Judge.score returns: a verdict, its reply)."""

    def __init__(self, verdicts: dict):
        self.verdicts = verdicts

    def score(self, question, golds, answer, absent):
        return self.verdicts.get(answer), "True" if self.verdicts.get(answer) else "False"


def test_a_judge_labels_against_gold_answers_or_against_lc():
    q = CalibrationQuestion("Who kept the log?", None, ("Anna Berg",))
    assert judged_label(Verdicts({"Anna Berg.": 1.0, "Unknown.": 0.0}), q, "Unknown.", "Anna Berg.").may_gain
    assert not judged_label(Verdicts({"Anna Berg.": 1.0, "Anna.": 1.0}), q, "Anna.", "Anna Berg.").may_gain
    assert judged_label(Verdicts({}), q, "Anna.", "Anna Berg.") is None  # no verdict: the agreement reading stays
    without_gold = CalibrationQuestion("Who kept the log?", None)
    label = judged_label(Verdicts({"Anna.": 0.0}), without_gold, "Anna.", "Anna Berg.")  # RAG's against LC's
    assert label.may_gain and label.source == "judge"
