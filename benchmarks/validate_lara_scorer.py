"""Calibrate lcrag's offline free-form scorer against LaRA's LLM judge, and validate it on readers left out.

LaRA publishes the judge's accuracy per (reader, length, task, LC/RAG) cell (paper_table.csv), each task the mean
over the three document types; the recorded answers of the readers in ../shared/data/lara/predictions are scored
by the offline scorer and averaged the same way. The calibration (a logistic model per task group) is fitted on
label proportions: cell means against the published cells. Reported: Spearman over cells, the sign of LC − RAG per
(reader, length, task), and the mean absolute difference in points — in-sample (the shipped calibration) and
leave-one-reader-out (each reader's cells predicted by a calibration fitted on the other readers only), overall and
for every reader. Then the style perturbations of :mod:`lcrag.evaluation.perturbations` (first sentence only, the
question restated, courtesy, number formats) rewrite every recorded answer, and the report gives how far each moves
every reader's mean score.

    python benchmarks/validate_lara_scorer.py --lara ../shared/data/lara --out benchmarks/results/lara_scorer.md \
        --calibration-out src/lcrag/evaluation/calibration/lara_judge.json

Needs scipy (pip install -e '.[route]' in lcrag's checkout). ``--sample 0.2`` scores a fifth of the questions, for quick iterations.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import re
import sys
import time
import zlib
from pathlib import Path

import numpy as np
from scipy.optimize import minimize
from scipy.stats import spearmanr

from lcrag.evaluation.freeform import (
    FEATURES, TASKS, Calibration, answer_features, canonical, content_words, number_recall,
)
from lcrag.evaluation.decline_families import FAMILIES, generate
from lcrag.evaluation.locked_split import LockedSplit
from lcrag.evaluation.perturbations import DECLINE_PERTURBATIONS, PERTURBATIONS
from lcrag.retrieval.embedders import make_embedder
from lcrag.core.text import declines, declines_first

from common import log, machine, md_table

# LaRA's table names the readers whose predictions are in shared/ (gpt-4o-0806 has no row of its own).
TABLE_NAMES = {
    "gpt-4o": "GPT-4o", "gpt-4o-mini": "GPT-4o-mini", "qwen2.5-72b-instruct": "Qwen-2.5-72B-Instruct",
    "qwen2.5-7b-instruct": "Qwen-2.5-7B-Instruct", "llama-3.3-70b": "Llama-3.3-70B-Instruct",
    "llama-3.3-70b-turbo": "Llama-3.3-70B-Instruct-Q8", "llama-3.1-8b": "Llama-3.1-8B-Instruct",
    "llama-3.2-3b": "Llama-3.2-3B-Instruct", "mistral-nemo": "Mistral-Nemo-12B",
}
TABLE_TASKS = {"location": "location", "reasoning": "reasoning", "comp": "comparison", "hallu": "hallucination"}
FILE = re.compile(r"(full|rag)_preds_(.+)_(32k|128k)_(book|financial|paper)_(location|reasoning|comp|hallu)\.jsonl")
# Two task groups share weights: answers that must state a fact, and answers that must decline (hallu).
GROUPS = {"location": "answer", "reasoning": "answer", "comp": "answer", "hallu": "absent"}


def load_answers(lara: Path) -> list[dict]:
    """Every recorded answer of the readers the table names: reader, mode, length, type, task, texts."""
    out = []
    for path in sorted((lara / "predictions").glob("*/*.jsonl")):
        match = FILE.fullmatch(path.name)
        if not match or match.group(2) not in TABLE_NAMES:
            continue
        mode, reader, length, kind, task = match.groups()
        for line in path.read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            answer = r.get("prediction")
            out.append({"reader": reader, "mode": "lc" if mode == "full" else "rag", "length": length, "type": kind,
                        "task": task, "question": r["question"], "gold": str(r["ground_truth"]),
                        "answer": answer if isinstance(answer, str) and answer.strip() else None})
    return out


def load_table(lara: Path) -> dict[tuple, float]:
    table = {}
    with (lara / "paper_table.csv").open(encoding="utf-8") as f:
        for row in csv.DictReader(f):
            for task, column in TABLE_TASKS.items():
                for mode in ("lc", "rag"):
                    table[(row["model"], row["length"], task, mode)] = float(row[f"{column}_{mode}"]) / 100
    return table


def _key(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def similarities(pairs: list[tuple[str, str] | None], cache: Path) -> list[float]:
    """Cosine of each (answer, gold) pair by the bundled MiniLM (0 for None); embeddings kept in ``cache`` by the
    text's SHA-1 (only texts not embedded before are embedded: the first run embeds ~55K recorded, perturbed and
    gold answers, 20 to 60 minutes on 2 cores depending on what else runs; later runs take ~4 minutes)."""
    path = cache / "lara-minilm-sha1.npz"
    known: dict[str, np.ndarray] = {}
    if path.is_file():
        stored = np.load(path, allow_pickle=False)
        known = dict(zip(stored["keys"].tolist(), stored["vectors"]))
    missing = sorted({t for pair in pairs if pair for t in pair if _key(t) not in known})
    if missing:
        known.update(zip(map(_key, missing), make_embedder("minilm").embed(missing)))
        cache.mkdir(parents=True, exist_ok=True)
        np.savez(path, keys=np.array(list(known)), vectors=np.stack(list(known.values())))
    return [float(known[_key(pair[0])] @ known[_key(pair[1])]) if pair else 0.0 for pair in pairs]


def feature_matrix(answers: list[dict], texts: list[str | None], cache: Path) -> np.ndarray:
    """The scorer's features of each answer written as ``texts`` (the recorded answers, or perturbed ones; zeros for
    a missing one), the texts read as the scorer reads them (:func:`canonical`)."""
    read = [canonical(a["question"], a["gold"], t) if t else None for a, t in zip(answers, texts)]
    sims = similarities([(r[2], r[1]) if r else None for r in read], cache)
    return np.array([answer_features(*r, s) if r else [0.0] * len(FEATURES) for r, s in zip(read, sims)])


class Cells:
    """Answers grouped as LaRA averages them: per (reader, length, task, mode) the mean over document types."""

    def __init__(self, answers: list[dict], table: dict[tuple, float]):
        keys = [(a["reader"], a["length"], a["task"], a["mode"]) for a in answers]
        types = [k + (a["type"],) for k, a in zip(keys, answers)]
        self.cells = sorted(set(keys))
        self.index = {c: i for i, c in enumerate(self.cells)}
        type_keys = sorted(set(types))
        type_index = {t: i for i, t in enumerate(type_keys)}
        self.type_of = np.array([type_index[t] for t in types])
        self.cell_of_type = np.array([self.index[t[:4]] for t in type_keys])
        self.type_count = np.bincount(self.type_of, minlength=len(type_keys))
        self.types_per_cell = np.bincount(self.cell_of_type, minlength=len(self.cells))
        self.cell_of = self.cell_of_type[self.type_of]  # each answer's cell, and its weight in the cell's mean
        self.weight = 1.0 / (self.type_count[self.type_of] * self.types_per_cell[self.cell_of])
        self.target = np.array([table[(TABLE_NAMES[c[0]],) + c[1:]] for c in self.cells])

    def means(self, scores: np.ndarray) -> np.ndarray:
        per_type = np.bincount(self.type_of, weights=scores, minlength=len(self.type_count)) / self.type_count
        return np.bincount(self.cell_of_type, weights=per_type, minlength=len(self.cells)) / self.types_per_cell

    def agreement(self, values: np.ndarray, use: np.ndarray | None = None) -> dict:
        """Spearman, LC − RAG sign, mean and largest absolute difference (points) over the cells ``use``."""
        use = np.ones(len(self.cells), bool) if use is None else use
        signs = [np.sign(values[self.index[c]] - values[self.index[c[:3] + ("rag",)]])
                 == np.sign(self.target[self.index[c]] - self.target[self.index[c[:3] + ("rag",)]])
                 for c, u in zip(self.cells, use) if c[3] == "lc" and u]
        error = np.abs(100 * (values - self.target))[use]
        return {"spearman": float(spearmanr(values[use], self.target[use]).correlation), "sign": int(sum(signs)),
                "pairs": len(signs), "mad": float(error.mean()), "max": float(error.max())}

    def by(self, values: np.ndarray, use: np.ndarray, field: int) -> dict[str, tuple[float, float, float]]:
        """Per reader (``field`` 0) or task (2) among the cells ``use``: mean and largest absolute difference to
        the table and the mean signed difference, in points."""
        error = 100 * (values - self.target)
        keys = np.array([c[field] for c in self.cells])
        return {k: (float(np.abs(error[use & (keys == k)]).mean()), float(np.abs(error[use & (keys == k)]).max()),
                    float(error[use & (keys == k)].mean())) for k in sorted(set(keys[use]))}


class Fit:
    """The label-proportion fit of a :class:`Calibration` (weights per group, bias per task)."""

    def __init__(self, x: np.ndarray, present: np.ndarray, tasks: list[str], cells: Cells, ridge: float = 1e-4,
                 standardise_on: np.ndarray | None = None):
        # standardised on the training readers' answers only: the test readers' features are never looked at
        on = present if standardise_on is None else present & standardise_on
        self.mean, self.scale = x[on].mean(axis=0), x[on].std(axis=0) + 1e-9
        self.z, self.present, self.cells, self.ridge = (x - self.mean) / self.scale, present, cells, ridge
        self.groups = sorted(set(GROUPS.values()))
        self.group_of = np.array([self.groups.index(GROUPS[t]) for t in tasks])
        self.task_of = np.array([TASKS.index(t) for t in tasks])

    def probabilities(self, w: np.ndarray, x: np.ndarray | None = None) -> np.ndarray:
        """Each answer's probability under weights ``w``, from the fitted features or from other features ``x`` of
        the same answers (standardised as the fitted ones)."""
        n = len(FEATURES) * len(self.groups)
        weights, bias = w[:n].reshape(len(self.groups), -1), w[n:]
        features = self.z if x is None else (x - self.mean) / self.scale
        z = (features * weights[self.group_of]).sum(axis=1) + bias[self.task_of]
        return np.where(self.present, 1 / (1 + np.exp(-z)), 0.0)

    def leave_one_reader_out(self, among: np.ndarray) -> np.ndarray:
        """Each reader's cells (of the cells ``among``) predicted by a calibration fitted on the other readers
        ``among`` only (NaN outside ``among``)."""
        held_out = np.full(len(self.cells.cells), np.nan)
        for reader in sorted({c[0] for c, use in zip(self.cells.cells, among) if use}):
            mine = np.array([c[0] == reader for c in self.cells.cells])
            held_out[mine] = self.cells.means(self.probabilities(self.fit(among & ~mine)))[mine]
        return held_out

    def loss(self, w: np.ndarray, use: np.ndarray) -> tuple[float, np.ndarray]:
        """The squared error of the cells in ``use`` (plus the ridge) and its gradient."""
        n = len(FEATURES) * len(self.groups)
        p = self.probabilities(w)
        error = np.where(use, self.cells.means(p) - self.cells.target, 0.0)
        g = 2 * error[self.cells.cell_of] * self.cells.weight * p * (1 - p)  # d loss / d logit, per answer
        by_group = [(g[self.group_of == k, None] * self.z[self.group_of == k]).sum(axis=0)
                    for k in range(len(self.groups))]
        gradient = np.concatenate([np.concatenate(by_group) + 2 * self.ridge * w[:n],
                                   np.bincount(self.task_of, weights=g, minlength=len(TASKS))])
        return float((error ** 2).sum() + self.ridge * (w[:n] ** 2).sum()), gradient

    def fit(self, use: np.ndarray) -> np.ndarray:
        start = np.zeros(len(FEATURES) * len(self.groups) + len(TASKS))
        return minimize(self.loss, start, args=(use,), jac=True, method="L-BFGS-B").x

    def calibration(self, w: np.ndarray, fitted_on: dict) -> Calibration:
        n = len(FEATURES) * len(self.groups)
        weights = w[:n].reshape(len(self.groups), -1)
        return Calibration(tuple(self.mean.tolist()), tuple(self.scale.tolist()),
                           {g: tuple(weights[i].tolist()) for i, g in enumerate(self.groups)},
                           {t: float(w[n + i]) for i, t in enumerate(TASKS)}, dict(GROUPS), fitted_on)


def crude_scores(answers: list[dict]) -> np.ndarray:
    """The issue's crude scorer, for comparison: hallu = declines; else the mean of token and number recall."""
    out = []
    for a in answers:
        if not a["answer"]:
            out.append(0.0)
        elif a["task"] == "hallu":
            out.append(float(declines(a["answer"])))
        else:
            gold = content_words(a["gold"])
            recall = len(gold & content_words(a["answer"])) / len(gold) if gold else 0.0
            number = number_recall(a["gold"], a["answer"])
            out.append(recall if number is None else (recall + number) / 2)
    return np.array(out)


