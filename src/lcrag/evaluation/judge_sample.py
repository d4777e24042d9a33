"""Quality from a few judge calls: ``--judge MODEL --judge-sample N`` on ``lcrag eval`` and ``lcrag route eval``.

Per reader, N answers drawn uniformly without replacement (a fixed seed) are judged by LaRA's judge
(:mod:`lcrag.evaluation.judge`, verdicts cached); every answer keeps its proxy score, the run's metric. Quality is
then reported three ways (:mod:`lcrag.evaluation.ppi`): the proxy alone over all answers, the judged answers alone
with their 95% interval, and the prediction-powered estimate (PPI++) with its interval, which is narrower the more
the proxy tracks the judge. ``lcrag eval`` estimates each configuration of the run (a sample of its rows);
``lcrag route eval`` each run (a reader) under the main policies: it judges both the LC and the RAG answer of each
sampled question, so every policy's quality on those questions is known. A sampled answer the judge gives no
True/False verdict on keeps only its proxy score and is named.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from lcrag.core.errors import InputError, ReaderError
from lcrag.evaluation.judge import Judge
from lcrag.evaluation.ppi import Interval, estimate, sample
from lcrag.evaluation.report import JUDGED, _md_table, judged_section, load_rows, write_report
from lcrag.evaluation.routing.report import Point, Question, judge_pair
from lcrag.readers import reader_slots
from lcrag.core.files import atomic_write_text

T = TypeVar("T")
R = TypeVar("R")
MIN_SAMPLE = 2  # an interval needs the spread of at least two verdicts
# The policies `lcrag route eval` estimates with the judge: (router, setting) as in route_report.policies.
MAIN_POLICIES = (("always-RAG", ""), ("always-LC", ""), ("self-route (text)", ""), ("learned router", "share 0.3"),
                 ("learned router", "share 0.5"))
COLUMNS = ["N", "judged", "proxy only", "judged only [95% CI]", "PPI++ [95% CI]", "PPI / judged-only interval",
           "λ"]


def open_judge(model: str | None, size: int | None = None) -> Judge | None:
    """The judge that ``--judge MODEL`` (and ``--judge-sample N``) ask for, checked before anything runs (the flags,
    and one question asked of it: an unreachable server, a refused key or an unknown model is one line); None
    without a judge. ``MODEL`` is a model on the OpenAI-compatible server of LCRAG_BASE_URL/OPENAI_BASE_URL, or
    ``openai:MODEL@BASE_URL``; its verdicts are cached under the lcrag cache directory."""
    from lcrag.core.paths import default_cache_dir

    if size is not None and not model:
        raise InputError("--judge-sample needs --judge MODEL: the model that judges the sampled answers")
    if size is not None and size < MIN_SAMPLE:
        raise InputError(f"--judge-sample must be at least {MIN_SAMPLE} (an interval needs two judged answers), "
                         f"not {size}")
    if not model:
        return None
    judge = Judge.open(model, default_cache_dir() / "judge")
    try:  # one question with a known verdict, now: not after hours of answers (kept in the cache: asked once)
        judge.reply("What is the capital of France?", "Paris", "The capital of France is Paris.", False)
    except ReaderError as exc:
        raise InputError(f"--judge {model}: the judge could not be asked ({exc})") from None
    return judge


def _show(interval: Interval) -> str:
    return f"{interval.estimate:.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def cells(proxy: Sequence[float], verdicts: dict[int, float]) -> list[str]:
    """The table cells (:data:`COLUMNS`) of one estimate; dashes where fewer than two answers were judged."""
    if len(verdicts) < MIN_SAMPLE:
        return [str(len(proxy)), str(len(verdicts)), f"{statistics.mean(proxy):.3f}", "—", "—", "—", "—"]
    e = estimate(proxy, verdicts)
    ratio = f"{e.ppi.half / e.classical.half:.2f}" if e.classical.half else "—"  # widths before clipping to [0, 1]
    return [str(e.total), str(e.judged), f"{e.proxy:.3f}", _show(e.classical), _show(e.ppi), ratio, f"{e.lam:.2f}"]


def calls(judge: Judge) -> str:
    """How many verdicts the judge was asked for, and how many of them its cache held."""
    reader = judge.reader
    return f"{getattr(reader, 'misses', 0)} judge call(s), {getattr(reader, 'hits', 0)} verdict(s) from its cache"


def _each(judge: Judge, ask: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """``ask(item)`` for every item, in order, as many at once as the judge's server takes (its max_concurrency)."""
    workers = reader_slots(judge.reader)
    if workers == 1 or len(items) < 2:
        return [ask(item) for item in items]
    with ThreadPoolExecutor(min(workers, len(items))) as pool:
        return list(pool.map(ask, items))


def _asking(judge: Judge, ask, hint: str = ""):
    """``ask()``, with a failed judge said in one line."""
    try:
        return ask()
    except ReaderError as exc:
        raise ReaderError(f"the judge {judge.reader.model!r} failed: {exc}{hint}") from None


