"""The generated decline families (lcrag.evaluation.decline_families) and the rewrites the perturbation table of
benchmarks/validate_lara_scorer.py makes from them."""

from __future__ import annotations

import pytest

from lcrag.evaluation.decline_families import FAMILIES, decline_topic, generate, reword_decline
from lcrag.evaluation.freeform import FreeformScorer, canonical_answer
from lcrag.evaluation.perturbations import DECLINE_PERTURBATIONS, caveat_after, caveat_first
from lcrag.core.text import declines, declines_first

from .test_freeform import BagOfWordsEmbedder

LEADS = {"answer then caveat": False}


@pytest.mark.parametrize("held_out", [False, True])
@pytest.mark.parametrize("name", [f.name for f in FAMILIES])
def test_every_family_is_read_as_a_decline_on_both_halves(name, held_out):
    wordings = generate(name, held_out, count=80, seed=7)
    assert len(set(wordings)) > 1
    assert all(declines(w) for w in wordings), [w for w in wordings if not declines(w)][:3]
    assert all(declines_first(w) is LEADS.get(name, True) for w in wordings)


def test_generation_is_deterministic_and_halves_differ():
    assert generate("no mention", seed=3) == generate("no mention", seed=3)
    assert generate("no mention", seed=3) != generate("no mention", seed=4)
    assert not set(generate("cannot find", False, 200)) & set(generate("cannot find", True, 200))


def test_a_decline_is_reworded_with_its_topic_and_anything_else_is_left():
    answer = "The book does not specify the type of perfume that Adelaide prefers."
    assert decline_topic(answer) == "the type of perfume that Adelaide prefers"
    for name in ("does not say", "cannot find", "no mention", "unclear"):
        reworded = reword_decline(answer, name, pick=1)
        assert reworded != answer and "type of perfume that Adelaide prefers" in reworded and declines(reworded)
    assert reword_decline("Adelaide prefers lavender.", "no mention", 0) == "Adelaide prefers lavender."
    assert reword_decline("The book does not specify it. But she liked roses.", "no mention", 0).endswith("roses.")


def test_a_caveat_read_in_either_order_gives_the_same_score():
    q, gold = "What was the 2019 revenue?", "The text does not mention the 2019 revenue."
    after = "Revenue was about $3 million. However, the text does not explicitly state the 2019 figure."
    before = caveat_first(q, gold, after)
    assert before.startswith("The text does not explicitly state") and caveat_after(q, gold, before) != before
    assert canonical_answer(q, after) == canonical_answer(q, before)
    scorer = FreeformScorer(embedder=BagOfWordsEmbedder())
    assert scorer.score(q, gold, after, "hallu") == pytest.approx(scorer.score(q, gold, before, "hallu"))


def test_decline_perturbations_leave_non_declines_alone():
    for _, perturb in DECLINE_PERTURBATIONS:
        assert perturb("Who won?", "Lucy.", "Lucy won the race.") == "Lucy won the race."