def style_shifts(answers: list[dict], fit: Fit, weights: np.ndarray, cache: Path, perturbations,
                 rows: np.ndarray | None = None) -> dict[str, dict]:
    """Per perturbation: how many answers it changed and how far it moves each reader's mean score (points) over
    ``answers`` (``rows``: where they are among the fitted answers, all of them by default)."""
    rows = np.ones(len(fit.present), bool) if rows is None else rows
    readers = np.array([a["reader"] for a in answers])
    before, out = fit.probabilities(weights)[rows], {}
    for name, perturb in perturbations:
        texts = [perturb(a["question"], a["gold"], a["answer"]) if a["answer"] else None for a in answers]
        x = fit.mean + fit.z * fit.scale  # the fitted features, with the perturbed answers' in their rows
        x[np.flatnonzero(rows)] = feature_matrix(answers, texts, cache)
        after = fit.probabilities(weights, x)[rows]
        changed = np.array([t != a["answer"] for t, a in zip(texts, answers)])
        moved = 100 * (after - before)[changed] if changed.any() else np.zeros(1)
        out[name] = {"changed": int(changed.sum()), "describe": (perturb.__doc__ or "").strip(),
                     "changed_shift": float(moved.mean()), "largest": float(moved[np.abs(moved).argmax()]),
                     "shift": {r: float(100 * (after[readers == r].mean() - before[readers == r].mean()))
                               for r in sorted(set(readers))}}
        log(f"{name}: {out[name]['changed']} answers changed")
    return out


