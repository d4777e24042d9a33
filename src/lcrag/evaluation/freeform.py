"""Free-form answers scored without an LLM: LaRA's LLM judge, imitated offline and calibrated against it.

LaRA (Li et al., ICML 2025) scores a free-form answer with a GPT-4o judge that says True or False
(:mod:`lcrag.evaluation.judge` runs its prompts with any OpenAI-compatible model). Offline, without a judge, this
scorer gives the probability that the judge would say True, from features of the answer against the gold answer:
how much of the gold answer's content it recalls (beyond what the question already says), whether its numbers
match the gold's (``$36.6 million`` matches ``36,639,000``) and whether it states numbers of its own, whether it
declines ("not mentioned in the text"), denies the question's premise or hedges, the bundled MiniLM embedder's
cosine similarity to the gold answer, and the precision, length and contrasts of its *lead* — the first sentences
up to the one that completes what it says of the gold answer. A logistic model per task family maps them to a
probability.

The judge does not care how an answer is phrased, so neither does the scorer: it reads the answer without courtesy
("Sure! … I hope this helps.") or a leading restatement of the question, with every number in one form
(:func:`canonical`), and it reads the lead rather than the answer's length, so elaboration after a complete answer
moves the score little. A caveat ("However, the text does not explicitly say …") is read before the claims it
qualifies, wherever the reader put it. ``benchmarks/validate_lara_scorer.py`` measures this with the perturbations of
:mod:`lcrag.evaluation.perturbations`.

Calibration: LaRA publishes only the judge's accuracy per (reader, length, task, LC/RAG) cell, not per answer, so
the model is fitted on label proportions — its mean probability per cell (each task the mean over document types,
as LaRA averages) against the published cell — by ``benchmarks/validate_lara_scorer.py``, which also reports the
agreement on readers left out of the fit. The fitted parameters ship as ``calibration/lara_judge.json``.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from importlib.resources import files
from pathlib import Path
from types import MappingProxyType
from typing import Any

from lcrag.core.errors import InputError
from lcrag.core.text import content_words, declines, declines_first, hedges

FORMAT = "lcrag-freeform-calibration"
FEATURES = ("new_gold_recall", "number_recall", "gold_has_numbers", "all_gold_numbers", "number_precision", "declines",
            "declines_first", "denies_first", "hedges", "similarity", "lead_precision", "log_lead_terms",
            "lead_contrasts")
TASKS = ("location", "reasoning", "comp", "hallu")  # LaRA's tasks; hallu: the document does not hold the answer
ABSENT_TASK = "hallu"

_NUMBER = re.compile(r"(?<![\w.])(-?)(\$?)(?!0\d)(\d{1,3}(?:,\d{3})+(?![\d,]\d)|\d+)(\.\d+)?(?:\s*(%|percent\b|per cent\b)"
                     r"|\s*(million|billion|thousand|bn)\b|(?<=\d)([mk])\b)?", re.I)
_SCALES = MappingProxyType({"billion": 1e9, "bn": 1e9, "million": 1e6, "thousand": 1e3, "m": 1e6, "k": 1e3})
_CONTRAST = re.compile(r"\b(however|but|instead|although|though|rather)\b", re.I)
# A sentence ends at . ! ? before white space and a word that is not lower-case (or at a line break), unless the
# word before is an initial, a list number (a segment that is only a number) or an abbreviation.
_SENTENCE_BREAK = re.compile(r"[.!?][\"')\]]*\s+(?![a-z])|\n+")
_LOOSE_BREAK = re.compile(r"[.!?][\"')\]]*\s+|\n+")
_NOT_AN_END = re.compile(r"(?:^\s*\d{1,3}|\b[A-Z]|\b(?:Mr|Ms|Mrs|Mme|Mlle|Dr|Prof|Sr|Jr|St|Mt|Gen|Col|Capt|Lt|Rev|Gov"
                         r"|Sen|No|vs|al|Fig|Eq|Sec|Ch|Vol|pp|approx|Inc|Corp|Co|Ltd|e\.g|i\.e|etc))\.$", re.I)


@dataclass(frozen=True)
class Number:
    """A number as written: its value and how it was written (``$36.6 million``: value 36600000.0, currency "$",
    scale "million"; ``1,234``: grouped)."""

    value: float
    start: int
    end: int
    currency: str = ""
    percent: bool = False
    scale: str = ""
    grouped: bool = False


def number_mentions(text: str) -> list[Number]:
    """The numbers in a text, where they are and how they are written."""
    out = []
    for match in _NUMBER.finditer(text):
        sign, currency, digits, fraction, percent, word, letter = match.groups()
        scale = (word or letter or "").lower()
        value = float(sign + digits.replace(",", "") + (fraction or "")) * _SCALES.get(scale, 1.0)
        out.append(Number(value, match.start(), match.end(), currency, bool(percent), scale, "," in digits))
    return out


def numbers(text: str) -> list[float]:
    """The numbers in a text as values: ``$1,234``, ``12.5%``, ``36.6 million`` (→ 36600000.0)."""
    return [n.value for n in number_mentions(text)]


def render_number(value: float) -> str:
    """A value in one plain form: no separators, no scale word, no trailing zeros (36600000, 12.5, 0.05)."""
    return f"{float(f'{value:.12g}'):.6f}".rstrip("0").rstrip(".")


def canonical_numbers(text: str) -> str:
    """The text with every number in one form (``$36.6 million`` and ``$36,600,000`` → ``$36600000``; ``12.5
    percent`` → ``12.5%``): how a reader writes a number does not change what it says."""
    parts, at = [], 0
    for n in number_mentions(text):
        parts += [text[at:n.start], f"{n.currency}{render_number(n.value)}{'%' if n.percent else ''}"]
        at = n.end
    return "".join(parts) + text[at:]


def sentences(text: str, loose: bool = False) -> list[str]:
    """The text's sentences (and lines), stripped, without empty ones; ``loose``: also before a lower-case word."""
    out, at = [], 0
    for match in (_LOOSE_BREAK if loose else _SENTENCE_BREAK).finditer(text):
        if match.group(0)[0] != "\n" and _NOT_AN_END.search(text[at:match.start() + 1]):
            continue
        out.append(text[at:match.end()].strip())
        at = match.end()
    return [s for s in [*out, text[at:].strip()] if s]


