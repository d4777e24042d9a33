"""Calibrate lcrag's offline free-form scorer against LaRA's LLM judge, and validate it on readers left out.

LaRA publishes the judge's accuracy per (reader, length, task, LC/RAG) cell (paper_table.csv), each task the mean
over the three document types; the recorded answers of the readers in ../shared/data/lara/predictions are scored
by the offline scorer and averaged the same way. The calibration (a logistic model per task group) is fitted on
label proportions: cell means against the published cells. Reported: Spearman over cells, the sign of LC − RAG per
(reader, length, task), and the mean absolute difference in points — in-sample (the shipped calibration) and
leave-one-reader-out (each reader's cells predicted by a calibration fitted on the other readers only).

    python benchmarks/validate_lara_scorer.py --lara ../shared/data/lara --out benchmarks/results/lara_scorer.md \
        --calibration-out src/lcrag/evaluation/calibration/lara_judge.json

Needs scipy (pip install 'lcrag[route]').
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import re
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.optimize import minimize
from scipy.stats import spearmanr

from lcrag.evaluation.freeform import FEATURES, TASKS, Calibration, answer_features, content_words, number_recall
from lcrag.retrieval.embedders import make_embedder
from lcrag.text import declines

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


def similarities(answers: list[dict], cache: Path) -> list[float]:
    """Cosine of each answer with its gold answer by the bundled MiniLM; embeddings kept in ``cache`` (only texts
    not embedded before are embedded: ~42K texts take ~13 minutes on 2 cores)."""
    path = cache / "lara-minilm.npz"
    known: dict[str, np.ndarray] = {}
    if path.is_file():
        stored = np.load(path, allow_pickle=False)
        known = dict(zip(stored["texts"].tolist(), stored["vectors"]))
    texts = sorted({a["answer"] for a in answers if a["answer"]} | {a["gold"] for a in answers})
    missing = [t for t in texts if t not in known]
    if missing:
        known.update(zip(missing, make_embedder("minilm").embed(missing)))
        cache.mkdir(parents=True, exist_ok=True)
        np.savez(path, texts=np.array(list(known)), vectors=np.stack(list(known.values())))
    return [float(known[a["answer"]] @ known[a["gold"]]) if a["answer"] else 0.0 for a in answers]


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
        self.target = np.array([table[(TABLE_NAMES[c[0]],) + c[1:]] for c in self.cells])

    def means(self, scores: np.ndarray) -> np.ndarray:
        per_type = np.bincount(self.type_of, weights=scores, minlength=len(self.type_count)) / self.type_count
        return np.bincount(self.cell_of_type, weights=per_type, minlength=len(self.cells)) / self.types_per_cell

    def agreement(self, values: np.ndarray) -> dict:
        signs = [np.sign(values[self.index[c]] - values[self.index[c[:3] + ("rag",)]])
                 == np.sign(self.target[self.index[c]] - self.target[self.index[c[:3] + ("rag",)]])
                 for c in self.cells if c[3] == "lc"]
        return {"spearman": float(spearmanr(values, self.target).correlation), "sign": int(sum(signs)),
                "pairs": len(signs), "mad": float(np.abs(100 * (values - self.target)).mean()),
                "max": float(np.abs(100 * (values - self.target)).max())}


class Fit:
    """The label-proportion fit of a :class:`Calibration` (weights per group, bias per task)."""

    def __init__(self, x: np.ndarray, present: np.ndarray, tasks: list[str], cells: Cells, ridge: float = 1e-3):
        self.mean, self.scale = x[present].mean(axis=0), x[present].std(axis=0) + 1e-9
        self.z, self.present, self.cells, self.ridge = (x - self.mean) / self.scale, present, cells, ridge
        self.groups = sorted(set(GROUPS.values()))
        self.group_of = np.array([self.groups.index(GROUPS[t]) for t in tasks])
        self.task_of = np.array([TASKS.index(t) for t in tasks])

    def probabilities(self, w: np.ndarray) -> np.ndarray:
        n = len(FEATURES) * len(self.groups)
        weights, bias = w[:n].reshape(len(self.groups), -1), w[n:]
        z = (self.z * weights[self.group_of]).sum(axis=1) + bias[self.task_of]
        return np.where(self.present, 1 / (1 + np.exp(-z)), 0.0)

    def fit(self, use: np.ndarray) -> np.ndarray:
        n = len(FEATURES) * len(self.groups)

        def loss(w):
            error = self.cells.means(self.probabilities(w)) - self.cells.target
            return float((error[use] ** 2).sum() + self.ridge * (w[:n] ** 2).sum())

        return minimize(loss, np.zeros(n + len(TASKS)), method="L-BFGS-B").x

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lara", type=Path, required=True, help="the LaRA folder (../shared/data/lara)")
    parser.add_argument("--out", type=Path, required=True, help="the validation table (Markdown)")
    parser.add_argument("--calibration-out", type=Path, help="write the calibration fitted on every reader here")
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "lcrag" / "bench")
    args = parser.parse_args()
    started = time.perf_counter()
    answers, table = load_answers(args.lara), load_table(args.lara)
    sims = similarities(answers, args.cache)
    x = np.array([answer_features(a["question"], a["gold"], a["answer"], s) if a["answer"] else [0.0] * len(FEATURES)
                  for a, s in zip(answers, sims)])
    present = np.array([a["answer"] is not None for a in answers])
    cells = Cells(answers, table)
    fit = Fit(x, present, [a["task"] for a in answers], cells)
    readers = sorted({c[0] for c in cells.cells})
    weights = fit.fit(np.ones(len(cells.cells), bool))
    in_sample = cells.means(fit.probabilities(weights))
    held_out = np.zeros(len(cells.cells))
    for reader in readers:
        mine = np.array([c[0] == reader for c in cells.cells])
        held_out[mine] = cells.means(fit.probabilities(fit.fit(~mine)))[mine]
    crude = cells.means(crude_scores(answers))
    if args.calibration_out:
        fitted_on = {"data": "LaRA paper_table.csv (judge accuracy per cell)", "readers": readers,
                     "answers": int(len(answers)), "missing_answers": int((~present).sum()),
                     "fit": "label proportions: squared error of cell means, ridge 1e-3, L-BFGS-B",
                     "refit": "python benchmarks/validate_lara_scorer.py --lara LARA --calibration-out FILE"}
        args.calibration_out.parent.mkdir(parents=True, exist_ok=True)
        args.calibration_out.write_text(json.dumps(fit.calibration(weights, fitted_on).to_dict(), indent=1))
    write_report(args, cells, {"crude (token/number recall, decline)": crude, "offline, leave-one-reader-out": held_out,
                               "offline, in-sample (shipped)": in_sample}, held_out, len(answers),
                 int((~present).sum()), time.perf_counter() - started)


def write_report(args, cells: Cells, variants: dict[str, np.ndarray], held_out: np.ndarray, n: int, missing: int,
                 seconds: float) -> None:
    lines = ["# The offline free-form scorer against LaRA's LLM judge", "",
             f"Command: `python benchmarks/validate_lara_scorer.py --lara {args.lara} --out {args.out}"
             + (f" --calibration-out {args.calibration_out}`" if args.calibration_out else "`"), "",
             f"Machine: {platform.machine()}, {platform.python_version()}; {seconds:.0f} s. {n} recorded answers of "
             f"{len({c[0] for c in cells.cells})} readers ({missing} missing answers score 0, as LaRA's judge saw "
             "`False`). Cells: reader × length × task × LC/RAG (each task the mean over book, financial, paper, as "
             "LaRA averages); the judge's values are the paper's table (GPT-4o judge).", "",
             "Targets: Spearman ≥ 0.95 over cells, LC − RAG sign agreeing in ≥ 90% of (reader, length, task), mean "
             "absolute difference ≤ 4 points. *Leave-one-reader-out* is the honest figure: each reader scored by a "
             "calibration fitted without it.", "",
             "| scorer | Spearman | LC − RAG sign | mean abs diff (points) | max abs diff |", "|---|---|---|---|---|"]
    for name, values in variants.items():
        a = cells.agreement(values)
        lines.append(f"| {name} | {a['spearman']:.3f} | {a['sign']}/{a['pairs']} ({100 * a['sign'] / a['pairs']:.0f}%)"
                     f" | {a['mad']:.2f} | {a['max']:.1f} |")
    lines += ["", "## Every cell (offline: leave-one-reader-out)", "",
              "| reader | length | task | judge LC | offline LC | judge RAG | offline RAG | LC − RAG judge | offline |",
              "|---|---|---|---|---|---|---|---|---|"]
    for c in cells.cells:
        if c[3] != "lc":
            continue
        i, j = cells.index[c], cells.index[c[:3] + ("rag",)]
        t, v = 100 * cells.target, 100 * held_out
        lines.append(f"| {c[0]} | {c[1]} | {c[2]} | {t[i]:.1f} | {v[i]:.1f} | {t[j]:.1f} | {v[j]:.1f} | "
                     f"{t[i] - t[j]:+.1f} | {v[i] - v[j]:+.1f} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(lines) + "\n", encoding="utf-8")
    print("\n".join(lines[:len(variants) + 12]))


if __name__ == "__main__":
    sys.exit(main())