def subsample(answers: list[dict], share: float) -> list[dict]:
    """A fixed share of the questions (the same ones for every reader and mode), for quick iterations."""
    return [a for a in answers if zlib.crc32(a["question"].encode("utf-8")) % 1000 < share * 1000]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lara", type=Path, required=True, help="the LaRA folder (../shared/data/lara)")
    parser.add_argument("--out", type=Path, required=True, help="the validation table (Markdown)")
    parser.add_argument("--calibration-out", type=Path,
                        help="write the calibration fitted on the locked split's training readers here")
    parser.add_argument("--split", type=Path, help="the locked split (default: the shipped LaRA split)")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "lcrag" / "bench")
    parser.add_argument("--sample", type=float, default=1.0, help="score this share of the questions (iterations)")
    args = parser.parse_args()
    started = time.perf_counter()
    split = LockedSplit.load(args.split)
    answers, table = subsample(load_answers(args.lara), args.sample), load_table(args.lara)
    x = feature_matrix(answers, [a["answer"] for a in answers], args.cache)
    present = np.array([a["answer"] is not None for a in answers])
    cells = Cells(answers, table)
    train = np.array([c[0] in split.train_readers for c in cells.cells])
    test = np.array([c[0] in split.test_readers for c in cells.cells])
    fit = Fit(x, present, [a["task"] for a in answers], cells,
              standardise_on=np.array([a["reader"] in split.train_readers for a in answers]))
    weights = fit.fit(train)  # the test readers' cells never enter the fit
    held_out = fit.leave_one_reader_out(train)
    shipped = cells.means(fit.probabilities(weights))
    if args.calibration_out:
        write_calibration(args.calibration_out, fit, weights, train, split.name)
    variants = {"crude (token/number recall, decline)": (cells.means(crude_scores(answers)), train),
                "offline, leave-one-reader-out among the training readers": (held_out, train),
                "offline, in-sample on the training readers (shipped)": (shipped, train),
                "**offline, locked test readers (scored once)**": (shipped, test)}
    shifts = style_shifts(answers, fit, weights, args.cache, PERTURBATIONS)
    hallu = [a for a in answers if a["task"] == "hallu"]
    decline_shifts = style_shifts(hallu, fit, weights, args.cache, DECLINE_PERTURBATIONS,
                                  np.array([a["task"] == "hallu" for a in answers]))
    write_report(args, cells, variants, (shifts, decline_shifts), int((~present).sum()),
                 time.perf_counter() - started, (split, train, test, held_out, shipped))


