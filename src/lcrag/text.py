"""Answer text as the scorers and Self-Route read it. Here, below every stage, because both strategies (Self-Route's
decline test) and evaluation (the official scorers) use it and strategies must not import from evaluation."""

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
