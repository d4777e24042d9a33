"""Lock LaRA's test set: three readers of the most different answer styles, and a third of the documents.

Run once, before any further fitting (issue 44): every later choice — scorer calibration, features, model
capacity, thresholds, policy — is made by cross-validation on the training part (the other seven readers on the
other documents); the test part (the three readers on the test documents) is scored once per shipped router.

    python benchmarks/lock_lara_split.py ../shared/data/lara --out src/lcrag/evaluation/calibration/lara_locked_split.json

Readers. Each reader's style is measured on its recorded answers (LC and RAG, every question) with the router's
own text features (lcrag.core.text): mean answer length in words (log), how often it hedges (``hedges``), declines
anywhere in the answer (``declines``, the router's ``answer_declines_in_words``), and declines where the document
holds the answer (``declines`` on the non-hallucination questions: a refusal). The eight numbers are standardised
over the ten readers; the three readers chosen are the triple whose closest pair is farthest apart, among triples
that leave no test reader's twin (the same model under another name: ``TWINS``) in training.

Documents. A LaRA document is ``{length}/{type}/{file}`` (as lcrag's loader names it). In every (length, type)
stratum the documents are ranked by sha256(SALT + document) and the first round-half-up(FRACTION x n) are test
documents, so each (length, type, task) cell keeps questions on both sides.
"""

from __future__ import annotations

import argparse
import hashlib
import itertools
import json
import math
import sys
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

from lcrag.evaluation.datasets.lara import load_lara
from lcrag.core.files import atomic_write_text
from lcrag.core.text import declines, hedges

FRACTION = 0.3
SALT = "lcrag-lara-locked-1:"
TEST_READERS = 3
TWINS = (("gpt-4o", "gpt-4o-0806"), ("llama-3.3-70b", "llama-3.3-70b-turbo"))  # one model, two names
STYLE = ("LC words", "LC hedges", "LC declines", "LC refuses", "RAG words", "RAG hedges", "RAG declines",
         "RAG refuses")


def mode_style(files: list[Path]) -> list[float]:
    """Mean words, hedge rate, decline rate, refusal rate (a decline where the document holds the answer)."""
    words, hedged, declined, refused, answerable = [], 0, 0, 0, 0
    for path in files:
        hallu = path.name.endswith("_hallu.jsonl")
        for line in path.read_text(encoding="utf-8").splitlines():
            answer = str(json.loads(line).get("prediction") or "")
            words.append(len(answer.split()))
            hedged += hedges(answer)
            declined += declines(answer)
            refused += declines(answer) and not hallu
            answerable += not hallu
    n = len(words)
    return [sum(words) / n, hedged / n, declined / n, refused / answerable]


def reader_styles(lara: Path) -> dict[str, list[float]]:
    """Each reader's style (:data:`STYLE`) from its recorded LC ("full") and RAG prediction files."""
    styles = {}
    for folder in sorted(p for p in (lara / "predictions").iterdir() if p.is_dir()):
        styles[folder.name] = [*mode_style(sorted(folder.glob("full_preds_*.jsonl"))),
                               *mode_style(sorted(folder.glob("rag_preds_*.jsonl")))]
    return styles


def standardised(styles: dict[str, list[float]]) -> dict[str, list[float]]:
    """Lengths on a log scale, then every column to mean 0 and standard deviation 1 over the readers."""
    rows = {r: [math.log(v) if STYLE[i].endswith("words") else v for i, v in enumerate(s)] for r, s in styles.items()}
    columns = list(zip(*rows.values()))
    means = [sum(c) / len(c) for c in columns]
    sds = [math.sqrt(sum((v - m) ** 2 for v in c) / len(c)) or 1.0 for c, m in zip(columns, means)]
    return {r: [(v - m) / s for v, m, s in zip(row, means, sds)] for r, row in rows.items()}


