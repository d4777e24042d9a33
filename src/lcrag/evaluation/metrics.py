"""Answer normalisation and scores, as LongBench v1 ``metrics.py`` defines them."""

from __future__ import annotations

import re
import string
from collections import Counter

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def normalize_answer(s: str) -> str:
    """LongBench/SQuAD: lower case, drop punctuation, drop articles, collapse white space."""
    s = s.lower()
    s = "".join(ch for ch in s if ch not in _PUNCTUATION)
    s = _ARTICLES.sub(" ", s)
    return " ".join(s.split())


def f1_score(prediction: list[str], ground_truth: list[str]) -> float:
    common = Counter(prediction) & Counter(ground_truth)
    num_same = sum(common.values())
    if num_same == 0:
        return 0.0
    precision = num_same / len(prediction)
    recall = num_same / len(ground_truth)
    return 2 * precision * recall / (precision + recall)


def qa_f1_score(prediction: str, ground_truth: str) -> float:
    """LongBench ``qa_f1_score``: token F1 of the normalised strings (0..1; LongBench reports ×100)."""
    return f1_score(normalize_answer(prediction).split(), normalize_answer(ground_truth).split())


def contains_answer(prediction: str, answers: list[str]) -> bool:
    """Loose accuracy: some normalised gold answer is a substring of the normalised prediction."""
    pred = normalize_answer(prediction)
    return any(normalize_answer(a) and normalize_answer(a) in pred for a in answers)
