"""A learned router: after Self-Route's RAG step, predict from cheap features whether LC will beat RAG on this
question, and go to LC when the predicted probability reaches a threshold (or the threshold that sends a chosen
share of questions to LC).

The router is a logistic regression fitted by ``lcrag route fit`` on evaluation runs that hold LC and Self-Route
rows for the same questions (:mod:`lcrag.evaluation.routing`); stored as a small JSON file, it is applied here with
the standard library only. Features (:data:`FEATURES`) are computed the same way from an evaluation row and from a
live answer, so a router fitted offline routes ``lcrag ask --router FILE`` questions.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
import os
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING

from lcrag.core.errors import InputError
from lcrag.readers.base import reader_identity
from lcrag.strategies.routing.calibration import Label, RoutingCalibration, answers_agree, group_of
from lcrag.strategies.routing.conditional import is_unanswerable
from lcrag.strategies.routing.share_control import Decision, ShareLedgers, ShareTarget, question_key
from lcrag.core.text import QUESTION_WORDS, content_words, declines, declines_first, hedges, question_type
from lcrag.core.tokenization import count_tokens
from lcrag.core.types import Answer

if TYPE_CHECKING:
    from lcrag.strategies.base import QueryContext

FEATURE_SET = "lcrag-route-3"
QUESTION_TYPES = (*QUESTION_WORDS, "yes-no", "other")
FEATURES = (
    "top_score", "margin", "spread", "log_document_tokens", "log_context_tokens", "answer_words", "answer_declines",
    "decline_probability", "decline_missing", *(f"question_{t}" for t in QUESTION_TYPES),
    # /2: signals a reader without token probabilities still gives (recorded answers, most APIs' chat models)
    "answer_declines_in_words", "answer_declines_first", "answer_hedges", "question_terms_in_document",
    "question_terms_in_chunks", "log_question_words", "question_compares",
    # /3: whether the RAG answer says what its chunks (and the document) say: its own terms and its numbers
    "answer_new_terms", "answer_terms_in_chunks", "answer_terms_in_document", "answer_numbers",
    "answer_numbers_in_chunks", "answer_numbers_in_document",
)
FORMAT = "lcrag-router"
CALIBRATION_POINTS = 1001  # quantiles of the fitting questions' scores a router file keeps
# Routers shipped in the package (lcrag/strategies/routing/routers/NAME.json), usable by their bare name: ``--router lara``
# (a file is given by a path: ./lara, lara.json).
BUNDLED = ("lara",)
NUMBER = re.compile(r"\d+(?:[.,]\d+)*")  # 36.6, 36,600,000, 2019: a figure as written, without trailing punctuation
_COMPARES = re.compile(r"\b(compare|compared|comparison|differ|difference|different|both|contrast|whereas|versus|vs)\b",
                       re.I)


@dataclass(frozen=True)
class AnswerGrounding:
    """Whether the RAG answer says what it read: how many content words it adds to the question's, the share of
    those found in the retrieved chunks and in the document, and the same for the figures it gives (a figure the
    chunks never wrote was computed, pieced together or made up). The router learns what they say of LC's gain:
    on LaRA's recorded answers they raised held-share quality in leave-one-reader-out and unseen-document tests
    (benchmarks/results/routing_lara.md). The defaults (nothing added, all found) are what rows from before these
    signals count."""

    new_terms: int = 0
    terms_in_chunks: float = 1.0
    terms_in_document: float = 1.0
    numbers: int = 0
    numbers_in_chunks: float = 1.0
    numbers_in_document: float = 1.0

    def to_row(self) -> dict:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in asdict(self).items()}

    @classmethod
    def from_row(cls, row: dict | None) -> AnswerGrounding:
        fields = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in (row or {}).items() if k in fields})


@dataclass(frozen=True)
class RouteSignals:
    """What a router reads after the RAG step, before choosing: the question, the retrieval scores, the RAG
    answer and its decline probability (None: the reader gave none), lengths in reader tokens, and how many of the
    question's key terms occur anywhere in the document and in the retrieved chunks (a term absent from the whole
    document says the answer is not there to find; present in the document but not in the chunks, that retrieval
    missed it)."""

    question: str
    scores: Sequence[float]
    answer: str
    decline: float | None
    document_tokens: int
    context_tokens: int
    terms_in_document: float = 1.0
    terms_in_chunks: float = 1.0
    grounding: AnswerGrounding = AnswerGrounding()


def numbers_in(text: str) -> set[str]:
    """The figures a text writes (as written: "36.6" and "36,600,000" are different figures)."""
    return set(NUMBER.findall(text))


def term_share(terms: set[str], words: set[str] | str) -> float:
    """The share of ``terms`` found in ``words`` (a set of content words, or a text); 1.0 when there are none."""
    if not terms:
        return 1.0
    found = words if isinstance(words, set) else content_words(words)
    return len(terms & found) / len(terms)


def retrieved_text(text: str, chunks: Sequence) -> str:
    """What the retrieved chunks (``ChunkUsed`` spans of ``text``; summaries left out) say, joined."""
    return " ".join(text[c.start:c.end] for c in chunks if not c.layer)


def text_signals(question: str, answer: str, document_words: set[str], document_numbers: set[str],
                 retrieved: str) -> tuple[float, float, AnswerGrounding]:
    """The router's text signals, live and in evaluation rows: the share of the question's key terms in the
    document (its content words) and in the retrieved text, and the RAG answer's grounding in both
    (:class:`AnswerGrounding`). The retrieved text is read once for both."""
    asked, found_terms, found_numbers = content_words(question), content_words(retrieved), numbers_in(retrieved)
    terms, numbers = content_words(answer) - asked, numbers_in(answer)
    return (term_share(asked, document_words), term_share(asked, found_terms),
            AnswerGrounding(len(terms), term_share(terms, found_terms), term_share(terms, document_words),
                            len(numbers), term_share(numbers, found_numbers), term_share(numbers, document_numbers)))


def features(s: RouteSignals) -> list[float]:
    """The router's inputs, in :data:`FEATURES` order: the retrieval score distribution (best, margin to the second,
    spread), the document's and the RAG prompt's length in reader tokens (log), the RAG answer's length and whether
    it declines ("unanswerable"; in its own words; in its first sentence) or hedges, its probability of declining
    (0.5 and a flag when the reader gave none), the question's type, length and whether it compares, and the share
    of the question's key terms in the document and in the retrieved chunks."""
    ranked = sorted((float(v) for v in s.scores), reverse=True) or [0.0]
    mean = sum(ranked) / len(ranked)
    spread = math.sqrt(sum((v - mean) ** 2 for v in ranked) / len(ranked))
    kind = question_type(s.question)
    return [ranked[0], ranked[0] - (ranked[1] if len(ranked) > 1 else ranked[0]), spread,
            math.log1p(max(0, s.document_tokens)), math.log1p(max(0, s.context_tokens)),
            float(len(s.answer.split())), float(is_unanswerable(s.answer)),
            0.5 if s.decline is None else float(s.decline), float(s.decline is None),
            *(float(kind == t) for t in QUESTION_TYPES),
            float(declines(s.answer)), float(declines_first(s.answer)), float(hedges(s.answer)),
            s.terms_in_document, s.terms_in_chunks, math.log1p(len(s.question.split())),
            float(bool(_COMPARES.search(s.question))), *grounding_features(s.grounding)]


