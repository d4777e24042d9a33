"""lcrag.core.text's decline reading (issue 44, item 2): general — a negation with a verb of saying or finding and the
source named — so that wordings it was not written from are read, and an answer that merely holds "not" is not."""

from __future__ import annotations

import pytest

from lcrag.core.text import declines, declines_first, hedges


@pytest.mark.parametrize("answer", [
    "The text does not say who won the race.",
    "I cannot find the interest rate in the document.",
    "There is no mention of a cake in the document.",
    "The document doesn't specify the colour.",
    "Based on the provided text, it's unclear who won.",
    "No information about the villa is given.",
    "Not stated.",
    "Unknown",
    # not among the generated families' wordings
    "Having read the retrieved passages twice, I was not able to spot any reference to her age.",
    "The filing is silent on the dividend policy.",
    "That detail isn't recorded anywhere in the excerpt.",
])
def test_declines_in_wordings_written_and_unwritten(answer):
    assert declines(answer) and declines_first(answer)


@pytest.mark.parametrize("answer", [
    "He did not attend the meeting.",
    "There were no survivors.",
    "The revenue was not affected by the merger.",
    "She was not present at the ceremony.",
    "The report shows that revenue did not fall in 2020.",
    "No, the company did not issue dividends.",
    "The book says he never returned home.",
    "The authors did not use any pretrained model; they trained from scratch on the provided data.",
    "Nobody knew, and she could not find her keys.",
])
def test_an_answer_that_merely_holds_not_does_not_decline(answer):
    assert not declines(answer)


def test_a_caveat_after_the_answer_declines_but_does_not_lead():
    for answer in ("Revenue was $3 million, although the text does not specify the year.",
                   "Lucy won. However, the passage never states the margin."):
        assert declines(answer) and not declines_first(answer)
    assert declines_first("The text does not say directly, but Lucy probably won.")
    assert declines_first("I'm sorry, but the document does not mention it.")


def test_hedges_read_doubt_as_well_as_missing_detail():
    assert hedges("It is not explicitly stated.") and hedges("The text suggests it was Lucy.")
    assert not hedges("Lucy won the race.")
