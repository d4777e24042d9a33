"""Free-form answers scored without an LLM: LaRA's LLM judge, imitated offline and calibrated against it.

LaRA (Li et al., ICML 2025) scores a free-form answer with a GPT-4o judge that says True or False
(:mod:`lcrag.evaluation.judge` runs its prompts with any OpenAI-compatible model). Offline, without a judge, this
scorer gives the probability that the judge would say True, from features of the answer against the gold answer:
how much of the gold answer's content it recalls (all of it, and what the question did not already say), its
precision, whether its numbers match the gold's (``$36.6 million`` matches ``36,639,000``), whether it declines
("not mentioned in the text"), hedges or contrasts, its length, and the bundled MiniLM embedder's cosine similarity
to the gold answer. A logistic model per task family maps them to a probability.

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
from typing import Any

from lcrag.errors import InputError
from lcrag.text import WORD, content_words, declines, declines_first, hedges

FORMAT = "lcrag-freeform-calibration"
FEATURES = ("gold_recall", "new_gold_recall", "precision", "number_recall", "gold_has_numbers", "declines",
            "declines_first", "log_answer_words", "log_gold_words", "hedges", "contrasts", "log_sentences",
            "similarity")
TASKS = ("location", "reasoning", "comp", "hallu")  # LaRA's tasks; hallu: the document does not hold the answer
ABSENT_TASK = "hallu"

_NUMBER = re.compile(r"(?<![\w.])[-+]?\$?\d[\d,]*(?:\.\d+)?%?(?:\s*(?:million|billion|thousand|bn|m|k)\b)?", re.I)
_SCALES = (("billion", 1e9), ("bn", 1e9), ("million", 1e6), ("thousand", 1e3), ("m", 1e6), ("k", 1e3))
_CONTRAST = re.compile(r"\b(however|but|instead|although|though|rather)\b", re.I)
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)")


def numbers(text: str) -> list[float]:
    """The numbers in a text as values: ``$1,234``, ``12.5%``, ``36.6 million`` (→ 36600000.0)."""
    values = []
    for match in _NUMBER.finditer(text):
        token = match.group(0).lower().replace("$", "").replace(",", "").replace("+", "").strip()
        factor = 1.0
        for word, scale in _SCALES:
            if token.endswith(word):
                token, factor = token[: -len(word)].strip(), scale
                break
        try:
            values.append(float(token.rstrip("%").strip()) * factor)
        except ValueError:
            continue
    return values


def _same_number(a: float, b: float) -> bool:
    # Rounded figures count ("$36.6 million" for 36,639,000), as do figures in thousands (financial tables).
    return any(abs(a * f - b) <= 0.006 * abs(a * f) + 1e-9 for f in (1.0, 1e3, 1e-3))


def number_recall(gold: str, answer: str) -> float | None:
    """The share of the gold answer's numbers the answer states (None when the gold has none)."""
    wanted, said = numbers(gold), numbers(answer)
    if not wanted:
        return None
    return sum(any(_same_number(w, s) for s in said) for w in wanted) / len(wanted)


def answer_features(question: str, gold: str, answer: str, similarity: float) -> list[float]:
    """The scorer's inputs, in :data:`FEATURES` order (``similarity``: the embedder's cosine of answer and gold)."""
    gold_words, said, asked = content_words(gold), content_words(answer), content_words(question)
    new = gold_words - asked  # what the gold answer adds to the question: recalling the question proves nothing
    recall = len(gold_words & said) / len(gold_words) if gold_words else 0.0
    number = number_recall(gold, answer)
    return [recall, len(new & said) / len(new) if new else recall,
            len(gold_words & said) / len(said) if said else 0.0,
            number or 0.0, float(number is not None), float(declines(answer)), float(declines_first(answer)),
            math.log1p(len(WORD.findall(answer.lower()))), math.log1p(len(WORD.findall(gold.lower()))),
            float(hedges(answer)), float(bool(_CONTRAST.search(answer))),
            math.log1p(len(_SENTENCE_END.findall(answer))), similarity]


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
        from lcrag.paths import default_cache_dir
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
        x = answer_features(question, gold, answer, self.similarity(answer, gold))
        return self.calibration.probability(x, task)

    def score_item(self, prediction: str, item: Any) -> float:
        """As a metric: the best score over the item's gold answers, its task from ``item.meta["task"]``."""
        task = (item.meta or {}).get("task") or (ABSENT_TASK if item.metric == "lara_hallu" else "location")
        return max((self.score(item.question, gold, prediction, task) for gold in item.answers), default=0.0)


__all__ = ["ABSENT_TASK", "Calibration", "FEATURES", "FreeformScorer", "TASKS", "answer_features", "content_words",
           "number_recall", "numbers"]