def grounding_features(g: AnswerGrounding) -> list[float]:
    """The last features, in :data:`FEATURES` order (a benchmark that measures grounding later replaces them)."""
    return [float(g.new_terms), g.terms_in_chunks, g.terms_in_document, float(g.numbers), g.numbers_in_chunks,
            g.numbers_in_document]


@dataclass(frozen=True)
class Trees:
    """Boosted regression trees (scikit-learn's HistGradientBoostingRegressor, exported) predicting LC's gain over
    the RAG answer, LC − RAG in score points: ``baseline`` plus every tree's leaf. A node is ``[feature, threshold,
    left, right, leaf value]``; a leaf has feature -1. Applied with the standard library."""

    baseline: float
    trees: tuple[tuple[tuple[float, ...], ...], ...]

    def predict(self, x: Sequence[float]) -> float:
        total = self.baseline
        for nodes in self.trees:
            node = nodes[0]
            while node[0] >= 0:
                node = nodes[int(node[2] if x[int(node[0])] <= node[1] else node[3])]
            total += node[4]
        return total

    @classmethod
    def from_dict(cls, data: dict) -> Trees:
        trees = tuple(tuple(tuple(float(v) for v in node) for node in tree) for tree in data["trees"])
        if any(len(node) != 5 or node[0] >= len(FEATURES) or (node[0] >= 0 and not (0 <= node[2] < len(tree)
               and 0 <= node[3] < len(tree))) for tree in trees for node in tree) or any(not t for t in trees):
            raise ValueError("a tree node is not [feature, threshold, left, right, value] within its tree")
        return cls(float(data["baseline"]), trees)