def write_calibration(path: Path, fit: Fit, weights: np.ndarray, train: np.ndarray, split: str) -> None:
    readers = sorted({c[0] for c, use in zip(fit.cells.cells, train) if use})
    fitted_on = {"data": "LaRA paper_table.csv (judge accuracy per cell)", "readers": readers,
                 "locked_split": f"{split}: fitted on its training readers only (test readers never fitted on)",
                 "answers": int(fit.present[np.isin(fit.cells.cell_of, np.flatnonzero(train))].size),
                 "fit": f"label proportions: squared error of cell means, ridge {fit.ridge:g}, L-BFGS-B",
                 "refit": "python benchmarks/validate_lara_scorer.py --lara LARA --calibration-out FILE"}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fit.calibration(weights, fitted_on).to_dict(), indent=1))


def write_report(args, cells: Cells, variants: dict, shifts: tuple[dict, dict], missing: int, seconds: float,
                 locked: tuple) -> None:
    split, train, test, held_out, shipped = locked
    lines = ["# The offline free-form scorer against LaRA's LLM judge", "",
             f"Command: `python benchmarks/validate_lara_scorer.py {' '.join(sys.argv[1:])}`", "",
             f"Machine: {machine()}; {seconds:.0f} s, on a machine shared with a long benchmark run using both cores "
             f"(this script measures agreement, not speed, so it ran outside the benchmark lock). "
             f"{len(cells.type_of)} recorded answers of {len({c[0] for c in cells.cells})} readers ({missing} "
             "missing answers score 0, as LaRA's judge saw `False`). Cells: reader × length × task × LC/RAG (each "
             "task the mean over book, financial, paper, as LaRA averages); the judge's values are the paper's table "
             "(GPT-4o judge).", "",
             f"**Locked split** `{split.name}` (issue 44, `calibration/lara_locked_split.json`): the calibration, and "
             "every choice of features, decline reading, ridge and groups, is made on the training readers only "
             f"({', '.join(sorted({c[0] for c, u in zip(cells.cells, train) if u}))}; gpt-4o-0806, the seventh, "
             "has"
             " no row in the judge table), selecting by leave-one-reader-out among them. The test readers "
             f"({', '.join(sorted(split.test_readers))}) are scored once, by the calibration fitted on the training "
             "readers (the one shipped), and nothing was changed after seeing them.", "",
             md_table(["scorer", "readers", "Spearman", "LC − RAG sign", "mean abs diff (points)", "max abs diff"],
                      [[name, "test" if use is test else "training", f"{a['spearman']:.3f}",
                        f"{a['sign']}/{a['pairs']} ({100 * a['sign'] / a['pairs']:.0f}%)", f"{a['mad']:.2f}",
                        f"{a['max']:.1f}"] for name, (v, use) in variants.items()
                       for a in [cells.agreement(v, use)]])]
    lines += locked_section(cells, shipped, test) + reader_section(cells, held_out, train)
    lines += decline_section(shifts[1]) + style_section(shifts[0])
    lines += cell_section(cells, np.where(train, held_out, shipped), test)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[: lines.index("## Every cell")]))


