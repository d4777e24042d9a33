"""The offline free-form scorer does not care how an answer is phrased: courtesy, a restated question, number
formats and elaboration after a complete first sentence leave its score where it was (issue 35, item 3)."""

from __future__ import annotations

import pytest

from lcrag.evaluation.freeform import (
    FEATURES, Calibration, FreeformScorer, answer_features, canonical, canonical_answer, canonical_numbers,
    number_recall, sentences,
)
from lcrag.evaluation.perturbations import (
    PERTURBATIONS, first_sentence, polite, restate_question, switch_number_formats,
)

from .test_freeform import BagOfWordsEmbedder

# Hand-made (task, question, gold, answer) cases: right, wrong and partly right answers and declines, each of more
# than one sentence whose first sentence already says all the answer says of the gold answer.
CASES = (
    ("location", "What game did Miles try to play with Atkins?", "Canasta.",
     "Miles tried to play Canasta with Atkins. They played at the inn after dinner, and Atkins won twice."),
    ("location", "What game did Miles try to play with Atkins?", "Canasta.",
     "Miles tried to play chess with Atkins. They played at the inn after dinner."),
    ("location", "Where did Miles meet Atkins?", "At the Golden Lion inn in Bath, on a rainy evening.",
     "Miles met Atkins at an inn in Bath. It was raining, and they talked for hours about cards."),
    ("location", "What was the company's net loss for the year ended December 31, 2023?", "$36,639,000.",
     "The company's net loss for the year ended December 31, 2023 was $36.6 million, up 12.5% from 2022. "
     "The increase came from higher research spending."),
    ("location", "What did the company report as revenue and net loss in 2023?",
     "Revenue was $12,450,000 and the net loss was $3,200,000.",
     "The company reported revenue of $12.45 million in 2023. Its margins improved over the year."),
    ("reasoning", "Why did Ruby stop writing to her mother?",
     "Because her mother had burned her letters and forbidden her to see Tom, so Ruby felt betrayed.",
     "Ruby stopped writing because her letters were burned. She moved to London soon after and found work."),
    ("comp", "How do paper 1 and paper 2 differ in the datasets they use?",
     "Paper 1 uses ImageNet and CIFAR-10 while paper 2 uses COCO and LVIS for detection.",
     "Paper 1 uses ImageNet, whereas paper 2 uses COCO. Both report accuracy on held-out splits."),
    ("hallu", "What was the name of the horse Jack rode to town?", "The text does not mention a horse.",
     "The text does not mention a horse that Jack rode. He walked to town with Clara."),
    ("hallu", "What was the name of the horse Jack rode to town?", "The text does not mention a horse.",
     "Jack's horse is not named. He rode to town with Clara on a cart."),
    ("hallu", "What was the name of the horse Jack rode to town?", "The text does not mention a horse.",
     "The horse was called Thunder. Jack rode it every day."),
)
# What keeping the first sentence may change: the whole answer's embedding, hedges and figures of its own.
WHOLE_ANSWER = frozenset({"similarity", "hedges", "number_precision"})


@pytest.fixture(scope="module")
def scorer():
    return FreeformScorer(Calibration.bundled(), BagOfWordsEmbedder())


def test_numbers_are_read_in_one_form():
    assert canonical_numbers("$36.6 million") == canonical_numbers("$36,600,000") == "$36600000"
    assert canonical_numbers("12.5 percent of 234,051") == canonical_numbers("12.5% of 234051") == "12.5% of 234051"
    assert canonical_numbers("$1.9 billion") == canonical_numbers("$1,900,000,000")
    assert canonical_numbers("in 2019-2020, 3 of 4") == "in 2019-2020, 3 of 4"  # years and small numbers stay


def test_sentences_do_not_break_at_initials_abbreviations_or_decimals():
    assert sentences("Mme. de Breuil met J. R. Smith at 3.5 p.m. on Monday. Then she left.") == [
        "Mme. de Breuil met J. R. Smith at 3.5 p.m. on Monday.", "Then she left."]
    assert sentences("The stages are:\n1. Retrieval.\n2. Reading.") == ["The stages are:", "1. Retrieval.",
                                                                        "2. Reading."]


@pytest.mark.parametrize("wrapped", [
    "Sure! Here is the answer: Miles played Canasta. I hope this helps.",
    "Of course. Miles played Canasta.\n\nPlease let me know if you have any further questions!",
    "Answer: Miles played Canasta. Is there anything else I can help you with?",
    "Here's a short answer to your question:\n\nMiles played Canasta. Feel free to ask if anything is unclear.",
    "Certainly! Miles played Canasta. I'd be happy to help further.",
])
def test_courtesy_is_not_read(wrapped):
    question = "What game did Miles play?"
    assert canonical_answer(question, wrapped) == "Miles played Canasta."


def test_courtesy_words_inside_an_answer_stay():
    question = "Why did the team win?"
    answer = "The team won thanks to its coach. Thanks to him, they trained daily."
    assert canonical_answer(question, answer) == answer