@dataclass(frozen=True)
class Router:
    """A fitted model over :data:`FEATURES` scoring how much LC beats RAG on a question: a logistic regression over
    standardised features (P(LC better)), or boosted trees (:class:`Trees`, LC's expected gain); the fitting
    questions' scores are kept for calibration (the threshold that sends a given share of questions to LC)."""

    mean: tuple[float, ...]
    scale: tuple[float, ...]
    coef: tuple[float, ...]
    intercept: float
    calibration: tuple[float, ...]  # the model's score on the fitting questions, sorted
    fitted_on: dict
    trees: Trees | None = None
    default_share: float | None = None  # the LC share its threshold defaults to (a shipped router's operating point)

    def probability(self, x: Sequence[float]) -> float:
        """The router's score: P(LC better) for a logistic router, LC's expected gain for a trees router."""
        if self.trees is not None:
            return self.trees.predict(x)
        z = self.intercept + sum(c * (v - m) / s for c, v, m, s in zip(self.coef, x, self.mean, self.scale))
        return 1.0 / (1.0 + math.exp(-z)) if z > -700 else 0.0

    @property
    def default_threshold(self) -> float:
        """Without --route-threshold or --lc-share: the shipped operating point, else P >= 0.5 (gain > 0)."""
        if self.default_share is not None:
            return self.threshold_for_share(self.default_share)
        return 1e-9 if self.trees is not None else 0.5

    def threshold_for_share(self, share: float) -> float:
        """The smallest score that sends about ``share`` of the fitting questions to LC (1.0 + tiny: none)."""
        if share <= 0:
            return math.inf
        n = len(self.calibration)
        index = min(n - 1, max(0, n - math.ceil(share * n)))
        return self.calibration[index]

    @functools.cached_property
    def digest(self) -> str:
        """What names this router's scores (its whole content): the key of its run-time share ledgers."""
        return hashlib.sha256(json.dumps(self.to_dict(), sort_keys=True).encode("utf-8")).hexdigest()[:32]

    def to_dict(self) -> dict:
        # The calibration as at most CALIBRATION_POINTS quantiles: a share's threshold needs no more.
        n = len(self.calibration)
        points = self.calibration if n <= CALIBRATION_POINTS else [
            self.calibration[round(i * (n - 1) / (CALIBRATION_POINTS - 1))] for i in range(CALIBRATION_POINTS)]
        model = ({"model": "trees", "trees": {"baseline": self.trees.baseline, "trees": self.trees.trees}}
                 if self.trees is not None else {"model": "logistic"})
        return {"format": FORMAT, "version": 1, "feature_set": FEATURE_SET, "features": list(FEATURES), **model,
                "mean": list(self.mean), "scale": list(self.scale), "coef": list(self.coef),
                "intercept": self.intercept, "calibration": list(points),
                **({"default_share": self.default_share} if self.default_share is not None else {}),
                "fitted_on": self.fitted_on}

    def save(self, path: str | Path) -> None:
        from lcrag.core.files import atomic_write_text

        atomic_write_text(Path(path), json.dumps(self.to_dict(), separators=(",", ":")))

    @classmethod
    def load(cls, path: str | Path) -> Router:
        """A router file (a path with a slash or a suffix), or a router shipped with lcrag by its bare name
        (:data:`BUNDLED`, e.g. ``lara``: :func:`shipped_name`); parsed once per version of the file (by its path,
        size and modification time), however many questions name it."""
        return _load_router(router_file_identity(path))

    @classmethod
    def parse(cls, path: str | Path) -> Router:
        """The router shipped under the bare name ``path``, or in the file at the path ``path``, parsed now."""
        name = shipped_name(path)
        try:
            data = json.loads(bundled_router(name) if name else Path(path).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError) as error:
            reason = "no such file" if isinstance(error, FileNotFoundError) else error
            raise InputError(f"{path}: not a router file ({reason})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"{path}: not a router file (fit one with `lcrag route fit`)")
        if data.get("feature_set") != FEATURE_SET or data.get("features") != list(FEATURES):
            raise InputError(f"{path}: fitted for feature set {data.get('feature_set')!r}, not {FEATURE_SET!r}; "
                             "fit it again with this version's `lcrag route fit`")
        try:
            vectors = [tuple(float(v) for v in data[key]) for key in ("mean", "scale", "coef")]
            calibration = tuple(sorted(float(v) for v in data["calibration"]))
            trees = Trees.from_dict(data["trees"]) if data.get("model") == "trees" else None
            share = data.get("default_share")
            router = cls(*vectors, float(data["intercept"]), calibration, dict(data.get("fitted_on") or {}), trees,
                         None if share is None else float(share))
        except (KeyError, TypeError, ValueError) as error:
            raise InputError(f"{path}: not a router file (bad field: {error})") from None
        if any(len(v) != len(FEATURES) for v in vectors) or not calibration or 0 in router.scale:
            raise InputError(f"{path}: not a router file (its vectors do not match its {len(FEATURES)} features)")
        return router


def is_router_path(spec: str | Path) -> bool:
    """Whether a router spec names a file: a path with a slash or a suffix (``./lara``, ``x/lara.json``,
    ``lara.json``); a bare name (``lara``) names a shipped router whatever the working directory holds."""
    text = str(spec)
    return any(sep in text for sep in {"/", os.sep, os.altsep or "/"}) or bool(Path(text).suffix)


def shipped_name(spec: str | Path) -> str | None:
    """The shipped router a spec names, or None when it names a file (:func:`is_router_path`); a bare name that
    is no shipped router's is a one-line error, so a file or folder called ``lara`` never hides ``lara``."""
    if is_router_path(spec):
        return None
    if str(spec) not in BUNDLED:
        raise InputError(f"{spec}: not a router shipped with lcrag (shipped: {', '.join(BUNDLED)}); a router file "
                         f"is given by a path with a slash or a suffix (./{spec}, {spec}.json)")
    return str(spec)


def router_file_identity(path: str | Path) -> tuple:
    """What names a version of a router: a shipped router's name, or a file's path, size and modification time (a
    file changed in place is another router); an unreadable path (or unknown name) as itself (loading it says what
    is wrong)."""
    if not is_router_path(path):
        return (str(path),)
    try:
        stat = Path(path).stat()
    except (OSError, ValueError):
        return (str(path),)
    return (str(path), stat.st_size, stat.st_mtime_ns, stat.st_ino)


@functools.lru_cache(maxsize=32)
def _load_router(identity: tuple) -> Router:
    """Routers parsed by :func:`router_file_identity`, the last 32 kept: questions, settings checks and strategies
    naming one share it (a router is immutable)."""
    return Router.parse(identity[0])


def bundled_router(name: str) -> str:
    """The text of a router shipped with lcrag (docs/routers.md says what each was fitted on)."""
    return files("lcrag.strategies.routing").joinpath("routers", f"{name}.json").read_text(encoding="utf-8")


def document_text(ctx: QueryContext) -> str:
    """The text the router measures: the document's; a corpus index has none (as in rows without a document)."""
    return ctx.document.text or ""


def declining(answer: str) -> bool:
    """A RAG answer that declines, as ``declines_to_lc`` reads it: "unanswerable", or a first sentence saying the
    text does not hold the answer (a caveat after an answer is not a decline)."""
    return is_unanswerable(answer) or declines_first(answer)


def _lc_tokens(ctx: QueryContext | None, document_tokens: int) -> int:
    """What LC would read of the document: all of it, up to the reader's window (when the reader knows it)."""
    if ctx is None:
        return document_tokens
    try:
        return min(document_tokens, ctx.reader.context_window)
    except InputError:  # a server that does not say its window: LC will ask for --context-window, not this
        return document_tokens


class RouterCondition:
    """Self-Route's condition from a learned router: LC when the router's score reaches a threshold — a fixed one
    (``threshold``), or the one that holds an LC share at run time (``target``; :mod:`share_control`), which a
    router shipped with an operating point (``default_share``) holds unless told otherwise. With ``declines_to_lc``
    a RAG answer that declines ("unanswerable", or a first sentence that says the text does not hold it) goes to LC
    whatever its score, as in Self-Route's written rule (a held share counts it)."""

    def __init__(self, router: Router, threshold: float | None = None, target: ShareTarget | None = None,
                 ledgers: ShareLedgers | None = None, declines_to_lc: bool = False):
        self.router, self.threshold, self.declines_to_lc = router, threshold, declines_to_lc
        if threshold is None and target is None and router.default_share is not None:
            target = ShareTarget(router.default_share)
        self.target = target if threshold is None else None
        if self.threshold is None and self.target is None:
            self.threshold = router.default_threshold
        self._ledgers = ledgers or ShareLedgers()  # a context's ledgers (the pipeline's cache) come first

    @staticmethod
    def document(ctx: QueryContext) -> tuple[int, set[str], set[str]]:
        """The document's length in reader tokens, its content words and its figures, computed once per answering
        context (kept with it, so every router and threshold asked about the document shares them, and they go
        when it goes)."""
        tokenizer, text = ctx.reader.tokenizer, document_text(ctx)
        return ctx.memo(("router-document", ctx.document.content_hash, tokenizer.name), lambda: (
            count_tokens(tokenizer, text), content_words(text), numbers_in(text)))

    def signals(self, answer: Answer, ctx: QueryContext | None) -> RouteSignals:
        route_call = answer.calls[-1] if answer.calls else None
        # no document: every term counts as found, as in rows without them
        tokens, signals = 0, (1.0, 1.0, AnswerGrounding())
        if ctx is not None:
            tokens, words, figures = self.document(ctx)
            signals = text_signals(answer.question, answer.text, words, figures,
                                   retrieved_text(document_text(ctx), answer.chunks))
        return RouteSignals(answer.question, [c.score for c in answer.chunks], answer.text,
                            answer.decline_probability, tokens, route_call.prompt_tokens if route_call else 0,
                            *signals)

    def __call__(self, answer: Answer, ctx: QueryContext | None = None) -> bool | Decision:
        signals = self.signals(answer, ctx)
        ledgers = (ctx.share_ledgers if ctx is not None and ctx.share_ledgers is not None else self._ledgers)
        reader = reader_identity(ctx.reader) if ctx is not None else ""
        score, calibration = self.score(answer, signals, ledgers, reader)
        declined = self.declines_to_lc and declining(answer.text)
        key = (question_key(answer.question, ctx.document.content_hash, "declines-to-lc" * self.declines_to_lc)
               if ctx is not None else None)
        explore = calibration is not None and key is not None and calibration.explores(key) and _cached(ctx)
        if self.target is None:
            sent = declined or score >= self.threshold
            if not sent and explore:
                self._explore(answer, ctx, ledgers, calibration)
            return sent or explore
        ledger = ledgers.get(reader, self.router.digest, self.router.calibration)
        decision = ledger.decide(self.target, score, _lc_tokens(ctx, signals.document_tokens),
                                 signals.context_tokens, key, declined or explore)
        explored = explore and decision.declined and not declined  # LC only because it was explored
        if explored and not decision.repeated:
            self._explore(answer, ctx, ledgers, calibration)
        if calibration is None:
            return decision
        group = group_of(answer.question, answer.text)
        said = {**calibration.summary(), "factor": round(calibration.factor(group), 4)}
        return dataclasses.replace(decision, calibration=said, explored=explored,
                                   declined=decision.declined and not explored)

    def score(self, answer: Answer, signals: RouteSignals, ledgers: ShareLedgers,
              reader: str) -> tuple[float, RoutingCalibration | None]:
        """The router's score, adapted to the reader when ``lcrag route calibrate`` made it a calibration in this
        cache (:mod:`lcrag.strategies.routing.calibration`), and that calibration."""
        score = self.router.probability(features(signals))
        store = ledgers.calibrations  # None for ledgers kept in memory only (no cache directory)
        calibration = store.load(reader, self.router.digest) if store is not None and reader else None
        if calibration is None:
            return score, None
        return calibration.adapt(score, group_of(answer.question, answer.text)), calibration

    def _explore(self, answer: Answer, ctx: QueryContext, ledgers: ShareLedgers,
                 calibration: RoutingCalibration) -> None:
        """LC's answer to a question the router kept on RAG, and whether the two agree added to the reader's
        calibration. LC is asked here through the completion cache (:func:`_cached`), so the fallback that follows
        (this question goes to LC, billed and counted) reads the same answer from it instead of asking again."""
        from lcrag.readers import streaming
        from lcrag.core.registry import STRATEGIES  # LC by its registered name: lc_and_rag imports this module

        with streaming.provisional():  # the fallback's answer is the one shown
            lc = STRATEGIES.get("lc").create().run(ctx, answer.question)
        label = Label(group_of(answer.question, answer.text), not answers_agree(answer.question, answer.text, lc.text),
                      "explore")
        ledgers.calibrations.add(calibration.reader, calibration.router, [label], calibration.prior,
                                 calibration.strength, calibration.explore)


def _cached(ctx: QueryContext) -> bool:
    """Whether the reader answers through a completion cache: exploring asks LC before the fallback does, and only
    a cache makes the second ask free (without one, no question is explored)."""
    from lcrag.readers.cache import CachedReader

    return isinstance(ctx.reader, CachedReader)