# Courtesy that says nothing about the document: openers ("Sure!", "Here is the answer:") and closers ("I hope this
# helps.", "Let me know if you have other questions."). LaRA's judge ignores them; so does the scorer.
_OPENER = re.compile(
    r"\s*(?:(?:sure|certainly|of course|absolutely|okay|ok|yes,? of course|great|good|excellent|interesting) ?"
    r"(?:question|thing)?[!.,]+|(?:i'?d|i would|i'?m|i am) (?:be )?(?:happy|glad|pleased) to help[^.!?:]*[.!?:]+"
    r"|here(?:'s| is| are) (?:the |my |a |what |your )?(?:short |brief |concise )?(?:answer|response|reply|information"
    r"|i found|you asked for|the details)[^.!?:\n]{0,40}[:.!]|(?:answer|response|reply|a)\s*:)", re.I)
_STRONG_CLOSER = (r"(?:i )?hope (?:this|that|it) (?:helps|answers|clarifies)|(?:please )?let me know if"
                  r"|is there anything else|(?:please )?(?:don't|do not) hesitate to")
# A closer is a last sentence; the unmistakable ones also after a missing full stop ("Coral Hayes I hope this helps").
_CLOSER = re.compile(
    rf"(?:(?:^|(?<=[.!?])|(?<=[.!?][\"')\]]))\s*(?:{_STRONG_CLOSER}|feel free to"
    r"|if you have (?:any )?(?:other|more|further)"
    r"|(?:i'?d be |i'?m |i am |i would be )?(?:happy|glad) (?:i could |to )help|thank(?:s| you)\b(?! to\b))"
    rf"|(?<=\s)(?:{_STRONG_CLOSER}))[^.!?]*[.!?]*\s*$", re.I)
# Words a restatement of the question adds to the question's own ("The question asks ...", "You asked: ...").
_ASKING = content_words("question questions ask asks asked asking answer answers regarding regards you want wanted "
                        "know wondering wonder whether about concerning")
_NEGATION = re.compile(r"\b(?:not|no|never|none|neither|nor|without)\b|n't\b", re.I)


