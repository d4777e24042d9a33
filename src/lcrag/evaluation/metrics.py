"""Scores, ported from the official scorers so that numbers match them exactly.

Each public scorer names its variant (``METRICS[name].variant``); results carry that name:
- LongBench v1 ``metrics.py`` and ``eval.py`` (THUDM/LongBench@2e00731), all 21 tasks: ``qa_f1_score``,
  ``qa_f1_zh_score``, ``rouge_score``, ``rouge_zh_score`` (jieba), ``classification_score``, ``retrieval_score``,
  ``retrieval_zh_score``, ``count_score``, ``code_sim_score``, and eval.py's first-line rule (trec, triviaqa, samsum,
  lsht). ``code_sim_score`` calls fuzzywuzzy's ``fuzz.ratio`` (GPL-2, not in our Apache-2.0 install); LongBench's
  requirements install it without python-Levenshtein, so it is difflib's ``SequenceMatcher`` ratio rounded to a
  whole percent, which :func:`fuzz_ratio` computes with the standard library (the parity tests show equal scores;
  rapidfuzz's ``fuzz.ratio`` is an Indel ratio and differs);
- InfiniteBench ``src/compute_scores.py`` (OpenBMB/InfiniteBench@88b3daa): En.QA F1, En.MC letter scoring, passkey;
- LongRAG (TIGER-AI-Lab/LongRAG@ba92f95 ``eval/`` + paper §6.2): EM after NFD normalisation, refined EM,
  and answer recall (DPR ``has_answer`` token containment);
- SQuAD-style exact match and multiple-choice accuracy.
"""

from __future__ import annotations

import logging
import re
import string
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

from lcrag.core import registry
from lcrag.core.text import normalize_answer

# -- LongBench v1 ---------------------------------------------------------------------------------------------------
# normalize_answer (LongBench/SQuAD) lives in lcrag.core.text, where Self-Route uses it too; still importable from here.


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


_ZH_PUNCTUATION = set(string.punctuation + "！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃》「」『』【】〔〕〖〗〘〙〚〛〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏.")


def normalize_zh_answer(s: str) -> str:
    """LongBench ``normalize_zh_answer``: lower case, drop ASCII and Chinese punctuation, drop all white space."""
    return "".join("".join(ch for ch in s.lower() if ch not in _ZH_PUNCTUATION).split())


def jieba_words(text: str) -> list[str]:
    """jieba's accurate-mode segmentation (``cut_all=False``), as LongBench's Chinese metrics use it."""
    import jieba

    jieba.setLogLevel(logging.WARNING)  # its dictionary-loading chatter is not ours to print
    return list(jieba.cut(text, cut_all=False))


def qa_f1_zh_score(prediction: str, ground_truth: str) -> float:
    """LongBench ``qa_f1_zh_score``: token F1 over jieba words, each normalised, empty ones dropped."""
    pred = [w for w in map(normalize_zh_answer, jieba_words(prediction)) if w]
    gold = [w for w in map(normalize_zh_answer, jieba_words(ground_truth)) if w]
    return f1_score(pred, gold)


def rouge_zh_score(prediction: str, ground_truth: str) -> float:
    """LongBench ``rouge_zh_score``: ROUGE-L F of the jieba words joined by spaces."""
    return rouge_l_longbench(" ".join(jieba_words(prediction)), " ".join(jieba_words(ground_truth)))


def classification_score(prediction: str, ground_truth: str, all_classes: list[str]) -> float:
    """LongBench ``classification_score`` (trec, lsht), verbatim: 1/n over the n class names found in the
    prediction, after dropping names that are part of the gold one; 0 when the gold is not found.

    The removal runs while iterating the list, so a name right after a removed one is not checked (official quirk).
    """
    matches = [c for c in all_classes if c in prediction]
    for term in matches:
        if term in ground_truth and term != ground_truth:
            matches.remove(term)
    return 1.0 / len(matches) if ground_truth in matches else 0.0


def _share_of_numbers(prediction: str, wanted: str) -> float:
    numbers = re.findall(r"\d+", prediction)
    return 0.0 if not numbers else float(sum(n == wanted for n in numbers) / len(numbers))


def count_score(prediction: str, ground_truth: str) -> float:
    """LongBench ``count_score`` (passage_count): the share of the numbers in the prediction that equal the gold."""
    return _share_of_numbers(prediction, str(ground_truth))


