"""Adapting a shipped router to the reader in use, from labels that cost no judge.

A router fitted on other readers ranks questions by LC's expected gain over the RAG answer as *those* readers
answered. Whether the reader in use gains from LC on a question needs a judge; whether its RAG answer and its LC
answer to the question *agree* does not: where they agree, LC would have been paid for nothing; where they disagree,
LC may gain (or lose). LC's expected gain is the chance that the two disagree times the gain when they do, so this
reader's disagreement rate, against the rate the router was fitted with, rescales the router's score:

    adapted score = router score × (k_g + S·p_g + 1) / (n_g·p_g + S·p_g + 1)

per *group* ``g`` of questions a router can tell apart before choosing (:func:`group_of`: the question's form and
whether the RAG answer declines), where ``p_g`` is the fitting readers' disagreement rate in the group (stored with
the router as ``fitted_on["disagreement"]``; a router without it: this reader's own overall rate, so only the
groups' differences from each other count), and ``k_g`` of this reader's ``n_g`` calibration questions in the group
disagree: its rate shrunk toward ``p_g`` with the strength of ``S`` = :data:`PRIOR_STRENGTH` questions, over the
rate it would have matching ``p_g`` (one question more either way keeps ``p_g = 0`` finite). With 50 calibration
questions spread over a few groups the router moves little; with 200 more; with none it is the shipped router.

Agreement is read without a model (:func:`answers_agree`): both answers decline; or neither does, and they say
the same figures and mostly the same words beyond the question's. A judge (``lcrag route calibrate --judge``) may
replace that reading on a sample.

A calibration is kept per (reader identity, router digest) under the cache directory
(``CACHE/routing-calibrations/<hash>.json``), with the labels it was fitted from; it is written atomically under a
file lock (processes adding labels as traffic flows do not lose each other's), and a damaged file is reported and
started afresh. A router in use finds its reader's calibration there (:class:`CalibrationStore`). A calibration made
with ``--explore E`` keeps adapting: of the questions the router would keep on RAG, a share E (by the question's
hash) goes to LC as well — counted in the held share and billed as any LC answer — and whether its two answers agree
is added to the calibration.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path

from lcrag.core.lru import SizedLRU
from lcrag.strategies.routing.conditional import is_unanswerable
from lcrag.core.text import content_words, declines_first, question_type

log = logging.getLogger(__name__)

FORMAT = "lcrag-routing-calibration"
PRIOR_STRENGTH = 50.0  # calibration questions a group needs before its own rate counts as much as the router's
FACTOR_LIMITS = (0.25, 4.0)  # how far a group's score may be scaled either way
AGREE_OVERLAP = 0.4  # two answers agree when this share of their words (beyond the question's) are shared (Dice)
LABELS_KEPT = 20_000  # labels a calibration file keeps (the oldest dropped): its data, bounded
CALIBRATIONS_KEPT = 64  # calibrations a process keeps read (one per reader and router, as the share ledgers)
SOURCES = ("agreement", "judge", "explore")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_YES_NO = re.compile(r"^\W*(yes|no)\b", re.I)


def rag_declines(answer: str) -> bool:
    """A RAG answer that declines ("unanswerable", or a first sentence saying the text does not hold it), as the
    router's ``declines_to_lc`` reads it."""
    return is_unanswerable(answer) or declines_first(answer)


def group_of(question: str, rag_answer: str) -> str:
    """The group of a question, as the router can tell before choosing: its form (what/who/.../yes-no/other) and
    whether the RAG answer declines (``what/declines``)."""
    return f"{question_type(question)}/{'declines' if rag_declines(rag_answer) else 'answers'}"


def answers_agree(question: str, rag: str, lc: str) -> bool:
    """Whether the RAG answer says what the LC answer says, without a model: both decline; or neither declines,
    they give the same yes/no, share a figure where LC gives one, and share at least :data:`AGREE_OVERLAP` of their
    words beyond the question's (Dice over lcrag.core.text's content words)."""
    rag_no, lc_no = rag_declines(rag), rag_declines(lc)
    if rag_no or lc_no:
        return rag_no and lc_no
    yes_rag, yes_lc = _YES_NO.match(rag), _YES_NO.match(lc)
    if yes_rag and yes_lc:
        return yes_rag.group(1).lower() == yes_lc.group(1).lower()
    lc_figures, rag_figures = set(_NUMBER.findall(lc)), set(_NUMBER.findall(rag))
    if lc_figures and not lc_figures & rag_figures:
        return False
    asked = content_words(question)
    a, b = content_words(rag) - asked, content_words(lc) - asked
    if not a or not b:
        return a == b
    return 2 * len(a & b) / (len(a) + len(b)) >= AGREE_OVERLAP


