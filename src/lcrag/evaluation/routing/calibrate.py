"""`lcrag route calibrate`'s work: answer questions both ways with the reader in use, and adapt a router to it.

Each question is answered with Self-Route's RAG step and with LC (the real pipeline: the user's reader, chunking and
retrieval, its caches), and labelled by whether the two answers agree
(:func:`lcrag.strategies.routing.calibration.answers_agree`); a judge, on a sample, may label instead. The labels make
the reader's :class:`~lcrag.strategies.routing.calibration.RoutingCalibration` of the router, kept in the cache, where
``lcrag ask``/``eval``/``serve`` with that router and reader find it.

Questions are the user's own (JSONL: ``{"question": ..., "document": PATH?, "answers": [...]?}``, or TSV: question,
then optionally a document path, then gold answers, one per column), or generated from the documents
(:func:`generate_questions`).
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lcrag.core.errors import InputError
from lcrag.evaluation.freeform import sentences
from lcrag.strategies.routing.calibration import (
    PRIOR_STRENGTH, Label, RoutingCalibration, answers_agree, group_of, router_prior,
)

MIN_WORDS, MAX_WORDS = 8, 60  # a sentence a question is made from: long enough to be about something
_CAPITALISED = re.compile(r"(?<=\s)([A-Z][\w'-]+(?:\s+(?:of\s+|the\s+)?[A-Z][\w'-]+)*)")
_WORD = re.compile(r"[A-Za-z][\w'-]{4,}")


@dataclass(frozen=True)
class CalibrationQuestion:
    question: str
    document: Any  # a QuestionSource
    answers: tuple[str, ...] = ()  # gold answers, when the user's file has them (a judge may use them)


@dataclass
class CalibrationRun:
    """What calibrating measured: each question's group, the two answers, and the label it gave."""

    questions: list[CalibrationQuestion]
    rag: list[str] = field(default_factory=list)
    lc: list[str] = field(default_factory=list)
    labels: list[Label] = field(default_factory=list)
    agreed: list[bool] = field(default_factory=list)  # the agreement reading of every question (judged or not)

    @property
    def agreement(self) -> float:
        return sum(self.agreed) / len(self.agreed) if self.agreed else float("nan")


def topic_of(sentence: str) -> str | None:
    """What a sentence is about, as a question can name it: its first capitalised name after the first word, else
    its three longest words (in their order); None when it has neither."""
    found = _CAPITALISED.search(sentence)
    if found:
        return found.group(1)
    words = _WORD.findall(sentence)
    if len(words) < 3:
        return None
    longest = sorted(sorted(range(len(words)), key=lambda i: -len(words[i]))[:3])
    return " ".join(words[i] for i in longest)