def config_table(rows: list[dict], judge: Judge, size: int | None, seed: int = 0
                 ) -> tuple[list[str], list[list], list[str]]:
    """Per configuration of an evaluation run: ``size`` sampled rows judged (all of them when None); the table and
    the sampled answers the judge gave no verdict on."""
    groups: dict[str, list[dict]] = {}
    for row in sorted(rows, key=lambda r: r["item_id"]):
        if row["strategy"] != "closed-book":
            groups.setdefault(row["config"], []).append(row)
    def score(r: dict) -> tuple[float | None, str]:
        return judge.score(r["question"], r.get("answers") or [], r.get("prediction"), r.get("metric") == "lara_hallu")

    body, unjudged = [], []
    for config, group in sorted(groups.items()):
        verdicts = {}
        chosen = sample(len(group), size or len(group), seed)
        for i, (value, reply) in zip(chosen, _each(judge, score, [group[i] for i in chosen])):
            r = group[i]
            if value is None:
                unjudged.append(f"{config} item {r['item_id']}: the judge answered {reply[:60]!r}")
            else:
                verdicts[i] = value
        body.append([config, *cells([float(r["score"]) for r in group], verdicts)])
    return ["configuration", *COLUMNS], body, unjudged


def policy_table(questions: list[Question], points: list[Point], judge: Judge, size: int, seed: int = 0
                 ) -> tuple[list[str], list[list], list[str]]:
    """Per run (reader) and main policy: ``size`` sampled questions, both answers judged (the draw seeded by ``seed``
    and the run's folder name); the table and the sampled questions the judge gave no verdict on."""
    main = [p for p in points if (p.router, p.setting) in MAIN_POLICIES]
    runs: dict[str, list[int]] = {}
    for i, q in enumerate(questions):
        runs.setdefault(q.run, []).append(i)
    body, unjudged = [], []
    for run, members in runs.items():
        pairs = {}  # position in the run -> (LC verdict, RAG verdict)
        # seeded on the run's folder name, not its path: the same run draws the same questions wherever it is kept
        chosen = sample(len(members), size, f"{seed}:{Path(run).name}")
        for k, (lc, rag, why) in zip(chosen, _each(judge, lambda q: judge_pair(q, judge),
                                                    [questions[members[k]] for k in chosen])):
            if why:
                unjudged.append(why)
            else:
                pairs[k] = (lc, rag)
        for p in main:
            to_lc = [p.to_lc[i] for i in members]
            proxy = [questions[i].lc_score if side else questions[i].rag_score for i, side in zip(members, to_lc)]
            verdicts = {k: lc_rag[0] if to_lc[k] else lc_rag[1] for k, lc_rag in pairs.items()}
            body.append([run, p.router, p.setting, *cells(proxy, verdicts)])
    return ["run", "router", "setting", *COLUMNS], body, unjudged


def _notes(judge: Judge, unjudged: list[str], size: int | None, seed: int, what: str, per: str) -> str:
    sampled = f"{size} sampled {what} per {per} (seed {seed})" if size else f"All {what} of each {per}"
    note = (f"{sampled} judged; {calls(judge)}. Proxy only: the run's metric over all N answers; judged only: the mean "
            "verdict of the judged answers; PPI++: the proxy corrected by the judged answers (prediction-powered "
            "inference, Angelopoulos et al. 2023), means in [0, 1].")
    if unjudged:
        note += f" {len(unjudged)} sampled {what.split()[0]} got no True/False verdict and count by their proxy only; first: " \
                f"{unjudged[0]}."
    return note


def route_judged(questions: list[Question], points: list[Point], judge: Judge, size: int, seed: int = 0) -> str:
    """`lcrag route eval --judge-sample`: the main policies' quality per run, as Markdown."""
    header, body, unjudged = _asking(judge, lambda: policy_table(questions, points, judge, size, seed))
    return _md_table(header, body) + "\n\n" + _notes(judge, unjudged, size, seed, "questions (LC and RAG answers)", "run")


def judge_run(run_dir: str | Path, judge: Judge, size: int | None, seed: int = 0) -> str:
    """`lcrag eval --judge`: each configuration's judged quality, kept in RUN/judged.json (``lcrag report`` shows
    it) and written into the report; returns the section as Markdown."""
    run_dir = Path(run_dir)
    rows = load_rows(run_dir)
    if not rows:
        raise InputError(f"{run_dir} has no finished rows to judge")
    header, body, unjudged = _asking(judge, lambda: config_table(rows, judge, size, seed),
                                     "; the run's rows are kept: run the same command again to judge them")
    note = _notes(judge, unjudged, size, seed, "answers", "configuration")
    atomic_write_text(run_dir / JUDGED, json.dumps({"judge": judge.reader.model, "sample": size, "seed": seed,
                                                    "header": header, "body": body, "note": note}, indent=1))
    write_report(run_dir)
    return judged_section(run_dir)


__all__ = ["COLUMNS", "MAIN_POLICIES", "MIN_SAMPLE", "cells", "config_table", "judge_run", "open_judge",
           "policy_table", "route_judged"]