def _without_courtesy(text: str) -> str:
    """The text without courtesy openers and closers (kept when nothing else is left)."""
    while (opener := _OPENER.match(text)) and text[opener.end():].strip():
        text = text[opener.end():]
    while (closer := _CLOSER.search(text)) and text[:closer.start()].strip():
        text = text[:closer.start()]
    return text.strip()


def _denies(text: str) -> bool:
    """The text holds a negation ("did not", "no", "never"): a denial of the question's premise is a claim."""
    return bool(_NEGATION.search(text))


def _restates(segment: str, question: str, asked: set[str]) -> bool:
    """The segment only restates the question (most of its words, nothing new, no denial, decline or hedge the
    question does not hold) or only announces it ("You asked:")."""
    said = content_words(segment)
    if not said or any(signal(segment) and not signal(question) for signal in (declines, hedges, _denies)):
        return False
    new = said - asked - _ASKING
    return not new and (said <= _ASKING or len(said & asked) >= 0.6 * len(asked))


def _heads(text: str) -> list[str]:
    """Where the text's first segment may end: its first sentence (or what comes before a colon in it), then the
    same before a lower-case word too ("You asked: "…?" stellar boy says …")."""
    heads = []
    for loose in (False, True):
        first = sentences(text, loose)[0]
        heads.append(first[:colon.start() + 1] if (colon := re.search(r":\s", first)) else first)
    return heads


def _after_restatement(text: str, question: str, asked: set[str]) -> str | None:
    """The rest of the text after a leading restatement of the question, or None when it does not start with one."""
    for head in _heads(text):
        rest = text[len(head):].strip()
        if rest and _restates(head, question, asked):
            return rest
    return None


_CONNECTIVE = re.compile(r"^(?:however|but|although|though|that said|still|nevertheless|yet),?\s+", re.I)


def _caveats_first(text: str) -> str:
    """An answer with both a caveat (a sentence that declines) and a claim, read caveats first and without the
    connectives that tied them ("X. However, the text does not say Y." and "The text does not say Y. However, X."
    both read "The text does not say Y. X."): the judge reads the same doubt and the same claim in either order."""
    parts = sentences(text)
    declining = [declines(p) for p in parts]
    if len(parts) < 2 or all(declining) or not any(declining):
        return text
    ordered = [p for p, d in zip(parts, declining) if d] + [p for p, d in zip(parts, declining) if not d]
    return " ".join(s[:1].upper() + s[1:] for s in (_CONNECTIVE.sub("", p) for p in ordered))


def canonical_answer(question: str, answer: str) -> str:
    """What the answer says, as the scorer reads it: courtesy and a leading restatement of the question dropped,
    numbers in one form, caveats before claims. Style the judge does not score does not change the features."""
    text, question = _without_courtesy(canonical_numbers(answer)), canonical_numbers(question)
    asked = content_words(question)
    while text and (rest := _after_restatement(text, question, asked)) is not None:
        text = _without_courtesy(rest)
    return _caveats_first(text)


def _unit(value: float) -> float:
    """The precision a number is written to: its last decimal place, or the last non-zero digit of a large whole
    number (36600000: 100000); whole numbers under 10,000 (years, counts) are exact."""
    text = render_number(abs(value))
    if "." in text:
        return 10.0 ** -len(text.split(".")[1])
    return 10.0 ** (len(text) - len(text.rstrip("0"))) if abs(value) >= 1e4 else 1.0


def _same_number(wanted: float, said: float) -> bool:
    """``said`` is ``wanted`` rounded to the precision it is written to ("$36.6 million" for 36,639,000, "12%" for
    12.47%, but not 2022 for 2023), also in thousands (financial tables: 36,639 for 36,639,000, not 3 for 3,000)."""
    factors = (1.0, 1e3, 1e-3) if min(abs(wanted), abs(said)) >= 100 else (1.0,)
    return any(abs(wanted * f - said) <= _unit(said) / 2 + 1e-9 * abs(said) for f in factors)


def _stated(values: Sequence[float], said: Sequence[float]) -> list[float]:
    """The ``values`` that ``said`` states, rounded or not."""
    return [v for v in values if any(_same_number(v, s) for s in said)]