def locked_section(cells: Cells, shipped: np.ndarray, test: np.ndarray) -> list[str]:
    per_reader, per_task = cells.by(shipped, test, 0), cells.by(shipped, test, 2)
    agreement = cells.agreement(shipped, test)
    met = [agreement["spearman"] >= 0.9, agreement["mad"] <= 5, all(m <= 8 for m, _, _ in per_task.values())]
    return ["", "## The locked test readers (scored once)", "",
            "Targets (issue 44): Spearman ≥ 0.9 over their cells, mean absolute difference ≤ 5 points, every task "
            "family within 8 points of the judge table (its mean absolute difference over the test readers' cells; "
            "the largest single cell is given beside it). "
            f"Reached: Spearman {agreement['spearman']:.3f} ({'met' if met[0] else 'missed'}), mean absolute "
            f"difference {agreement['mad']:.2f} ({'met' if met[1] else 'missed'}), task families "
            f"{'all within 8' if met[2] else 'not all within 8'}.", "",
            md_table(["test reader", "mean abs diff (points)", "max abs diff", "mean signed (offline − judge)"],
                     [[r, f"{m:.2f}", f"{x:.1f}", f"{d:+.2f}"] for r, (m, x, d) in per_reader.items()]), "",
            md_table(["task family (test readers)", "mean abs diff (points)", "worst cell", "mean signed",
                      "within 8"],
                     [[t, f"{m:.2f}", f"{x:.1f}", f"{d:+.2f}", "yes" if m <= 8 else "**no**"]
                      for t, (m, x, d) in per_task.items()])]


