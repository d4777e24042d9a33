"""Reading a decline: Self-Route's test for the word "unanswerable" in a written answer, and the probability that an
answer starts with it, from the reader's log-probabilities (what a routing condition's threshold compares)."""

from __future__ import annotations

import math
import re

from lcrag.core.text import normalize_answer

__all__ = ["DECLINE", "decline_probability", "is_unanswerable"]


def is_unanswerable(text: str) -> bool:
    """Self-Route's decline test: the answer normalises (LongBench ``normalize_answer``) to "unanswerable", curly
    quotes dropped too (the paper's prompts print the word in them, and readers echo them)."""
    return normalize_answer(text.translate(_CURLY_QUOTES)) == "unanswerable"


_CURLY_QUOTES = str.maketrans("", "", "\u201c\u201d\u2018\u2019")


DECLINE = "unanswerable"
_LEADING = re.compile(r"^[\W_]+")  # spaces, quotes, asterisks before the first word


def decline_probability(logprobs: list[dict] | None, word: str = DECLINE) -> float | None:
    """The probability that an answer starts with ``word``, from the first generated positions' top candidates.

    Along the generated path, while what was generated is still the start of ``word`` (or only spaces and
    punctuation), every candidate that completes ``word`` adds its path probability; a candidate that only starts
    it ("Un") adds its probability too, as the continuation beyond the top candidates is not visible and, in a
    prompt that names the word, nearly always completes it. None when there are no log-probabilities.
    """
    if not logprobs:
        return None
    total, path, generated = 0.0, 1.0, ""
    for position in logprobs:
        for token, logprob in position["top"]:
            started = _LEADING.sub("", (generated + token).lower())
            if started and (word.startswith(started) or started.startswith(word)) and (
                    token != position["token"] or len(started) >= len(word)):
                total += path * math.exp(logprob)
        chosen = _LEADING.sub("", (generated + position["token"]).lower())
        if chosen and (len(chosen) >= len(word) or not word.startswith(chosen)):
            break  # the answer left (or completed) the word: nothing later changes how it starts
        path *= math.exp(next((lp for t, lp in position["top"] if t == position["token"]), 0.0))
        generated += position["token"]
    return min(1.0, total)