def retrieval_score(prediction: str, ground_truth: str, pattern: str = r"Paragraph (\d+)") -> float:
    """LongBench ``retrieval_score`` (passage_retrieval_en): the share of the prediction's numbers that equal the
    gold paragraph number (the gold answer is "Paragraph N")."""
    return _share_of_numbers(prediction, re.findall(pattern, ground_truth)[0])


def retrieval_zh_score(prediction: str, ground_truth: str) -> float:
    """LongBench ``retrieval_zh_score`` (passage_retrieval_zh): the same, the gold answer being "段落N"."""
    return retrieval_score(prediction, ground_truth, r"段落(\d+)")


def fuzz_ratio(a: str, b: str) -> int:
    """fuzzywuzzy 0.18 ``fuzz.ratio`` as LongBench's requirements install it (pure Python, no python-Levenshtein):
    100 for equal strings, 0 when either is empty, else difflib's ratio × 100 rounded (Python's round)."""
    if a == b:
        return 100
    if not a or not b:
        return 0
    return int(round(100 * SequenceMatcher(None, a, b).ratio()))


def code_sim_score(prediction: str, ground_truth: str) -> float:
    """LongBench ``code_sim_score`` (lcc, repobench-p): the first predicted line with no ```, # or //, compared
    with the gold line by ``fuzz.ratio`` / 100."""
    line = next((ln for ln in prediction.lstrip("\n").split("\n") if not ("`" in ln or "#" in ln or "//" in ln)), "")
    return fuzz_ratio(line, ground_truth) / 100


def first_line(prediction: str) -> str:
    """LongBench eval.py's post-processing for trec, triviaqa, samsum and lsht: the first line of the prediction."""
    return prediction.lstrip("\n").split("\n")[0]


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


def infinitebench_passkey(prediction: str, label: str | list[str]) -> bool:
    """InfiniteBench ``get_score_one_passkey`` (and number_string), verbatim: the label, or its first element when
    it is a list, equals the first run of digits in the prediction, compared as strings (the official data stores
    the key as a string; a number label never matches there, so the loader refuses one)."""
    if isinstance(label, list):
        label = label[0]
    return label == first_int_match(prediction)


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
    # prediction, gold answers -> 0..1; with ``needs_classes``, also the record's ``all_classes``
    score: Callable[..., float]
    needs_classes: bool = False
    needs_item: bool = False  # ``score(prediction, item)``: the scorer reads the question and task too

    def score_item(self, prediction: str, item: Any) -> float:
        """The score of ``prediction`` for an ``EvalItem`` (LongBench classification also reads its classes)."""
        if self.needs_item:
            return self.score(prediction, item)
        if self.needs_classes:
            return self.score(prediction, item.answers, item.meta["all_classes"])
        return self.score(prediction, item.answers)


def first_or_second(prediction: str, label: str) -> bool:
    """Two-passkey variant (Self-Route §5.4): the first "first" or "second" in the prediction equals the label."""
    match = re.search(r"\b(first|second)\b", prediction.lower())
    return bool(match) and match.group(1) == label.lower()


def _max_over(fn: Callable[[str, str], float]) -> Callable[[str, list[str]], float]:
    """LongBench eval.py's ``scorer``: the best score over the gold answers, 0 without any."""
    return lambda pred, golds: max((fn(pred, g) for g in golds), default=0.0)


def _on_first_line(fn: Callable[[str, list[str]], float]) -> Callable[[str, list[str]], float]:
    return lambda pred, golds: fn(first_line(pred), golds)


def _classification(pred: str, golds: list[str], all_classes: list[str]) -> float:
    return max((classification_score(first_line(pred), g, all_classes) for g in golds), default=0.0)


class MetricTable(Mapping[str, Metric]):
    """The registered metrics (:data:`lcrag.core.registry.METRICS`: name, variant as help, scorer as factory) by name,
    as :class:`Metric` objects; recorded rows name their metric, so a plugin's metric is scored and reported too."""

    def __getitem__(self, name: str) -> Metric:
        if not isinstance(name, str) or name not in registry.METRICS:
            raise KeyError(name)
        part = registry.METRICS.get(name)
        return Metric(part.name, part.help, part.factory, needs_classes=bool(part.meta.get("needs_classes")),
                      needs_item=bool(part.meta.get("needs_item")))

    def __iter__(self) -> Iterator[str]:
        # Only metrics that load: a broken plugin is reported once (by the registry) and left out, as a mapping's
        # keys must all be readable.
        return iter([name for name in registry.METRICS.names() if name in registry.METRICS])

    def __len__(self) -> int:
        return len(list(iter(self)))