def reader_section(cells: Cells, held_out: np.ndarray, train: np.ndarray) -> list[str]:
    per_reader = cells.by(held_out, train, 0)
    worst = max(per_reader, key=lambda r: per_reader[r][0])
    return ["", "## Every training reader left out", "",
            "Each training reader's 16 cells (2 lengths × 4 tasks × LC/RAG) scored by a calibration fitted on the "
            "other training readers: the figure every choice was made by.", "",
            md_table(["reader", "mean abs diff (points)", "max abs diff", ""],
                     [[r, f"{m:.2f}", f"{x:.1f}", "worst" if r == worst else ""]
                      for r, (m, x, _) in per_reader.items()]),
            "", f"Worst training reader: {worst}, {per_reader[worst][0]:.2f} points."]


def decline_section(shifts: dict[str, dict]) -> list[str]:
    recognised = []
    for family in FAMILIES:
        row = [family.name]
        for held_out in (False, True):
            texts = generate(family.name, held_out, count=200)
            row += [f"{sum(map(declines, texts))}/{len(texts)}", f"{sum(map(declines_first, texts))}"]
        recognised.append(row)
    lines = ["", "## How a decline is phrased (hallucination answers)", "",
             "The decline reading (`lcrag.core.text.declines`, used by the scorer and by the router's `declining`) is a "
             "general one — within a clause, a negation close before a verb of saying or finding with the source "
             "named, \"unclear\"/\"unknown\" with the source named, or \"no mention/information of …\" — checked on "
             "generated paraphrase families (`lcrag.evaluation.decline_families`, seeded): each family's "
             "development wordings and held-out wordings (other sources, verbs and frames) it was not written from. "
             "`declines_first` is the lead: answer-then-caveat wordings decline but do not lead with it.", "",
             md_table(["family", "declines (development)", "leads with it", "declines (held out)", "leads with it"],
                      recognised), "",
             "Each perturbation rewrites the recorded hallucination answers it can rewrite faithfully (a one-sentence "
             "decline whose topic can be read off, re-worded as another family's decline of the same topic; an "
             "answer-then-caveat with the caveat moved first; a caveat-then-answer with it moved last) and leaves "
             "the others. The table gives how far each moves each reader's hallucination mean (LC and RAG answers), "
             "in points, scored by the shipped calibration (target: |change| ≤ 2 for every family and reader; test "
             "readers included, as a check — nothing was fitted on this table).", ""]
    return lines + shift_lines(shifts)


