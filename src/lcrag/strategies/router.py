"""A learned router: after Self-Route's RAG step, predict from cheap features whether LC will beat RAG on this
question, and go to LC when the predicted probability reaches a threshold (or the threshold that sends a chosen
share of questions to LC).

The router is a logistic regression fitted by ``lcrag route fit`` on evaluation runs that hold LC and Self-Route
rows for the same questions (:mod:`lcrag.evaluation.routing`); stored as a small JSON file, it is applied here with
the standard library only. Features (:data:`FEATURES`) are computed the same way from an evaluation row and from a
live answer, so a router fitted offline routes ``lcrag ask --router FILE`` questions.
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from lcrag.errors import InputError
from lcrag.strategies.routing import is_unanswerable
from lcrag.text import QUESTION_WORDS, question_type
from lcrag.tokenization import count_tokens
from lcrag.types import Answer

if TYPE_CHECKING:
    from lcrag.strategies.base import QueryContext

FEATURE_SET = "lcrag-route-1"
QUESTION_TYPES = (*QUESTION_WORDS, "yes-no", "other")
FEATURES = (
    "top_score", "margin", "spread", "log_document_tokens", "log_context_tokens", "answer_words", "answer_declines",
    "decline_probability", "decline_missing", *(f"question_{t}" for t in QUESTION_TYPES),
)
FORMAT = "lcrag-router"


def features(question: str, scores: Sequence[float], answer: str, decline: float | None, document_tokens: int,
             context_tokens: int) -> list[float]:
    """The router's inputs, in :data:`FEATURES` order: the retrieval score distribution (best, margin to the second,
    spread), the document's and the RAG prompt's length in reader tokens (log), the RAG answer's length and whether
    it declines, its probability of declining (0.5 and a flag when the reader gave none), the question's type."""
    ranked = sorted((float(s) for s in scores), reverse=True) or [0.0]
    mean = sum(ranked) / len(ranked)
    spread = math.sqrt(sum((s - mean) ** 2 for s in ranked) / len(ranked))
    kind = question_type(question)
    return [ranked[0], ranked[0] - (ranked[1] if len(ranked) > 1 else ranked[0]), spread,
            math.log1p(max(0, document_tokens)), math.log1p(max(0, context_tokens)), float(len(answer.split())),
            float(is_unanswerable(answer)), 0.5 if decline is None else float(decline), float(decline is None),
            *(float(kind == t) for t in QUESTION_TYPES)]


@dataclass(frozen=True)
class Router:
    """A fitted logistic regression over standardised :data:`FEATURES`, with the fitting data's predicted
    probabilities kept for calibration (the threshold that sends a given share of questions to LC)."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    calibration: tuple[float, ...]  # predicted P(LC better) on the fitting questions, sorted
    fitted_on: dict

    def probability(self, x: Sequence[float]) -> float:
        z = self.intercept + sum(c * (v - m) / s for c, v, m, s in zip(self.coef, x, self.mean, self.scale))
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0

    def threshold_for_share(self, share: float) -> float:
        """The smallest probability that sends about ``share`` of the fitting questions to LC (1.0 + tiny: none)."""
        if share <= 0:
            return math.inf
        n = len(self.calibration)
        index = min(n - 1, max(0, n - math.ceil(share * n)))
        return self.calibration[index]

    def share_at(self, threshold: float) -> float:
        """The share of fitting questions at or above ``threshold``."""
        n = len(self.calibration)
        return (n - bisect.bisect_left(self.calibration, threshold)) / n if n else 0.0

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": 1, "feature_set": FEATURE_SET, "features": list(FEATURES),
                "mean": list(self.mean), "scale": list(self.scale), "coef": list(self.coef),
                "intercept": self.intercept, "calibration": list(self.calibration), "fitted_on": self.fitted_on}

    def save(self, path: str | Path) -> None:
        from lcrag.storage import atomic_write_text

        atomic_write_text(Path(path), json.dumps(self.to_dict(), indent=1))

    @classmethod
    def load(cls, path: str | Path) -> Router:
        path = Path(path)
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            raise InputError(f"{path}: not a router file ({error})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"{path}: not a router file (fit one with `lcrag route fit`)")
        if data.get("feature_set") != FEATURE_SET or data.get("features") != list(FEATURES):
            raise InputError(f"{path}: fitted for feature set {data.get('feature_set')!r}, not {FEATURE_SET!r}; "
                             "fit it again with this version's `lcrag route fit`")
        try:
            vectors = [tuple(float(v) for v in data[key]) for key in ("mean", "scale", "coef")]
            calibration = tuple(sorted(float(v) for v in data["calibration"]))
            router = cls(*vectors, float(data["intercept"]), calibration, dict(data.get("fitted_on") or {}))
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"{path}: not a router file (bad field: {error})") from None
        if any(len(v) != len(FEATURES) for v in vectors) or not calibration or 0 in router.scale:
            raise InputError(f"{path}: not a router file (its vectors do not match its {len(FEATURES)} features)")
        return router


class RouterCondition:
    """Self-Route's condition from a learned router: LC when P(LC better | features) >= ``threshold``."""

    def __init__(self, router: Router, threshold: float):
        self.router, self.threshold = router, threshold
        self._document_tokens: dict[str, int] = {}

    def document_tokens(self, ctx: QueryContext) -> int:
        key = ctx.document.content_hash
        if key not in self._document_tokens:  # counted once per document: a long text costs one tokenization
            self._document_tokens[key] = count_tokens(ctx.reader.tokenizer, ctx.document.text)
        return self._document_tokens[key]

    def __call__(self, answer: Answer, ctx: QueryContext | None = None) -> bool:
        route_call = answer.calls[-1] if answer.calls else None
        x = features(answer.question, [c.score for c in answer.chunks], answer.text, answer.decline_probability,
                     self.document_tokens(ctx) if ctx is not None else 0,
                     route_call.prompt_tokens if route_call else 0)
        return self.router.probability(x) >= self.threshold