def pick_readers(styles: dict[str, list[float]]) -> tuple[list[str], float]:
    """The triple whose closest pair in standardised style is farthest apart, no twin of a test reader left in
    training; and that closest distance."""
    z = standardised(styles)

    def twin_left(triple) -> bool:
        return any((a in triple) != (b in triple) for a, b in TWINS)

    triples = [t for t in itertools.combinations(sorted(z), TEST_READERS) if not twin_left(t)]
    best = max(triples, key=lambda t: min(math.dist(z[a], z[b]) for a, b in itertools.combinations(t, 2)))
    return list(best), min(math.dist(z[a], z[b]) for a, b in itertools.combinations(best, 2))


def documents(lara: Path) -> dict[str, list[str]]:
    """Every LaRA document and the ids of the questions asked of it, as lcrag's loader names both."""
    docs: dict[str, list[str]] = {}
    for item in load_lara(lara).items:
        docs.setdefault(item.meta["document"], []).append(item.id)
    return docs


def test_count(n: int) -> int:
    return max(1, int((Decimal(str(FRACTION)) * n).quantize(Decimal(1), rounding=ROUND_HALF_UP)))


def pick_documents(docs: dict[str, list[str]]) -> list[str]:
    """In each (length, type) stratum, the test_count(n) documents first by sha256(SALT + document)."""
    strata: dict[tuple[str, str], list[str]] = {}
    for doc in docs:
        length, kind, _ = doc.split("/", 2)
        strata.setdefault((length, kind), []).append(doc)
    chosen = []
    for members in strata.values():
        ranked = sorted(members, key=lambda d: hashlib.sha256((SALT + d).encode()).hexdigest())
        chosen += ranked[:test_count(len(members))]
    return sorted(chosen)


def split_data(lara: Path) -> tuple[dict, dict[str, list[float]]]:
    styles = reader_styles(lara)
    readers, closest = pick_readers(styles)
    docs = documents(lara)
    test = set(pick_documents(docs))
    data = {
        "format": "lcrag-locked-split", "name": "lara-locked-1", "dataset": "LaRA (Alibaba-NLP/LaRA c171553)",
        "test_readers": readers, "train_readers": sorted(r for r in styles if r not in readers),
        "reader_rule": "standardised style over the ten readers (LC and RAG: log mean words, hedge rate, decline "
                       "rate, refusal rate on answerable questions; lcrag.core.text hedges/declines); the triple whose "
                       f"closest pair is farthest apart (closest distance {closest:.2f}), no twin left in training "
                       f"({'; '.join('/'.join(t) for t in TWINS)})",
        "document_rule": {"fraction": FRACTION, "strata": ["length", "type"], "rank": f"sha256('{SALT}' + document)",
                          "count": "round half up of fraction x documents in the stratum, at least 1"},
        "test_documents": {d: docs[d] for d in sorted(test)},
        "train_documents": {d: docs[d] for d in sorted(docs) if d not in test},
    }
    return data, styles


def style_table(styles: dict[str, list[float]], test: list[str]) -> str:
    head = ["reader", "part", *STYLE]
    rows = [[r, "test" if r in test else "train", *(f"{v:.0f}" if STYLE[i].endswith("words") else f"{v:.3f}"
                                                    for i, v in enumerate(s))] for r, s in sorted(styles.items())]
    return "\n".join("| " + " | ".join(row) + " |" for row in [head, ["---"] * len(head), *rows])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("lara", type=Path, help="LaRA's folder (../shared/data/lara)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    data, styles = split_data(args.lara)
    atomic_write_text(args.out, json.dumps(data, indent=1, ensure_ascii=False) + "\n")
    print(style_table(styles, data["test_readers"]))
    for part in ("test", "train"):
        docs = data[f"{part}_documents"]
        print(f"{part}: {len(docs)} documents, {sum(len(v) for v in docs.values())} questions")
    return 0


if __name__ == "__main__":
    sys.exit(main())
