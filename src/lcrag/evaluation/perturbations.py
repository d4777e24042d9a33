"""Style perturbations of an answer that LaRA's judge would score the same: the free-form scorer should too.

Each perturbation takes (question, gold, answer) and returns the answer written differently but saying the same
thing; where it cannot do that faithfully it returns the answer unchanged. ``benchmarks/validate_lara_scorer.py``
applies them to every recorded LaRA answer and reports how far each moves the scorer's mean per reader.

- ``first sentence``: only the answer's first sentence, when that sentence already holds everything the answer says
  of the gold answer (its content words and numbers) and declines exactly when the whole answer does; what is dropped
  is elaboration, so the judge, which compares with the gold answer, sees the same answer.
- ``question restated``: the question repeated before the answer (three wordings): it adds no claim.
- ``polite``: a courtesy opener and closer around the answer (three wordings): no claim either.
- ``number formats``: every number written another way with the same value (``$36.6 million`` ↔ ``$36,600,000``,
  ``234,051`` ↔ ``234051``, ``12.5%`` ↔ ``12.5 percent``); four-digit plain numbers (years) are left alone.

:data:`DECLINE_PERTURBATIONS` rewrite answers that decline (:mod:`lcrag.evaluation.decline_families`): a one-sentence
decline in another family's wording (the same topic), an answer-then-caveat with the caveat first, a
caveat-then-answer with the caveat last.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

from lcrag.evaluation.decline_families import caveat_last, reorder_caveat, reword_decline
from lcrag.evaluation.freeform import Number, number_mentions, number_recall, render_number, sentences
from lcrag.core.text import content_words, declines

_RESTATED = ('You asked: "{question}" {answer}', "{question}\n{answer}", "Question: {question} Answer: {answer}",
             "The question is {plain}. {answer}")
_POLITE = (("Sure! Here is the answer: ", " I hope this helps."),
           ("Certainly! ", " Let me know if you have any other questions."),
           ("Great question! ", " Hope this helps!"))


def _pick(options: tuple, answer: str):
    """One of the wordings, the same for the same answer every run."""
    return options[zlib.crc32(answer.encode("utf-8")) % len(options)]


def first_sentence(question: str, gold: str, answer: str) -> str:
    """Only the first sentence, when it already holds everything the answer says of the gold answer (the same gold
    content words and numbers) and declines exactly when the whole answer does. What goes is elaboration the gold
    answer does not ask for, so a judge comparing with the gold answer gives the same verdict."""
    parts = sentences(answer)
    if len(parts) < 2:
        return answer
    first, wanted = parts[0], content_words(gold)
    same = (wanted & content_words(first) == wanted & content_words(answer)
            and number_recall(gold, first) == number_recall(gold, answer) and declines(first) == declines(answer))
    return first if same else answer


def restate_question(question: str, gold: str, answer: str) -> str:
    """The question repeated before the answer ("You asked: "…"", the question on its own line, "Question: …
    Answer:", "The question is …."): it adds no claim, so the verdict cannot change."""
    plain = question.strip().rstrip("?").strip()
    plain = plain[:1].lower() + plain[1:]
    return _pick(_RESTATED, answer).format(question=question.strip(), plain=plain, answer=answer)


def polite(question: str, gold: str, answer: str) -> str:
    """A courtesy opener and closer around the answer ("Sure! Here is the answer: … I hope this helps.", and two other
    wordings): no claim either."""
    opener, closer = _pick(_POLITE, answer)
    return f"{opener}{answer}{closer}"


def _other_format(n: Number, written: str) -> str | None:
    """The same value written another way, or None when there is no faithful other way."""
    whole, millions = abs(n.value - round(n.value)) < 1e-6, render_number(n.value / 1e6)
    if n.value < 0:
        return None
    if n.percent:
        return f"{n.currency}{render_number(n.value)}{'%' if written.rstrip().endswith('t') else ' percent'}"
    if n.scale in ("million", "billion", "thousand", "bn") and whole:
        return f"{n.currency}{round(n.value):,}"
    if n.grouped and n.value >= 1e6 and abs(float(millions) * 1e6 - n.value) < 1e-3:
        return f"{n.currency}{millions} million"
    if n.grouped:
        return f"{n.currency}{render_number(n.value)}"
    if not n.scale and whole and n.value >= 1e4:
        return f"{n.currency}{round(n.value):,}"
    return None


def switch_number_formats(question: str, gold: str, answer: str) -> str:
    """Every number written another way with the same value ("$36.6 million" ↔ "$36,600,000", "234,051" ↔ "234051",
    "12.5%" ↔ "12.5 percent"; four-digit plain numbers such as years stay): the same figures, so the same verdict."""
    parts, at = [], 0
    for n in number_mentions(answer):
        glued = answer[n.end:n.end + 1].isalnum()  # "33,592,055shares": a scale word would join the next word
        if not glued and (written := _other_format(n, answer[n.start:n.end])) is not None:
            parts += [answer[at:n.start], written]
            at = n.end
    return "".join(parts) + answer[at:]


Perturbation = Callable[[str, str, str], str]
PERTURBATIONS: tuple[tuple[str, Perturbation], ...] = (
    ("first sentence", first_sentence), ("question restated", restate_question), ("polite", polite),
    ("number formats", switch_number_formats))


def reworded_as(name: str) -> Perturbation:
    """A one-sentence decline ("The book does not specify the type of perfume.") re-worded as family ``name``'s
    decline of the same topic ("There is no mention of the type of perfume in the text."): both decline, so the
    judge's verdict on a question the document does not answer is the same."""
    def perturb(question: str, gold: str, answer: str) -> str:
        return reword_decline(answer, name, zlib.crc32(answer.encode("utf-8")))
    perturb.__doc__ = f"A one-sentence decline re-worded as a decline of the family '{name}' (same topic)."
    return perturb


def caveat_first(question: str, gold: str, answer: str) -> str:
    """An answer-then-caveat ("X. However, the text does not explicitly state Y.") re-ordered caveat first."""
    return reorder_caveat(answer, sentences(answer))


def caveat_after(question: str, gold: str, answer: str) -> str:
    """A caveat-then-answer ("The text does not say Y. However, X.") re-ordered answer first."""
    return caveat_last(answer, sentences(answer))


# Rewrites of answers to questions the document does not answer (LaRA's hallucination task): another family's decline,
# or the caveat moved before or after the answer.
DECLINE_PERTURBATIONS: tuple[tuple[str, Perturbation], ...] = (
    *((f"as '{name}'", reworded_as(name)) for name in ("does not say", "cannot find", "no mention", "unclear",
                                                         "bare refusal")),
    ("caveat first", caveat_first), ("caveat last", caveat_after))

__all__ = ["DECLINE_PERTURBATIONS", "PERTURBATIONS", "caveat_after", "caveat_first", "first_sentence", "polite",
           "restate_question", "reworded_as", "switch_number_formats"]
