"""Holding a learned router's LC share at run time, on any reader.

A router's score scale depends on the reader: a threshold calibrated on the readers it was fitted on sends 11% of
one new reader's questions to LC and 53% of another's. ``--lc-share S`` therefore means the share of the questions
actually answered that go to LC, held as they are answered: the threshold is the score that ``S`` of the recent
questions' own scores reach (a running quantile over the last :data:`WINDOW`), warm-started from the router file's
calibration, and nudged by the realized share's error (what was sent too often or too rarely is paid back over
about :data:`HORIZON` questions, so a run of questions that all score high or low does not carry the share away).
``--lc-cost-share C`` holds LC's share of prompt tokens instead: the threshold keeps the recent questions' LC
tokens (their document's length) at ``C`` of all their prompt tokens, RAG steps included.

A question asked again (the same question over the same document, for the same target) is routed as it was the
first time and not counted again: its answer is in the caches already on that route, and an evaluation resumed after
a kill re-asks the questions that were in flight then, which the ledger had counted. Asking it again changes nothing
in the ledger (not even its place among the routes remembered), so a resumed run's ledger is the unbroken run's. The
routes of the last :data:`WINDOW` questions are remembered; a question counted but never answered (the reader held no
answer, so an eval wrote no row) is asked again by every resume, however much later, so
:meth:`ShareLedgers.answering` pins its route past the window (:data:`PINNED_KEPT`): unpinned, a resume counted it a
second time once :data:`WINDOW` questions had followed it (issue 44: 988 questions counted where an unbroken run had
987). A question sent to LC whatever its score (``declines_to_lc``: its RAG answer declined) is counted like any
other, so the threshold sends fewer of the rest.

The state is small (the recent scores and token counts, the realized counts per target, the recent questions'
routes, the pinned ones) and kept per reader identity and router: in the cache (:class:`ShareLedgers`), so separate
``lcrag ask`` processes and a service's threads share it, updated under one lock per file. The same
:class:`ShareState` replays a run offline (``lcrag route eval``), question by question, as the live router would have
decided.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from lcrag.core.lru import SizedLRU
from lcrag.strategies.routing.calibration import CalibrationStore

log = logging.getLogger(__name__)

WINDOW = 800  # recent questions whose scores set the threshold (chosen with HORIZON on the LaRA replay)
HORIZON = 10  # questions over which a realized share's error is paid back (slower: more by score, and the share drifts)
SEEDS = 200  # calibration scores the window starts with: real questions outweigh them after a few hundred
MEMORY = 1000  # the realized share forgets at this rate (a decay per question), so an old error does not wind up
TARGETS_KEPT = 16  # realized counts kept per ledger, one per target (LC share or cost share value)
LEDGERS_KEPT = 64  # ledgers a process keeps in memory (one per reader and router)
PINNED_KEPT = 10_000  # routes of questions counted but never answered, kept past WINDOW (a few per dataset)
FORMAT = "lcrag-share-ledger"
T = TypeVar("T")  # what a change of a ledger returns (ShareLedger._update)
QUESTIONS, TOKENS = "questions", "tokens"


@dataclass(frozen=True)
class ShareTarget:
    """The LC share to hold: of the questions answered (``by="questions"``) or of the prompt tokens."""

    value: float
    by: str = QUESTIONS

    def __post_init__(self) -> None:
        if not 0.0 <= self.value <= 1.0 or self.by not in (QUESTIONS, TOKENS):
            raise ValueError(f"a share target is in [0, 1], by questions or tokens: {self.value!r} by {self.by!r}")

    @property
    def key(self) -> str:
        return f"{self.by}:{self.value:g}"

    @property
    def name(self) -> str:
        return "lc_share" if self.by == QUESTIONS else "lc_cost_share"


@dataclass(frozen=True)
class Decision:
    """One question's routing: its score, the threshold it met or not, and the realized shares after it. True when
    the question goes to LC."""

    to_lc: bool
    score: float
    threshold: float
    target: ShareTarget
    realized_share: float
    realized_cost_share: float
    questions: int
    repeated: bool = False  # a question routed before: its first route, not counted again
    declined: bool = False  # sent to LC because the RAG answer declined, whatever its score (counted)
    key: str | None = None  # the question's key in the ledger (its target's and the question's), not shown
    calibration: dict | None = None  # the reader's routing calibration the score was adapted by (its summary)
    explored: bool = False  # sent to LC to explore: the router would have kept RAG (router_calibration)

    def __bool__(self) -> bool:
        return self.to_lc

    def to_dict(self) -> dict[str, Any]:
        return {"score": round(self.score, 6), "threshold": _finite(self.threshold),
                self.target.name: self.target.value, "realized_lc_share": round(self.realized_share, 4),
                "realized_lc_cost_share": round(self.realized_cost_share, 4), "questions": self.questions,
                **({"repeated": True} if self.repeated else {}), **({"declined": True} if self.declined else {}),
                **({"calibration": self.calibration} if self.calibration else {}),
                **({"explored": True} if self.explored else {})}


def _finite(value: float) -> float | None:
    return round(value, 6) if math.isfinite(value) else None


@dataclass
class Counts:
    """A target's realized counts, decayed by :data:`MEMORY`: questions, those sent to LC, prompt tokens, LC's."""

    questions: float = 0.0
    to_lc: float = 0.0
    tokens: float = 0.0
    lc_tokens: float = 0.0

    def add(self, to_lc: bool, lc_tokens: float, rag_tokens: float) -> None:
        keep = 1.0 - 1.0 / MEMORY
        self.questions = self.questions * keep + 1
        self.to_lc = self.to_lc * keep + to_lc
        self.tokens = self.tokens * keep + rag_tokens + (lc_tokens if to_lc else 0.0)
        self.lc_tokens = self.lc_tokens * keep + (lc_tokens if to_lc else 0.0)

    @property
    def share(self) -> float:
        return self.to_lc / self.questions if self.questions else 0.0

    @property
    def cost_share(self) -> float:
        return self.lc_tokens / self.tokens if self.tokens else 0.0


@dataclass
class ShareState:
    """The recent questions (score, LC tokens, RAG-step tokens) and the realized counts per target."""

    recent: deque = field(default_factory=lambda: deque(maxlen=WINDOW))
    counts: SizedLRU[str, Counts] = field(default_factory=lambda: SizedLRU.counted(TARGETS_KEPT))
    routed: OrderedDict = field(default_factory=OrderedDict)  # a recent question's key -> (to LC, its threshold)
    pinned: OrderedDict = field(default_factory=OrderedDict)  # the same, of questions counted and never answered
    questions: int = 0
    horizon: float = HORIZON  # a policy, not state (not written): benchmarks/route_lara.py compares a few

    def warm(self, calibration: tuple[float, ...], lc_tokens: float, rag_tokens: float) -> None:
        """Seed the window with the router's calibration (its fitting questions' scores), evenly spaced, each
        costing what this question costs; real questions push the seeds out."""
        if self.recent or not calibration:
            return
        n, seeds = len(calibration), min(SEEDS, WINDOW)
        for i in range(seeds):
            self.recent.append((calibration[round(i * (n - 1) / max(1, seeds - 1))], lc_tokens, rag_tokens))

    def decide(self, target: ShareTarget, score: float, lc_tokens: float, rag_tokens: float,
               question: str | None = None, declined: bool = False) -> Decision:
        """Route one question and remember it; ``question`` (a key of the question, its document and nothing else)
        routes a question asked again as the first time, uncounted; ``declined`` sends it to LC whatever its score,
        counted like any other (the threshold then sends fewer of the rest)."""
        counts = self._counts(target)
        key = None if question is None else f"{target.key}\n{question}"
        first = None if key is None else self.routed.get(key) or self.pinned.get(key)
        if first is not None:  # changes nothing: a resume re-asks questions an unbroken run asked once
            to_lc, threshold = first
            return Decision(to_lc, score, threshold, target, counts.share, counts.cost_share, self.questions, True,
                            declined=to_lc and score < threshold, key=key)
        threshold = self.threshold(target, counts)
        to_lc = declined or score >= threshold
        counts.add(to_lc, lc_tokens, rag_tokens)
        self.recent.append((score, lc_tokens, rag_tokens))
        self.questions += 1
        if key is not None:
            self.routed[key] = (to_lc, threshold)
            while len(self.routed) > WINDOW:
                self.routed.popitem(last=False)
        return Decision(to_lc, score, threshold, target, counts.share, counts.cost_share, self.questions,
                        declined=declined and score < threshold, key=key)

    def pin(self, keys: Iterable[str]) -> bool:
        """Keep the routes of these questions (their :attr:`Decision.key`) past :data:`WINDOW`: they were counted
        and not answered, so they will be asked again (a resumed eval re-asks every question without a row) and must
        then keep their route, uncounted. True when something changed."""
        changed = False
        for key in keys:
            if key in self.routed and key not in self.pinned:
                self.pinned[key] = self.routed[key]
                changed = True
        while len(self.pinned) > PINNED_KEPT:
            self.pinned.popitem(last=False)
        return changed

    def _counts(self, target: ShareTarget) -> Counts:
        # the most recent last; the oldest dropped past TARGETS_KEPT
        return self.counts.get_or_put(target.key, Counts)

    def threshold(self, target: ShareTarget, counts: Counts) -> float:
        """The score the next question must reach: the recent scores' quantile at the target, corrected by the
        realized error."""
        if target.by == QUESTIONS:
            error = target.value * counts.questions - counts.to_lc  # > 0: too few went to LC
            return quantile_threshold([s for s, _, _ in self.recent], _clip(target.value + error / self.horizon))
        per_question = counts.tokens / counts.questions if counts.questions else 0.0
        error = target.value * counts.tokens - counts.lc_tokens
        wanted = target.value + (error / (self.horizon * per_question) if per_question else 0.0)
        return cost_threshold(list(self.recent), _clip(wanted))

    def to_dict(self) -> dict[str, Any]:
        return {"format": FORMAT, "version": 1, "questions": self.questions,
                "recent": [list(r) for r in self.recent],
                "counts": {k: [c.questions, c.to_lc, c.tokens, c.lc_tokens] for k, c in self.counts.items()},
                "routed": _routes(self.routed), "pinned": _routes(self.pinned)}

    @classmethod
    def from_dict(cls, data: Any) -> ShareState:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a share ledger")
        state = cls(questions=int(data["questions"]))
        state.recent.extend((float(s), float(lc), float(rag)) for s, lc, rag in data["recent"])
        for key, values in data["counts"].items():
            state.counts.put(str(key), Counts(*(float(v) for v in values)))
        # a ledger written before routes were kept (or pinned) has none
        for kept, written in ((state.routed, data.get("routed", [])), (state.pinned, data.get("pinned", []))):
            for key, to_lc, threshold in written:
                infinite = -math.inf if to_lc else math.inf
                kept[str(key)] = (bool(to_lc), infinite if threshold is None else float(threshold))
        return state


def _routes(routes: OrderedDict) -> list[list]:
    return [[k, to_lc, t if math.isfinite(t) else None] for k, (to_lc, t) in routes.items()]


def question_key(question: str, document: str, policy: str = "") -> str:
    """A short key of a question, its document's content hash and whatever else decides its route beside the score
    (``policy``): what a ledger keeps of a routed question."""
    return hashlib.sha256(f"{policy}\n{document}\n{question}".encode("utf-8")).hexdigest()[:32]


def _clip(share: float) -> float:
    return min(1.0, max(0.0, share))


def quantile_threshold(scores: list[float], share: float) -> float:
    """The smallest score that ``share`` of ``scores`` reach (inf: none go; -inf: all go)."""
    if share <= 0 or not scores:
        return math.inf
    if share >= 1:
        return -math.inf
    ranked = sorted(scores, reverse=True)
    return ranked[max(0, math.ceil(share * len(ranked)) - 1)]


def cost_threshold(recent: list[tuple[float, float, float]], share: float) -> float:
    """The smallest score such that sending the recent questions that reach it keeps LC's tokens at most ``share``
    of all their prompt tokens (RAG steps included)."""
    if share <= 0 or not recent:
        return math.inf
    rag = sum(r for _, _, r in recent)
    lc, threshold = 0.0, math.inf
    for score, lc_tokens, _ in sorted(recent, key=lambda r: r[0], reverse=True):
        lc += lc_tokens
        if lc > share * (rag + lc):
            break
        threshold = score
    return threshold


class ShareLedger:
    """A reader's and router's :class:`ShareState`, in memory or in a file shared by processes (read again only
    when another process changed it; written atomically after every question; a damaged file starts afresh,
    said once)."""

    def __init__(self, path: Path | None, calibration: tuple[float, ...], answering: threading.local | None = None):
        self.path, self.calibration = path, calibration
        self.state = ShareState()
        self._seen: tuple | None = None  # the file's identity when last read or written
        self._lock = threading.Lock()
        # per thread, the decisions of the question being answered (ShareLedgers.answering), else None
        self._answering = answering or threading.local()

    def decide(self, target: ShareTarget, score: float, lc_tokens: float, rag_tokens: float,
               question: str | None = None, declined: bool = False) -> Decision:
        decision = self._update(lambda: self._decide(target, score, lc_tokens, rag_tokens, question, declined),
                                written=lambda d: not d.repeated)
        decided = getattr(self._answering, "decided", None)
        if decided is not None and decision.key is not None:
            decided.append((self, decision.key))
        return decision

    def pin(self, keys: list[str]) -> None:
        """Pin these questions' routes (:meth:`ShareState.pin`), in the file too."""
        self._update(lambda: self.state.pin(keys), written=bool)

    def _update(self, change: Callable[[], T], written: Callable[[T], bool]) -> T:
        """``change()`` of the state under the ledger's lock; with a file, under its file lock too, the file read
        first and written after when ``written(result)``."""
        with self._lock:
            if self.path is None:
                return change()
            from lcrag.core.files import file_lock

            with file_lock(self.path.with_name(self.path.name + ".lock")):
                self._read()
                result = change()
                if written(result):
                    self._write()
                return result

    def _decide(self, target: ShareTarget, score: float, lc_tokens: float, rag_tokens: float,
                question: str | None, declined: bool) -> Decision:
        self.state.warm(self.calibration, lc_tokens, rag_tokens)
        return self.state.decide(target, score, lc_tokens, rag_tokens, question, declined)

    def _identity(self) -> tuple | None:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return (stat.st_size, stat.st_mtime_ns, stat.st_ino)

    def _read(self) -> None:
        identity = self._identity()
        if identity is None or identity == self._seen:
            return
        try:
            self.state = ShareState.from_dict(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
            log.warning("%s: a damaged LC-share ledger (%s): starting it afresh", self.path, error)
            self.state = ShareState()

    def _write(self) -> None:
        from lcrag.core.files import atomic_write_text

        try:
            atomic_write_text(self.path, json.dumps(self.state.to_dict(), separators=(",", ":")))
        except OSError as error:  # a full or read-only cache: the share is still held in this process
            log.warning("%s: cannot keep the LC-share ledger (%s)", self.path, error.strerror or error)
            return
        self._seen = self._identity()


class ShareLedgers:
    """The ledgers of one process, per (reader identity, router digest): files under ``directory`` (None: memory
    only), the last :data:`LEDGERS_KEPT` kept open."""

    def __init__(self, directory: Path | None = None):
        self.directory = directory
        # the readers' routing calibrations (`lcrag route calibrate`), beside the ledgers in the same cache
        self.calibrations = CalibrationStore(directory.parent / "routing-calibrations") if directory else None
        self._ledgers: SizedLRU[tuple[str, str], ShareLedger] = SizedLRU.counted(LEDGERS_KEPT)
        self._answering = threading.local()  # per thread: the decisions of the question being answered

    @contextmanager
    def answering(self) -> Iterator[None]:
        """Around one question's answer in this thread: when it raises (the reader held no answer, say), the routes
        decided for it are pinned, so that asked again however much later (a resumed eval re-asks every question
        without a row) it keeps its route and is not counted a second time. What the ledgers wrote and the answers
        written then agree wherever a process is killed: a kill between a route's writing and its answer's leaves
        the question among the last routes, re-asked first by the resume."""
        outer = getattr(self._answering, "decided", None)
        decided: list[tuple[ShareLedger, str]] = []
        self._answering.decided = decided
        try:
            yield
        except Exception:
            for ledger in dict.fromkeys(ledger for ledger, _ in decided):
                ledger.pin([key for owner, key in decided if owner is ledger])
            raise
        finally:
            self._answering.decided = outer
            if outer is not None:
                outer.extend(decided)

    def get(self, reader: str, router: str, calibration: tuple[float, ...]) -> ShareLedger:
        def opened() -> ShareLedger:
            name = hashlib.sha256(f"{reader}\n{router}".encode("utf-8")).hexdigest()[:32]
            return ShareLedger(self.directory / f"{name}.json" if self.directory else None, calibration,
                               self._answering)

        return self._ledgers.get_or_put((reader, router), opened)