def number_recall(gold: str, answer: str) -> float | None:
    """The share of the gold answer's numbers the answer states (None when the gold has none)."""
    wanted = numbers(gold)
    return len(_stated(wanted, numbers(answer))) / len(wanted) if wanted else None


def canonical(question: str, gold: str, answer: str) -> tuple[str, str, str]:
    """The question, gold answer and answer as the scorer reads them: numbers in one form in all three, the answer
    without courtesy or a restatement of the question (:func:`canonical_answer`)."""
    return canonical_numbers(question), canonical_numbers(gold), canonical_answer(question, answer)


def _number_precision(question: str, gold: str, answer: str) -> float:
    """The share of the answer's numbers that are the gold answer's or the question's (1 when it states none): a
    figure of its own is usually a wrong one."""
    said, known = numbers(answer), numbers(gold) + numbers(question)
    return sum(bool(_stated(known, [s])) for s in said) / len(said) if said else 1.0


def _content(text: str) -> tuple[set[str], list[float]]:
    """What a text says: its content words (numbers aside) and its numbers, which match when rounded."""
    return content_words(_NUMBER.sub(" ", text)), numbers(text)


def _recall(wanted: tuple[set[str], list[float]], said: tuple[set[str], list[float]]) -> float | None:
    total = len(wanted[0]) + len(wanted[1])
    return (len(wanted[0] & said[0]) + len(_stated(wanted[1], said[1]))) / total if total else None


def _lead(wanted: tuple[set[str], list[float]], parts: list[str]) -> tuple[int, int, str]:
    """The answer's lead: its first sentences, up to the one that completes what the answer says of the gold answer
    (``wanted``: the gold's content); how many content words and numbers it holds, how many of them are the gold's,
    and its text. What follows is elaboration, which the judge, comparing with the gold answer, does not need: the
    features read the lead, not the answer's length."""
    contents = [_content(part) for part in parts]
    need_words = wanted[0] & set().union(*(c[0] for c in contents))
    need_values = _stated(wanted[1], [v for c in contents for v in c[1]])
    words, values = set(), []
    for count, (part_words, part_values) in enumerate(contents, 1):
        words, values = words | part_words, values + part_values
        if need_words <= words and len(_stated(need_values, values)) == len(need_values):
            break
    gold = len(wanted[0] & words) + sum(bool(_stated(wanted[1], [v])) for v in values)
    return len(words) + len(values), gold, " ".join(parts[:count])


def answer_features(question: str, gold: str, answer: str, similarity: float) -> list[float]:
    """The scorer's inputs, in :data:`FEATURES` order, from the texts :func:`canonical` gives (``similarity``: the
    embedder's cosine of those answer and gold texts)."""
    wanted, said, asked = _content(gold), _content(answer), _content(question)
    # What the gold answer adds to the question: recalling the question proves nothing.
    new = (wanted[0] - asked[0], [v for v in wanted[1] if not _stated([v], asked[1])])
    number, parts = number_recall(gold, answer), sentences(answer) or [answer]
    size, from_gold, lead_text = _lead(wanted, parts)
    recall = _recall(new, said)
    return [(_recall(wanted, said) or 0.0) if recall is None else recall,
            number or 0.0, float(number is not None), float(number is not None and number >= 1.0),
            _number_precision(question, gold, answer), float(declines(answer)), float(declines_first(answer)),
            float(_denies(parts[0]) and not _denies(question)), float(hedges(answer)), similarity,
            from_gold / size if size else 0.0, math.log1p(size), float(bool(_CONTRAST.search(lead_text)))]


