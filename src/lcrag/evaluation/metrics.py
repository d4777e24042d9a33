"""Scores, ported from the official scorers so that numbers match them exactly.

Each public scorer names its variant (``METRICS[name].variant``); results carry that name:
- LongBench v1 ``metrics.py`` (THUDM/LongBench@2e00731): ``normalize_answer``, ``qa_f1_score``, ``rouge_score``;
- InfiniteBench ``src/compute_scores.py`` (OpenBMB/InfiniteBench@88b3daa): En.QA F1, En.MC letter scoring, passkey;
- LongRAG (TIGER-AI-Lab/LongRAG@ba92f95 ``eval/`` + paper §6.2): EM after NFD normalisation, refined EM,
  and answer recall (DPR ``has_answer`` token containment);
- SQuAD-style exact match and multiple-choice accuracy.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")


# -- LongBench v1 ---------------------------------------------------------------------------------------------------
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


def rouge_l_longbench(prediction: str, ground_truth: str) -> float:
    """LongBench ``rouge_score``: ROUGE-L F of the ``rouge`` package (pltrdy), 0 on any error (e.g. empty text)."""
    from rouge import Rouge

    try:
        return Rouge().get_scores([prediction], [ground_truth], avg=True)["rouge-l"]["f"]
    except Exception:  # LongBench's own rule: an unscorable pair (empty, only punctuation) scores 0
        return 0.0


# -- InfiniteBench ----------------------------------------------------------------------------------------------------
def infinitebench_qa_f1(prediction: str, ground_truths: list[str]) -> float:
    """InfiniteBench En.QA: max over gold answers of the same token F1 as LongBench."""
    return max((qa_f1_score(prediction, g) for g in ground_truths), default=0.0)


def infinitebench_choice(prediction: str, label: list[str]) -> bool:
    """InfiniteBench En.MC (``get_score_one_longbook_choice_eng``); ``label`` is ``[answer_text, letter]``.

    Kept verbatim, quirks included: a prediction starting with the article "A" scores as option A.
    """
    pred = prediction.strip()
    if not pred:
        return False
    if pred[0] in "ABCD":
        return pred[0] in label
    if pred in label:
        return True
    for c in ["\n", '"', "'", ".", ",", "?", "!", "{", "}"]:
        pred = pred.replace(c, " ")
    while "  " in pred:
        pred = pred.replace("  ", " ")
    for prefix in ["answer is:", "answer:", "answer is", "option is"]:
        idx = pred.find(prefix)
        if idx == -1:
            continue
        if len(pred) < idx + len(prefix) + 1:
            return False
        after_prefix = pred[idx + len(prefix) + 1 :]
        return any(after_prefix.startswith(s) for s in label)
    for word in pred.split():
        if word in "ABCD":  # a substring test, as in the original
            return word in label
    return False


def first_int_match(prediction: str) -> str:
    for item in re.split("[^0-9]", prediction):
        if item != "":
            return item
    return ""


def infinitebench_passkey(prediction: str, label: str) -> bool:
    """InfiniteBench passkey / number_string: the first integer in the prediction equals the label."""
    return first_int_match(prediction) == str(label)


# -- LongRAG ----------------------------------------------------------------------------------------------------------
def normalize_answer_nfd(s: str) -> str:
    """LongRAG ``normalize_answer``: SQuAD normalisation after unicode NFD."""
    return normalize_answer(unicodedata.normalize("NFD", s))


def exact_match(prediction: str, ground_truths: list[str]) -> bool:
    """LongRAG ``single_ans_em``: the NFD+SQuAD-normalised prediction equals some normalised gold answer."""
    pred = normalize_answer_nfd(prediction)
    return any(pred == normalize_answer_nfd(g) for g in ground_truths)


def refined_exact_match(prediction: str, ground_truths: list[str]) -> bool:
    """LongRAG paper §6.2: EM, or a prediction of fewer than five tokens that contains a gold answer or is
    contained in one (after normalisation)."""
    if exact_match(prediction, ground_truths):
        return True
    pred = normalize_answer_nfd(prediction)
    if not pred or len(pred.split()) >= 5:
        return False
    return any((g := normalize_answer_nfd(gold)) and (g in pred or pred in g) for gold in ground_truths)


_DPR_TOKEN = None


def _dpr_tokens(text: str) -> list[str]:
    """DPR ``SimpleTokenizer``: runs of letters/digits/marks, or single other non-space characters; uncased, NFD."""
    global _DPR_TOKEN
    if _DPR_TOKEN is None:
        import regex

        _DPR_TOKEN = regex.compile(r"[\p{L}\p{N}\p{M}]+|[^\p{Z}\p{C}]", flags=regex.IGNORECASE | regex.UNICODE | regex.MULTILINE)
    return [m.group().lower() for m in _DPR_TOKEN.finditer(unicodedata.normalize("NFD", text))]


def has_answer(text: str, answers: list[str]) -> bool:
    """DPR ``has_answer`` (LongRAG's answer recall): some answer's token sequence occurs in ``text``."""
    tokens = _dpr_tokens(text)
    for answer in answers:
        ans = _dpr_tokens(answer)
        n = len(ans)
        if n and any(tokens[i : i + n] == ans for i in range(len(tokens) - n + 1)):
            return True
    return False


# -- general ----------------------------------------------------------------------------------------------------------
def contains_answer(prediction: str, answers: list[str]) -> bool:
    """Loose accuracy: some normalised gold answer is a substring of the normalised prediction."""
    pred = normalize_answer(prediction)
    return any(normalize_answer(a) and normalize_answer(a) in pred for a in answers)


_LETTER = re.compile(r"\b([A-D])\b")


_GOLD_LETTER = re.compile(r"^\W*([A-D])\b")


def choice_accuracy(prediction: str, answers: list[str]) -> bool:
    """Multiple choice: the first standalone letter A–D in the prediction is the gold letter.

    Gold answers may be a bare letter ("B") or an option with its text ("(B) Their subconscious…", L-Eval QuALITY).
    """
    m = _LETTER.search(prediction.strip())
    gold = {g.group(1) for a in answers if (g := _GOLD_LETTER.match(a.strip()))}
    return bool(m) and m.group(1) in gold


_LETTER_RUN = re.compile(r"^\s*([A-D](?:[\s,&]*[A-D])*)\b")


def choice_set_accuracy(prediction: str, answers: list[str]) -> bool:
    """Multiple-answer choice (L-Eval Coursera): the option letters the prediction opens with equal the gold set.

    "ABD", "A, B and D" and "(A)(B)" style openings are read; anything else scores 0.
    """
    text = prediction.upper().replace(" AND ", " ").replace("(", " ").replace(")", " ")
    m = _LETTER_RUN.match(text)
    predicted = set(re.findall(r"[A-D]", m.group(1))) if m else set()
    gold = {ch for a in answers for ch in re.sub(r"[^A-D]", "", a.upper())}
    return bool(predicted) and predicted == gold


@dataclass(frozen=True)
class Metric:
    name: str
    variant: str
    score: Callable[[str, list[str]], float]  # prediction, gold answers -> 0..1


def first_or_second(prediction: str, label: str) -> bool:
    """Two-passkey variant (Self-Route §5.4): the first "first" or "second" in the prediction equals the label."""
    match = re.search(r"\b(first|second)\b", prediction.lower())
    return bool(match) and match.group(1) == label.lower()


def _max_over(fn: Callable[[str, str], float]) -> Callable[[str, list[str]], float]:
    return lambda pred, golds: max((fn(pred, g) for g in golds), default=0.0)


METRICS: dict[str, Metric] = {
    m.name: m
    for m in [
        Metric("qa_f1", "LongBench v1 qa_f1_score, max over gold answers", _max_over(qa_f1_score)),
        Metric("rouge_l", "LongBench v1 rouge_score (pltrdy rouge, ROUGE-L F), max over gold answers", _max_over(rouge_l_longbench)),
        Metric("infbench_qa_f1", "InfiniteBench En.QA qa_f1_score", infinitebench_qa_f1),
        Metric("infbench_choice", "InfiniteBench En.MC get_score_one_longbook_choice_eng", lambda p, g: float(infinitebench_choice(p, g))),
        Metric("passkey", "InfiniteBench passkey: first integer == label", lambda p, g: float(infinitebench_passkey(p, g[0]))),
        Metric("first_second", "first 'first'/'second' in the prediction equals the label (two passkeys)",
               lambda p, g: float(first_or_second(p, g[0]))),
        Metric("em", "LongRAG single_ans_em (NFD + SQuAD normalisation)", lambda p, g: float(exact_match(p, g))),
        Metric("refined_em", "LongRAG paper §6.2 refined EM", lambda p, g: float(refined_exact_match(p, g))),
        Metric("contains", "normalised gold substring of normalised prediction", lambda p, g: float(contains_answer(p, g))),
        Metric("choice_acc", "first standalone A-D letter equals the gold letter", lambda p, g: float(choice_accuracy(p, g))),
        Metric("choice_set", "set of leading A-D letters equals the gold set (multiple-answer choice)",
               lambda p, g: float(choice_set_accuracy(p, g))),
    ]
}