def disagreement_rates(labels: Iterable[tuple[str, bool]]) -> dict[str, float]:
    """Per group, the share of (group, disagree) labels that disagree (``fitted_on["disagreement"]`` of a router:
    its fitting readers' rates), and the overall rate under ``"*"``."""
    counts: dict[str, list[int]] = {}
    for group, disagree in labels:
        for key in (group, "*"):
            n_k = counts.setdefault(key, [0, 0])
            n_k[0] += 1
            n_k[1] += bool(disagree)
    return {g: round(k / n, 4) for g, (n, k) in sorted(counts.items())}


@dataclass(frozen=True)
class Label:
    """One calibration question: its group, whether LC may gain on it (the two answers disagree, or a judge says
    LC is right where RAG is not), and where the label came from (:data:`SOURCES`)."""

    group: str
    may_gain: bool
    source: str = "agreement"


@dataclass(frozen=True)
class RoutingCalibration:
    """A router adapted to one reader: the labels it was fitted from and the router's own per-group rates
    (``prior``; empty: the reader's overall rate stands in)."""

    reader: str
    router: str  # the router's digest: a calibration applies to that router only
    labels: tuple[Label, ...] = ()
    prior: dict = field(default_factory=dict)
    strength: float = PRIOR_STRENGTH
    explore: float = 0.0  # the share of questions the router keeps on RAG that LC also answers (labels as traffic flows)

    def counts(self) -> dict[str, tuple[int, int]]:
        """Per group: calibration questions, and those where LC may gain."""
        counts: dict[str, tuple[int, int]] = {}
        for label in self.labels:
            n, k = counts.get(label.group, (0, 0))
            counts[label.group] = (n + 1, k + label.may_gain)
        return counts

    def overall(self) -> float:
        """The share of calibration questions where LC may gain, shrunk toward one half by one question each way."""
        return (sum(label.may_gain for label in self.labels) + 1) / (len(self.labels) + 2)

    def prior_rate(self, group: str) -> float:
        rate = self.prior.get(group, self.prior.get("*")) if self.prior else None
        return min(1.0, max(0.0, float(rate))) if rate is not None else self.overall()

    def factors(self) -> dict[str, float]:
        """Per group with labels: the factor its router scores are multiplied by (1: as shipped)."""
        return {g: self._factor(g, n, k) for g, (n, k) in self.counts().items()}

    def _factor(self, group: str, n: int, k: int) -> float:
        """The reader's shrunk rate over the rate it would have if it disagreed as the router's readers did (k =
        n·p), each with one more question either way: exactly 1 where the reader matches the router, also where
        the router's readers never disagreed in the group (p = 0)."""
        p, s = self.prior_rate(group), self.strength
        low, high = FACTOR_LIMITS
        return min(high, max(low, (k + s * p + 1) / (n * p + s * p + 1)))

    @cached_property
    def _factors(self) -> dict[str, float]:  # computed once: a calibration is immutable
        return self.factors()

    def factor(self, group: str) -> float:
        """The factor of a group's scores: 1 for a group no calibration question fell in."""
        return self._factors.get(group, 1.0)

    def adapt(self, score: float, group: str) -> float:
        """The router's score for a question of ``group``, adapted to this reader."""
        return score * self.factor(group)

    def added(self, labels: Iterable[Label]) -> RoutingCalibration:
        return replace(self, labels=(*self.labels, *labels)[-LABELS_KEPT:])

    def summary(self) -> dict:
        """What an answer's routing metadata says of the calibration in use."""
        return {"questions": len(self.labels), "lc_may_gain": round(self.overall(), 3),
                "sources": {s: sum(label.source == s for label in self.labels) for s in SOURCES
                            if any(label.source == s for label in self.labels)}}

    def to_dict(self) -> dict:
        return {"format": FORMAT, "version": 1, "reader": self.reader, "router": self.router,
                "strength": self.strength, "prior": self.prior, "explore": self.explore, "questions": len(self.labels),
                "factors": {g: round(f, 4) for g, f in sorted(self.factors().items())},
                "labels": [[label.group, int(label.may_gain), label.source] for label in self.labels]}

    @classmethod
    def from_dict(cls, data: object) -> RoutingCalibration:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise ValueError("not a routing calibration")
        labels = tuple(Label(str(g), bool(k), str(s)) for g, k, s in data["labels"])
        if any(label.source not in SOURCES for label in labels):
            raise ValueError("a label of unknown source")
        prior = {str(g): float(r) for g, r in (data.get("prior") or {}).items()}
        explore = float(data.get("explore") or 0.0)
        if not 0.0 <= explore <= 1.0:
            raise ValueError(f"explore {explore} is not a share in [0, 1]")
        return cls(str(data["reader"]), str(data["router"]), labels, prior, float(data["strength"]), explore)

    def explores(self, key: str) -> bool:
        """Whether the question of ``key`` (its ledger key) is one of the :attr:`explore` share explored: decided
        by the key's hash, so a question asked again is explored again or not at all."""
        return self.explore > 0 and int(hashlib.sha256(key.encode("utf-8")).hexdigest()[:8], 16) < self.explore * 2**32


