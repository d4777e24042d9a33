"""Answer and question text as the scorers, Self-Route and routers read it. Here, below every stage, because both
strategies (Self-Route's decline test, a router's question type) and evaluation (the official scorers) use it and
strategies must not import from evaluation."""

from __future__ import annotations

import re
import string

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """LongBench/SQuAD: lower case, drop punctuation, drop articles, collapse white space."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


QUESTION_WORDS = ("who", "what", "where", "when", "which", "how", "why")


def question_type(question: str) -> str:
    """who/what/where/when/which/how/why, yes-no (starts with an auxiliary verb), or other."""
    words = question.lower().replace("?", " ").split()
    for w in words[:3]:
        if w in QUESTION_WORDS:
            return w
    if words and words[0] in {"is", "are", "was", "were", "do", "does", "did", "can", "could", "has", "have", "had",
                              "will", "would", "should"}:
        return "yes-no"
    return "other"