def generate_questions(documents: Sequence[Any], n: int) -> list[CalibrationQuestion]:
    """``n`` questions from the documents' sentences, deterministic: sentences of MIN_WORDS–MAX_WORDS words taken
    evenly through each document (the documents in turn), each asked as "What does the text say about TOPIC?"
    (:func:`topic_of`). Simple questions: enough to see where this reader's RAG and LC answers part."""
    pools = []
    for document in documents:
        text = getattr(document, "text", "") or ""
        found = [(s, topic_of(s)) for s in sentences(text) if MIN_WORDS <= len(s.split()) <= MAX_WORDS]
        pools.append([(document, f"What does the text say about {t}?") for _, t in found if t])
    pools = [p for p in pools if p]
    if not pools:
        raise InputError(f"no sentence of {MIN_WORDS}-{MAX_WORDS} words to make a question from in the documents: "
                         "give your own with --questions FILE")
    per = [min(len(p), -(-n // len(pools))) for p in pools]
    picked = [p[round(i * (len(p) - 1) / max(1, k - 1))] for p, k in zip(pools, per) for i in range(k)]
    unique = list(dict.fromkeys((id(d), q) for d, q in picked))
    by_id = {id(d): d for d, _ in picked}
    return [CalibrationQuestion(q, by_id[i]) for i, q in unique][:n]


def read_questions(path: Path, documents: Sequence[Any], load: Callable[[str], Any]) -> list[CalibrationQuestion]:
    """The user's questions (JSONL or TSV, see the module); a line without a document is about the one document
    given with --documents. ``load``: a document path to a document."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"--questions {path}: cannot read it ({getattr(error, 'strerror', None) or error})") from None
    loaded: dict[str, Any] = {}
    out = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        question, where, answers = _parse_line(line, f"--questions {path}:{number}")
        if where is None and len(documents) != 1:
            raise InputError(f"--questions {path}:{number}: no document for the question; give one --documents, "
                             "or a document per line")
        document = documents[0] if where is None else loaded.setdefault(where, load(where))
        out.append(CalibrationQuestion(question, document, answers))
    if not out:
        raise InputError(f"--questions {path}: no question in it")
    return out


def _parse_line(line: str, where: str) -> tuple[str, str | None, tuple[str, ...]]:
    if line.lstrip().startswith("{"):
        try:
            row = json.loads(line)
        except ValueError as error:
            raise InputError(f"{where}: not JSON ({error})") from None
        question, document, answers = row.get("question"), row.get("document"), row.get("answers") or []
        if isinstance(answers, str):
            answers = [answers]
    else:
        question, *rest = line.split("\t")
        document, answers = (rest[0], rest[1:]) if rest else (None, [])
    if not isinstance(question, str) or not question.strip():
        raise InputError(f"{where}: no question (JSONL needs a \"question\" field; TSV: the question first)")
    if document is not None and not isinstance(document, str):
        raise InputError(f"{where}: \"document\" must be a path")
    return question.strip(), (document or None), tuple(str(a) for a in answers if str(a).strip())


def answer_both(ask: Callable[..., Any], q: CalibrationQuestion) -> tuple[str, str]:
    """The question's RAG answer (Self-Route's RAG step) and LC answer with the real pipeline (``ask``:
    :meth:`lcrag.pipeline.pipeline.Pipeline.ask`): Self-Route's own LC answer when it went there, else LC asked."""
    routed = ask(q.document, q.question, strategy="self-route", sources=False)
    rag = routed.raw_route_answer if routed.raw_route_answer is not None else routed.text
    lc = routed.text if routed.route == "lc" else ask(q.document, q.question, strategy="lc", sources=False).text
    return rag, lc


def judged_label(judge: Any, q: CalibrationQuestion, rag: str, lc: str) -> Label | None:
    """A judge's label: with gold answers, LC may gain where the judge finds LC right and RAG not; without, where
    it finds the RAG answer does not say what LC's says (LC's answer as the reference). None: no verdict."""
    group = group_of(q.question, rag)
    if q.answers:
        lc_ok, _ = judge.score(q.question, list(q.answers), lc, False)
        rag_ok, _ = judge.score(q.question, list(q.answers), rag, False)
        return None if lc_ok is None or rag_ok is None else Label(group, lc_ok > rag_ok, "judge")
    same, _ = judge.score(q.question, [lc], rag, False)
    return None if same is None else Label(group, same < 0.5, "judge")


def calibrate(ask: Callable[..., Any], questions: list[CalibrationQuestion], reader: str, router: Any,
              judge: Any = None, judge_sample: int | None = None, seed: int = 0,
              strength: float = PRIOR_STRENGTH, progress: Callable[[int], None] | None = None,
              explore: float = 0.0) -> tuple[CalibrationRun, RoutingCalibration]:
    """Answer every question both ways, label it, and the reader's calibration of ``router`` from the labels (a
    judge's label in place of the agreement's on ``judge_sample`` questions drawn with ``seed``); ``explore``: the
    share of RAG-routed questions the router in use also sends to LC, adding their labels."""
    run = CalibrationRun(questions)
    judged = set(random.Random(seed).sample(range(len(questions)), min(judge_sample or 0, len(questions))))
    for i, q in enumerate(questions):
        rag, lc = answer_both(ask, q)
        run.rag.append(rag)
        run.lc.append(lc)
        run.agreed.append(answers_agree(q.question, rag, lc))
        label = Label(group_of(q.question, rag), not run.agreed[-1])
        if judge is not None and i in judged:
            label = judged_label(judge, q, rag, lc) or label
        run.labels.append(label)
        if progress is not None:
            progress(i + 1)
    prior = router_prior(router.fitted_on)
    return run, RoutingCalibration(reader, router.digest, tuple(run.labels), prior, strength, explore)