METRICS = MetricTable()

# The built-in metrics, each registered under its name with its variant as help (a plugin registers the same way:
# ``@METRICS.register("name", help="variant")`` on a ``(prediction, answers) -> float`` function).
for _metric in [
        Metric("qa_f1", "LongBench v1 qa_f1_score, max over gold answers", _max_over(qa_f1_score)),
        Metric("rouge_l", "LongBench v1 rouge_score (pltrdy rouge, ROUGE-L F), max over gold answers", _max_over(rouge_l_longbench)),
        # the other LongBench v1 tasks (eval.py dataset2metric); "first line": eval.py scores only the first line
        Metric("qa_f1_first_line", "LongBench v1 qa_f1_score on the prediction's first line (triviaqa), max over gold answers",
               _on_first_line(_max_over(qa_f1_score))),
        Metric("rouge_l_first_line", "LongBench v1 rouge_score on the prediction's first line (samsum), max over gold answers",
               _on_first_line(_max_over(rouge_l_longbench))),
        Metric("qa_f1_zh", "LongBench v1 qa_f1_zh_score (jieba words), max over gold answers", _max_over(qa_f1_zh_score)),
        Metric("rouge_zh", "LongBench v1 rouge_zh_score (jieba words, pltrdy rouge ROUGE-L F), max over gold answers",
               _max_over(rouge_zh_score)),
        Metric("classification_first_line", "LongBench v1 classification_score with the record's all_classes on the "
               "prediction's first line (trec, lsht), max over gold answers", _classification, needs_classes=True),
        Metric("retrieval", "LongBench v1 retrieval_score (share of numbers equal to the gold 'Paragraph N'), max over gold answers",
               _max_over(retrieval_score)),
        Metric("retrieval_zh", "LongBench v1 retrieval_zh_score (share of numbers equal to the gold '段落N'), max over gold answers",
               _max_over(retrieval_zh_score)),
        Metric("count", "LongBench v1 count_score (share of numbers equal to the gold count), max over gold answers",
               _max_over(count_score)),
        Metric("code_sim", "LongBench v1 code_sim_score (fuzzywuzzy fuzz.ratio as difflib ratio, stdlib), max over gold answers",
               _max_over(code_sim_score)),
        Metric("infbench_qa_f1", "InfiniteBench En.QA qa_f1_score", infinitebench_qa_f1),
        Metric("infbench_choice", "InfiniteBench En.MC get_score_one_longbook_choice_eng", lambda p, g: float(infinitebench_choice(p, g))),
        Metric("passkey", "InfiniteBench get_score_one_passkey: first integer == label[0] (a string)",
               lambda p, g: float(infinitebench_passkey(p, g[0]))),
        Metric("first_second", "first 'first'/'second' in the prediction equals the label (two passkeys)",
               lambda p, g: float(first_or_second(p, g[0]))),
        Metric("em", "LongRAG single_ans_em (NFD + SQuAD normalisation)", lambda p, g: float(exact_match(p, g))),
        Metric("refined_em", "LongRAG paper §6.2 refined EM", lambda p, g: float(refined_exact_match(p, g))),
        Metric("contains", "normalised gold substring of normalised prediction", lambda p, g: float(contains_answer(p, g))),
        Metric("choice_acc", "first standalone A-D letter equals the gold letter", lambda p, g: float(choice_accuracy(p, g))),
        Metric("choice_set", "set of leading A-D letters equals the gold set (multiple-answer choice)",
               lambda p, g: float(choice_set_accuracy(p, g))),
]:
    registry.METRICS.register(_metric.name, help=_metric.variant, needs_classes=_metric.needs_classes)(_metric.score)


def _freeform_scorer():
    """One offline free-form scorer for both LaRA metrics: its embedder loads on the first answer scored."""
    from lcrag.evaluation.freeform import FreeformScorer

    return FreeformScorer()


_FREEFORM = _freeform_scorer()
for _name, _variant in [
        ("lara", "offline free-form scorer: P(LaRA's GPT-4o judge says True), calibrated on LaRA's published table "
                 "(lcrag/evaluation/calibration/lara_judge.json); task from the item (location, reasoning, comp)"),
        ("lara_hallu", "offline free-form scorer, LaRA's hallucination task: P(the judge says the answer rightly "
                       "declines), calibrated on LaRA's published table"),
]:
    registry.METRICS.register(_name, help=_variant, needs_item=True)(_FREEFORM.score_item)