def router_prior(fitted_on: dict) -> dict:
    """The per-group disagreement rates a router was fitted with (empty when its file has none)."""
    rates = fitted_on.get("disagreement") if isinstance(fitted_on, dict) else None
    return {str(g): float(r) for g, r in rates.items()} if isinstance(rates, dict) else {}


class CalibrationStore:
    """Calibrations per (reader identity, router digest), files under ``directory``; read again only when the file
    changed; updates under a file lock, written atomically."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)
        # each file's identity when last read, and what it held (the least recently used dropped past the bound)
        self._seen: SizedLRU[Path, tuple[tuple, RoutingCalibration | None]] = SizedLRU.counted(CALIBRATIONS_KEPT)

    def path(self, reader: str, router: str) -> Path:
        name = hashlib.sha256(f"{reader}\n{router}".encode("utf-8")).hexdigest()[:32]
        return self.directory / f"{name}.json"

    def load(self, reader: str, router: str) -> RoutingCalibration | None:
        """The reader's calibration of the router, or None (none made, or a damaged file: said once)."""
        path = self.path(reader, router)
        identity = _identity(path)
        if identity is None:
            return None
        seen = self._seen.get(path)
        if seen is not None and seen[0] == identity:
            return seen[1]
        calibration = self._read(path)
        if calibration is not None and (calibration.reader, calibration.router) != (reader, router):
            log.warning("%s: a routing calibration of another reader or router: ignored", path)
            calibration = None
        self._seen.put(path, (identity, calibration))
        return calibration

    def save(self, calibration: RoutingCalibration) -> Path:
        """Write ``calibration`` in place of the reader's (``lcrag route calibrate``)."""
        path = self.path(calibration.reader, calibration.router)
        from lcrag.core.files import atomic_write_text, file_lock

        with file_lock(path.with_name(path.name + ".lock")):
            atomic_write_text(path, json.dumps(calibration.to_dict(), separators=(",", ":")))
        return path

    def add(self, reader: str, router: str, labels: list[Label], prior: dict,
            strength: float = PRIOR_STRENGTH, explore: float = 0.0) -> RoutingCalibration:
        """Add labels to the reader's calibration (made if missing; a damaged one started afresh), read and written
        under the file lock so that concurrent processes keep each other's labels."""
        path = self.path(reader, router)
        from lcrag.core.files import atomic_write_text, file_lock

        with file_lock(path.with_name(path.name + ".lock")):
            current = self._read(path) if path.exists() else None
            if current is None or (current.reader, current.router) != (reader, router):
                current = RoutingCalibration(reader, router, (), prior, strength, explore)
            updated = current.added(labels)
            atomic_write_text(path, json.dumps(updated.to_dict(), separators=(",", ":")))
        return updated

    @staticmethod
    def _read(path: Path) -> RoutingCalibration | None:
        try:
            return RoutingCalibration.from_dict(json.loads(path.read_text(encoding="utf-8")))
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as error:
            log.warning("%s: a damaged routing calibration (%s): routing as shipped; run `lcrag route calibrate` "
                        "to make it again", path, error)
            return None


def _identity(path: Path) -> tuple | None:
    try:
        stat = path.stat()
    except OSError:
        return None
    return (stat.st_size, stat.st_mtime_ns, stat.st_ino)