def shift_lines(shifts: dict[str, dict]) -> list[str]:
    readers = sorted(next(iter(shifts.values()))["shift"])
    lines = [f"- **{name}** ({s['changed']} answers changed; over those the mean change is {s['changed_shift']:+.2f}"
             f" points, the largest {s['largest']:+.1f}): {' '.join(s['describe'].split())}"
             for name, s in shifts.items()]
    rows = [[r] + [f"{s['shift'][r]:+.2f}" for s in shifts.values()] for r in readers]
    rows.append(["**max \\|change\\|**"] + [f"**{max(abs(v) for v in s['shift'].values()):.2f}**"
                                               for s in shifts.values()])
    return lines + ["", md_table(["reader"] + list(shifts), rows)]


def style_section(shifts: dict[str, dict]) -> list[str]:
    lines = ["", "## How the answer is phrased", "",
             "Each perturbation rewrites every recorded answer (LC and RAG, all readers) where it can do so "
             "faithfully — so that LaRA's judge, which compares the answer with the gold answer, would give the same "
             "verdict — and leaves the others as they are. The shipped calibration (fitted on the training readers) "
             "scores the answers before and after; the table gives the change of each reader's mean score over all "
             "its answers, in points (target: |change| ≤ 2 for every reader and perturbation).", "",
             "The scorer reads an answer without courtesy and without a leading restatement of the question, with "
             "every number in one form, so the last three perturbations leave its features as they were whenever "
             "its reading undoes them (the unit tests check other wordings than these). Keeping only the first "
             "sentence is the real test: the scorer reads the answer's lead (its first sentences up to the one that "
             "completes what it says of the gold answer) rather than its length, but the whole answer's embedding "
             "similarity, hedges and figures of its own still count. The largest single changes are answers to "
             "questions the document does not answer that decline and then go on (\"However, revenue fell from "
             "…\"): cut to the decline, they read as a plain decline.", ""]
    return lines + shift_lines(shifts)


def cell_section(cells: Cells, values: np.ndarray, test: np.ndarray) -> list[str]:
    rows = []
    for c in cells.cells:
        if c[3] != "lc":
            continue
        i, j = cells.index[c], cells.index[c[:3] + ("rag",)]
        t, v = 100 * cells.target, 100 * values
        rows.append([c[0] + (" (test)" if test[i] else ""), *c[1:3], f"{t[i]:.1f}", f"{v[i]:.1f}", f"{t[j]:.1f}",
                     f"{v[j]:.1f}", f"{t[i] - t[j]:+.1f}", f"{v[i] - v[j]:+.1f}"])
    return ["", "## Every cell", "",
            "Training readers: leave-one-reader-out among them; test readers: the shipped calibration, scored once.",
            "", md_table(["reader", "length", "task", "judge LC", "offline LC", "judge RAG", "offline RAG",
                          "LC − RAG judge", "offline"], rows)]


if __name__ == "__main__":
    sys.exit(main())