@pytest.mark.parametrize("restated", [
    "What game did Miles play?\nMiles played Canasta.",
    'You asked: "What game did Miles play?" Miles played Canasta.',
    "Question: What game did Miles play? Answer: Miles played Canasta.",
    "The question asks what game Miles played. Miles played Canasta.",
    "Regarding the game Miles played: Miles played Canasta.",
])
def test_a_restated_question_is_not_read(restated):
    assert canonical_answer("What game did Miles play?", restated) == "Miles played Canasta."


@pytest.mark.parametrize("answer", [
    "Miles did not play a game. He read a book.",  # a denial of the question's premise is a claim
    "The text does not say what game Miles played. It mentions cards.",  # a decline is the answer
    "Miles played a game called Canasta.",  # the only sentence is the answer
])
def test_what_looks_like_a_restatement_but_says_something_stays(answer):
    assert canonical_answer("What game did Miles play?", answer) == answer


def test_a_subject_that_repeats_the_question_is_not_cut_at_an_abbreviation():
    question = "What is the projected revenue growth for High Wire Networks, Inc. over the next five years?"
    answer = "The projected revenue growth for High Wire Networks, Inc. is not stated. However, revenue fell."
    # the subject is kept whole; only the connective that tied the caveat to the claim goes (caveats read first)
    assert canonical_answer(question, answer) == answer.replace("However, revenue", "Revenue")


def test_first_sentence_only_when_it_holds_everything_the_answer_says_of_the_gold():
    q, gold = "What game did Miles try to play with Atkins?", "Canasta with Atkins."
    assert first_sentence(q, gold, "Miles played Canasta with Atkins. They met at the inn.") == \
        "Miles played Canasta with Atkins."
    assert first_sentence(q, gold, "Miles met Atkins at the inn. They played Canasta.") == \
        "Miles met Atkins at the inn. They played Canasta."  # the gold's game is in the second sentence
    assert first_sentence(q, gold, "Canasta. The text does not say who won.") == \
        "Canasta. The text does not say who won."  # dropping the caveat would change a decline


def test_number_formats_switch_with_the_same_value():
    q, gold = "How much?", "$36,639,000."
    switched = switch_number_formats(q, gold, "It was $36.6 million (12.5%), or 234,051 units, in 2023.")
    assert switched == "It was $36,600,000 (12.5 percent), or 234051 units, in 2023."
    assert switch_number_formats(q, gold, switched) == "It was $36.6 million (12.5%), or 234,051 units, in 2023."


def test_restatement_courtesy_and_number_formats_leave_the_score_exactly(scorer):
    for task, question, gold, answer in CASES:
        for perturb in (restate_question, polite, switch_number_formats):
            changed = perturb(question, gold, answer)
            assert changed != answer or perturb is switch_number_formats
            assert canonical_answer(question, changed) == canonical_answer(question, answer), (perturb, answer)
            assert scorer.score(question, gold, changed, task) == scorer.score(question, gold, answer, task)


def test_the_first_sentence_leaves_every_feature_but_the_whole_answers():
    for task, question, gold, answer in CASES:
        first = first_sentence(question, gold, answer)
        assert first != answer, answer  # every case is one the perturbation applies to
        before, after = (dict(zip(FEATURES, answer_features(*canonical(question, gold, text), 0.5)))
                         for text in (answer, first))
        assert {f for f in FEATURES if before[f] != after[f]} <= WHOLE_ANSWER, answer


def test_the_first_sentence_moves_the_scores_little(scorer):
    changes = [scorer.score(q, g, first_sentence(q, g, a), t) - scorer.score(q, g, a, t) for t, q, g, a in CASES]
    assert abs(sum(changes)) / len(changes) <= 0.05, changes
    assert max(map(abs, changes)) <= 0.25, changes


def test_a_rounded_figure_scores_as_the_exact_one(scorer):
    q, gold = "What was the company's net loss for the year ended December 31, 2023?", "$36,639,000."
    exact = scorer.score(q, gold, "The net loss was $36,639,000.", "location")
    assert scorer.score(q, gold, "The net loss was $36.6 million.", "location") >= exact - 0.05
    assert scorer.score(q, gold, "The net loss was $12.1 million.", "location") < exact - 0.5
    assert number_recall("In 2023.", "In 2022.") == 0.0 and number_recall("3", "3,000") == 0.0


def test_the_scorer_still_tells_right_from_wrong_after_every_perturbation(scorer):
    (t1, q1, g1, right), (_, _, _, wrong) = CASES[0], CASES[1]
    (t2, q2, g2, declined), (_, _, _, invented) = CASES[7], CASES[9]
    for _, perturb in PERTURBATIONS:
        assert scorer.score(q1, g1, perturb(q1, g1, right), t1) > scorer.score(q1, g1, perturb(q1, g1, wrong), t1)
        assert scorer.score(q2, g2, perturb(q2, g2, declined), t2) > \
            scorer.score(q2, g2, perturb(q2, g2, invented), t2)