@dataclass(frozen=True)
class Calibration:
    """A logistic model per task group over standardised :data:`FEATURES`, with a bias per task."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    weights: dict[str, tuple[float, ...]]  # group -> one weight per feature
    bias: dict[str, float]  # task -> bias
    groups: dict[str, str]  # task -> group
    fitted_on: dict = field(default_factory=dict)

    def probability(self, x: Sequence[float], task: str) -> float:
        task = task if task in self.bias else "location"
        w = self.weights[self.groups[task]]
        z = self.bias[task] + sum(c * (v - m) / s for c, v, m, s in zip(w, x, self.mean, self.scale))
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0

    def to_dict(self) -> dict:
        return {"format": FORMAT, "features": list(FEATURES), "mean": list(self.mean), "scale": list(self.scale),
                "weights": {g: list(w) for g, w in self.weights.items()}, "bias": dict(self.bias),
                "groups": dict(self.groups), "fitted_on": self.fitted_on}

    @classmethod
    def from_dict(cls, data: Any, where: str = "calibration") -> Calibration:
        if not isinstance(data, dict) or data.get("format") != FORMAT or data.get("features") != list(FEATURES):
            raise InputError(f"{where}: not a free-form scorer calibration for this version's features")
        try:
            weights = {str(g): tuple(float(v) for v in w) for g, w in data["weights"].items()}
            calibration = cls(tuple(float(v) for v in data["mean"]), tuple(float(v) for v in data["scale"]), weights,
                              {str(t): float(b) for t, b in data["bias"].items()},
                              {str(t): str(g) for t, g in data["groups"].items()}, dict(data.get("fitted_on") or {}))
        except (KeyError, TypeError, ValueError, AttributeError) as error:
            raise InputError(f"{where}: bad calibration field ({error})") from None
        if any(len(v) != len(FEATURES) for v in (calibration.mean, calibration.scale, *weights.values())):
            raise InputError(f"{where}: its vectors do not match the {len(FEATURES)} features")
        return calibration

    @classmethod
    def load(cls, path: str | Path) -> Calibration:
        try:
            data = json.loads(Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise InputError(f"{path}: not a calibration file ({error})") from None
        return cls.from_dict(data, str(path))

    @classmethod
    def bundled(cls) -> Calibration:
        """The calibration fitted on LaRA's published judge table (``calibration/lara_judge.json``)."""
        resource = files("lcrag.evaluation").joinpath("calibration", "lara_judge.json")
        return cls.from_dict(json.loads(resource.read_text(encoding="utf-8")), "lara_judge.json")


class FreeformScorer:
    """P(LaRA's judge says True) for an answer; the embedder is loaded on first use and gold answers embedded once."""

    def __init__(self, calibration: Calibration | None = None, embedder: Any = None):
        self._calibration = calibration
        self._embedder = embedder
        self._gold_vectors: dict[str, Any] = {}

    @cached_property
    def calibration(self) -> Calibration:
        return self._calibration or Calibration.bundled()

    @cached_property
    def embedder(self) -> Any:
        """The bundled MiniLM behind the on-disk vector cache (``CACHE/query-vectors.sqlite``): an answer scored
        again (a resumed run, the LC and route scores of one answer, a re-scored run) is not embedded again."""
        if self._embedder is not None:
            return self._embedder
        from lcrag.core.paths import default_cache_dir
        from lcrag.retrieval.embedders import make_embedder
        from lcrag.retrieval.query_cache import cached_query_embedder

        return cached_query_embedder("minilm", lambda: make_embedder("minilm"), default_cache_dir())

    def similarity(self, answer: str, gold: str) -> float:
        if gold not in self._gold_vectors:
            self._gold_vectors[gold] = self.embedder.embed([gold])[0]
        return float(self.embedder.embed([answer])[0] @ self._gold_vectors[gold])

    def score(self, question: str, gold: str, answer: str | None, task: str) -> float:
        """The probability; 0 for a missing answer (LaRA's judge saw the failed call's ``False`` and said so)."""
        if not isinstance(answer, str) or not answer.strip():
            return 0.0
        question, gold, answer = canonical(question, gold, answer)
        x = answer_features(question, gold, answer, self.similarity(answer, gold))
        return self.calibration.probability(x, task)

    def score_item(self, prediction: str, item: Any) -> float:
        """As a metric: the best score over the item's gold answers, its task from ``item.meta["task"]``."""
        task = (item.meta or {}).get("task") or (ABSENT_TASK if item.metric == "lara_hallu" else "location")
        return max((self.score(item.question, gold, prediction, task) for gold in item.answers), default=0.0)


__all__ = ["ABSENT_TASK", "Calibration", "FEATURES", "FreeformScorer", "Number", "TASKS", "answer_features", "canonical",
           "canonical_answer", "canonical_numbers", "content_words", "number_mentions", "number_recall", "numbers",
           "render_number", "sentences"]
