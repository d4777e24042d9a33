"""Reports from a run directory: Markdown, CSV and PNG plots.

a. Self-Route's Table 1: score per dataset for LC, RAG and Self-Route, answerable %, token % of LC;
b. LC/RAG prediction overlap and the histogram of their score differences;
c. k ablation (score and token ratio against k, RAG and Self-Route);
d. OP-RAG against score-ordered RAG across the context budget;
e. LC-vs-RAG win–lose (strict: EM-like score = 1; loose: higher score), by dataset and by question type.
"""

from __future__ import annotations

from collections.abc import Callable

import csv
import json
import logging
import statistics
from collections import defaultdict
from pathlib import Path

from lcrag.core.errors import InputError, RunDirectoryError
from lcrag.evaluation.metrics import normalize_answer
from lcrag.evaluation.rundir import ROWS, read_manifest, read_rows

log = logging.getLogger("lcrag")

PLOTS_EXTRA = "pip install -e '.[report]' in lcrag's checkout"  # matplotlib and its dependencies: ~97 MB installed, kept optional
JUDGED = "judged.json"  # `lcrag eval --judge`: each configuration's quality from judged answers (judge_sample.py)


def load_rows(run_dir: str | Path) -> list[dict]:
    """The finished rows, read without changing the file: a damaged line is a RunDirectoryError with ``file:line``;
    only a torn last line (a run killed or still writing) is skipped, with a warning."""
    path = Path(run_dir) / ROWS
    if not path.is_file():
        raise InputError(f"{run_dir} holds no rows.jsonl: not a run directory")
    rows = read_rows(path)
    if rows.tail and rows.tail_row is None:
        log.warning("%s: skipped a torn last line (%d bytes; the run was killed or is still writing it)",
                    path, len(rows.tail))
    return [*rows.rows.values(), *([rows.tail_row] if rows.tail_row else [])]


def _pick(rows: list[dict], strategy: str, retriever: str | None = None, k: int | None = None) -> dict[str, dict]:
    """item_id -> row for one strategy; with several configs, the papers' default: top-k nearest 5, then BM25."""
    order = {"bm25": 0, "dense": 1, "hybrid": 2}
    candidates = {(r["budget"] is not None, abs((r["k"] or 0) - 5), order.get(r["retriever"], 9), r["config"])
                  for r in rows if r["strategy"] == strategy
                  and (retriever is None or r["retriever"] == retriever) and (k is None or r["k"] == k)}
    if not candidates:
        return {}
    chosen = min(candidates)[-1]
    return {r["item_id"]: r for r in rows if r["config"] == chosen}


def _md_table(header: list[str], body: list[list]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in body]
    return "\n".join(lines)


def _write_csv(path: Path, header: list[str], body: list[list]) -> None:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(header)
        w.writerows(body)


def table1(rows: list[dict]) -> tuple[list[str], list[list]]:
    lc, rag, sr = _pick(rows, "lc"), _pick(rows, "rag"), _pick(rows, "self-route")
    header = ["dataset", "metric", "n", "LC", "RAG", "Self-Route", "answerable %", "token % of LC"]
    body = []
    datasets = sorted({r["dataset"] for r in rows})
    for ds in [*datasets, "average"]:
        ids = [i for i in lc if (ds == "average" or lc[i]["dataset"] == ds) and i in rag and i in sr]
        if not ids:
            continue

        def mean(table, ids=ids):
            return statistics.mean(table[i]["score"] for i in ids)

        lc_tokens = sum(lc[i]["prompt_tokens"] for i in ids) or 1
        metric = lc[ids[0]]["metric"] if ds != "average" else "mixed"
        body.append([ds, metric, len(ids), f"{100 * mean(lc):.2f}", f"{100 * mean(rag):.2f}", f"{100 * mean(sr):.2f}",
                     f"{100 * sum(sr[i]['route'] == 'rag' for i in ids) / len(ids):.1f}",
                     f"{100 * sum(sr[i]['prompt_tokens'] for i in ids) / lc_tokens:.1f}"])
    return header, body


def by_config(rows: list[dict], cost: Callable[[dict], float | None] | None = None) -> tuple[list[str], list[list]]:
    """Every configuration of the run (OP-RAG included) per dataset: score, prompt tokens, money (when ``cost``
    prices a row), routes."""
    header = ["dataset", "config", "n", "score", "mean prompt tokens", *(["USD / 1K questions"] if cost else []),
              "routed to LC %", "LC share of prompt tokens %"]
    groups: dict[tuple[str, str], list[dict]] = defaultdict(list)
    for r in rows:
        if r["strategy"] != "closed-book":
            groups[(r["dataset"], r["config"])].append(r)
    body = [[ds, cfg, len(g), f"{100 * statistics.mean(r['score'] for r in g):.2f}",
             f"{statistics.mean(r['prompt_tokens'] for r in g):.0f}", *([_money(g, cost)] if cost else []),
             *([f"{100 * sum(r['route'] == 'lc' for r in g) / len(g):.0f}", f"{100 * lc_token_share(g):.0f}"]
               if _routes(g) else ["", ""])]
            for (ds, cfg), g in sorted(groups.items())]
    return header, body


def lc_token_share(rows: list[dict]) -> float:
    """LC's share of the rows' prompt tokens: the answering calls of the rows routed to LC, over every call's."""
    total = sum(r["prompt_tokens"] for r in rows)
    lc = sum(c["prompt_tokens"] for r in rows if r["route"] == "lc" for c in r.get("calls", ()) if c["stage"] == "answer")
    return lc / total if total else 0.0


def _routes(group: list[dict]) -> bool:
    """Whether a configuration's answers were routed: Self-Route's always, any other strategy's (cascade, a
    plugin's) when its rows took more than one route."""
    return group[0]["strategy"] == "self-route" or len({r["route"] for r in group}) > 1


def _money(rows: list[dict], cost: Callable[[dict], float | None]) -> str:
    """Mean USD per 1,000 questions of ``rows``, or "unpriced" when a row's model has no price."""
    costs = [cost(r) for r in rows]
    return "unpriced" if any(c is None for c in costs) else f"{1000 * statistics.mean(costs):.3f}"


def overlap(rows: list[dict]) -> tuple[list[str], list[list], list[float]]:
    lc, rag = _pick(rows, "lc"), _pick(rows, "rag")
    ids = [i for i in lc if i in rag]
    header = ["dataset", "n", "identical LC/RAG predictions %", "mean score LC − RAG"]
    body, diffs = [], []
    for ds in sorted({lc[i]["dataset"] for i in ids}):
        sub = [i for i in ids if lc[i]["dataset"] == ds]
        same = sum(normalize_answer(lc[i]["prediction"]) == normalize_answer(rag[i]["prediction"]) for i in sub)
        d = [lc[i]["score"] - rag[i]["score"] for i in sub]
        diffs += d
        body.append([ds, len(sub), f"{100 * same / len(sub):.1f}", f"{100 * statistics.mean(d):+.2f}"])
    return header, body, diffs


GRADED_METRICS = ("qa_f1", "rouge_l", "infbench_qa_f1")  # partial credit: "correct" needs exact match there


def is_correct(row: dict) -> bool:
    """Strict correctness: exact match for free-form answers; the task's own all-or-nothing metric for choice,
    passkey and containment tasks (where EM would fail "B" against the gold "B. text")."""
    return bool(row["em"]) or (row["metric"] not in GRADED_METRICS and row["score"] >= 0.999)


def win_lose(rows: list[dict], by: str) -> tuple[list[str], list[list]]:
    """Strict: correct = :func:`is_correct` (exact match, LongRAG/SQuAD normalisation, for free-form answers); loose: among both-wrong pairs, the side with the
    higher LongBench F1 is "better" (the LC-vs-RAG study's strict/loose split)."""
    lc, rag = _pick(rows, "lc"), _pick(rows, "rag")
    ids = [i for i in lc if i in rag]
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for i in ids:
        group = lc[i][by]
        a, b = lc[i]["f1"], rag[i]["f1"]
        ca, cb = is_correct(lc[i]), is_correct(rag[i])
        label = ("both correct" if ca and cb else "LC only" if ca else "RAG only" if cb
                 else "LC better" if a > b else "RAG better" if b > a else "both wrong, tie")
        counts[group][label] += 1
        counts["all"][label] += 1
    labels = ["both correct", "LC only", "RAG only", "LC better", "RAG better", "both wrong, tie"]
    header = [by, "n", *labels]
    body = [[g, sum(c.values()), *(c[x] for x in labels)] for g, c in sorted(counts.items(), key=lambda kv: kv[0] == "all")]
    return header, body


def _sweep(rows: list[dict], field: str) -> tuple[list[str], list[list]]:
    """Score and cost by ``field`` (k, budget) for every strategy that retrieves and ran with it (RAG, OP-RAG,
    Self-Route, cascade, a plugin's), in the order the run lists them; LC, the reference, reads everything."""
    lc = _pick(rows, "lc")
    strategies = list(dict.fromkeys(r["strategy"] for r in rows if r["strategy"] not in ("lc", "closed-book")
                                    and r.get(field) is not None))
    header = ["strategy", field, "n", "score", "token % of LC"]
    body = []
    for strategy in strategies:
        values = sorted({r[field] for r in rows if r["strategy"] == strategy and r[field] is not None})
        for v in values:
            sub = [r for r in rows if r["strategy"] == strategy and r[field] == v]
            lc_tokens = sum(lc[r["item_id"]]["prompt_tokens"] for r in sub if r["item_id"] in lc)
            ratio = f"{100 * sum(r['prompt_tokens'] for r in sub) / lc_tokens:.1f}" if lc_tokens else "—"
            body.append([strategy, v, len(sub), f"{100 * statistics.mean(r['score'] for r in sub):.2f}", ratio])
    return header, body


def _series(body: list[list]) -> dict[str, list[tuple]]:
    series = defaultdict(list)
    for strategy, x, _n, score, _ratio in body:
        series[strategy].append((x, float(score)))
    return series


def _plots(out: Path, diffs: list[float], k_body: list[list], budget_body: list[list]) -> tuple[list[str], list[str]]:
    """(plots written, plots skipped because matplotlib is not installed)."""
    curves = [(name, _series(body), xlabel) for name, body, xlabel in
              (("k_ablation.png", k_body, "k"), ("budget_curve.png", budget_body, "retrieved-token budget"))]
    curves = [c for c in curves if any(len(v) > 1 for v in c[1].values())]  # a curve needs two points
    due = (["overlap_hist.png"] if diffs else []) + [name for name, _, _ in curves]
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return [], due
    if diffs:
        fig, ax = plt.subplots(figsize=(5, 3))
        ax.hist(diffs, bins=21, range=(-1, 1))
        ax.set_xlabel("score(LC) − score(RAG)")
        ax.set_ylabel("questions")
        fig.tight_layout()
        fig.savefig(out / "overlap_hist.png", dpi=120)
        plt.close(fig)
    for name, series, xlabel in curves:
        fig, ax = plt.subplots(figsize=(5, 3))
        for strategy, points in series.items():
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=strategy)
        ax.set_xlabel(xlabel)
        ax.set_ylabel("score")
        ax.legend()
        fig.tight_layout()
        fig.savefig(out / name, dpi=120)
        plt.close(fig)
    return due, []


def corpus_table(rows: list[dict]) -> tuple[list[str], list[list]]:
    """LongRAG rows: EM, refined EM, answer recall of the context read, gold-document recall, units and tokens."""
    from lcrag.evaluation.metrics import has_answer

    header = ["dataset", "config", "n", "EM", "refined EM", "F1", "long answer has it", "answer recall",
              "gold-doc recall", "units read", "context tokens", "prompt tokens"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        if "answer_recall" in r:
            groups.setdefault((r["dataset"], r["config"]), []).append(r)
    body = []
    for (dataset, config), rs in sorted(groups.items()):
        gold = [r["gold_recall"] for r in rs if r.get("gold_recall") is not None]

        def pct(values) -> str:
            values = list(values)
            return f"{100 * sum(values) / len(values):.1f}" if values else "–"

        body.append([dataset, config, len(rs), pct(r["em"] for r in rs), pct(r["refined_em"] for r in rs),
                     f"{100 * sum(r['f1'] for r in rs) / len(rs):.1f}",
                     # LongRAG's is_substring_match: the turn-1 answer contains a gold answer (DPR has_answer)
                     pct(has_answer(r.get("long_answer") or "", r["answers"]) for r in rs),
                     pct(r["answer_recall"] for r in rs), pct(gold),
                     f"{sum(r['units'] for r in rs) / len(rs):.1f}",
                     f"{sum(r['context_tokens'] or 0 for r in rs) / len(rs):.0f}",
                     f"{sum(r['prompt_tokens'] for r in rs) / len(rs):.0f}"])
    return header, body


def retriever_table(rows: list[dict]) -> tuple[list[str], list[list]]:
    """The LC-vs-RAG study's Table 5, one line per RAG retrieval configuration, against LC on the same questions.

    Correct = :func:`is_correct` (strict). RAG only = RAG correct, LC not. RAG better = the study's loose count: RAG only,
    plus questions both got wrong where RAG's F1 is higher. Index seconds = time opening or building the retriever's
    index (the first question on a document builds it); summary calls and tokens = the one-off bill of summary
    indexes, each document counted once.
    """
    lc = {r["item_id"]: r for r in rows if r["strategy"] == "lc"}
    configs = sorted({r["config"] for r in rows if r["strategy"] == "rag"})
    header = ["retriever", "n", "correct (%)", "RAG only", "RAG better", "LC correct", "score", "prompt tokens",
              "index s", "summary calls", "summary tokens (prompt + completion)"]
    body = []
    for config in configs:
        rs = [r for r in rows if r["config"] == config and r["item_id"] in lc]
        if not rs:
            continue
        lc_ok = {r["item_id"]: is_correct(lc[r["item_id"]]) for r in rs}
        correct = sum(is_correct(r) for r in rs)
        only = sum(is_correct(r) and not lc_ok[r["item_id"]] for r in rs)
        better = only + sum(not is_correct(r) and not lc_ok[r["item_id"]] and r["f1"] > lc[r["item_id"]]["f1"]
                            for r in rs)
        costs = {r["index_cost"]["document"]: r["index_cost"] for r in rs if r.get("index_cost")}
        calls = sum(c["calls"] for c in costs.values())
        tokens = (f"{sum(c['prompt_tokens'] for c in costs.values()):,} + "
                  f"{sum(c['completion_tokens'] for c in costs.values()):,}") if costs else "0"
        body.append([config.removeprefix("rag|").replace("|", " · "), len(rs), f"{correct} ({100 * correct / len(rs):.1f})", only, better,
                     sum(lc_ok.values()),
                     f"{100 * statistics.mean(r['score'] for r in rs):.2f}",
                     f"{statistics.mean(r['prompt_tokens'] for r in rs):.0f}",
                     f"{sum(r.get('index_seconds', 0.0) for r in rs):.1f}", calls, tokens])
    return header, body


def _read_sessions(path: Path) -> list[dict]:
    """sessions.jsonl: a torn last line (a killed run) is left out; any other bad line is reported."""
    lines = path.read_bytes().split(b"\n")
    sessions = []
    for lineno, raw in enumerate(lines[:-1], 1):  # lines[-1] follows the last newline: empty or torn
        if not raw.strip():
            continue
        try:
            session = json.loads(raw)
            float(session["rows"]), float(session["wall_seconds"]), float(session["llm_seconds"])
        except (ValueError, KeyError, TypeError):
            raise RunDirectoryError(f"{path}:{lineno}: not a session record (rows, wall_seconds, llm_seconds); "
                                    f"fix or delete line {lineno}") from None
        sessions.append(session)
    return sessions


def session_times(run_dir: Path) -> tuple[float, float, bool]:
    """(wall seconds, seconds waiting on the reader, all sequential) over the run's sessions that called the reader;
    sessions answered wholly from the cache measure nothing and are left out."""
    path = Path(run_dir) / "sessions.jsonl"
    sessions = _read_sessions(path) if path.exists() else []
    measured = [x for x in sessions if x["rows"] and x["llm_seconds"] > 0]
    return (sum(x["wall_seconds"] for x in measured), sum(x["llm_seconds"] for x in measured),
            all(x.get("concurrency", 1) == 1 for x in measured))


def judged_section(run_dir: Path) -> str:
    """The report's section on quality from judged answers, from RUN/judged.json."""
    path = run_dir / JUDGED
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        table = _md_table(data["header"], data["body"])
        return f"## Quality with a judge (`{data['judge']}`)\n\n{table}\n\n{data['note']}"
    except (ValueError, KeyError, TypeError):
        raise RunDirectoryError(f"{path}: not the table `lcrag eval --judge` writes; delete it or judge again") from None


_TITLES = {"corpus": "LongRAG over a corpus (EM = LongRAG single_ans_em and refined EM = §6.2, both on the turn-2 short answer; F1 = LongBench qa_f1; long answer has it = LongRAG is_substring_match on the turn-1 answer)",
           "table1": "a. LC, RAG and Self-Route (Self-Route paper, Table 1 layout)",
           "by_config": "Every configuration, per dataset",
           "overlap": "b. LC/RAG prediction overlap", "k_ablation": "c. k ablation",
           "budget_curve": "d. OP-RAG vs score-ordered RAG across the budget",
           "win_lose_by_dataset": "e. LC vs RAG win–lose, by dataset",
           "win_lose_by_question_type": "e. LC vs RAG win–lose, by question type",
           "retrievers": "f. Retrievers against LC (LC-vs-RAG study, Table 5 layout; prompt tokens = mean per RAG question)"}


def write_report(run_dir: str | Path, cost: Callable[[dict], float | None] | None = None) -> Path:
    """report.md, CSV tables and plots in RUN/report/; ``cost`` (a row's calls priced in USD, e.g. by
    :func:`lcrag.evaluation.prices.calls_cost`) adds money next to tokens."""
    run_dir = Path(run_dir)
    rows = load_rows(run_dir)
    if not rows:
        raise InputError(f"{run_dir} has no finished rows yet")
    out = run_dir / "report"
    out.mkdir(exist_ok=True)
    tables, diffs = _tables(rows, cost)
    for name, (header, body) in tables.items():
        _write_csv(out / f"{name}.csv", header, body)
    plots, skipped = _plots(out, diffs, tables["k_ablation"][1], tables["budget_curve"][1])
    if skipped:
        log.warning("plots skipped (matplotlib is not installed): %s; to get them: %s", ", ".join(skipped), PLOTS_EXTRA)
    sections = [_heading(run_dir, rows)]
    for name, (header, body) in tables.items():
        sections.append(f"## {_TITLES[name]}\n\n" + (_md_table(header, body) if body else "(no rows for this analysis in this run)"))
    if (run_dir / JUDGED).is_file():
        sections.append(judged_section(run_dir))
    if skipped:
        sections.append(f"## Plots\n\nNot drawn: {', '.join(skipped)} (matplotlib is not installed; `{PLOTS_EXTRA}`).")
    if plots:
        sections.append("## Plots\n\n" + "\n".join(f"![{p}]({p})" for p in plots))
    path = out / "report.md"
    path.write_text("\n\n".join(sections) + "\n", encoding="utf-8")
    return path


def _tables(rows: list[dict], cost: Callable[[dict], float | None] | None) -> tuple[dict, list]:
    """The report's tables by name (the corpus table first when the run has corpus rows, the retrievers' when it
    compares several), and the LC/RAG prediction differences the overlap plot draws."""
    ov_header, ov_body, diffs = overlap(rows)
    tables = {"table1": table1(rows), "by_config": by_config(rows, cost), "overlap": (ov_header, ov_body),
              "k_ablation": _sweep([r for r in rows if r["budget"] is None], "k"),
              "budget_curve": _sweep(rows, "budget"), "win_lose_by_dataset": win_lose(rows, "dataset"),
              "win_lose_by_question_type": win_lose(rows, "question_type")}
    retrievers = retriever_table(rows)
    if len(retrievers[1]) > 1:
        tables["retrievers"] = retrievers
    corpus = corpus_table(rows)
    return ({"corpus": corpus, **tables} if corpus[1] else tables), diffs


def _heading(run_dir: Path, rows: list[dict]) -> str:
    """The report's title paragraph: the run, its reader and prompts, its metrics, the harness's overhead and the
    closed-book question filter."""
    manifest = read_manifest(run_dir) or {}
    overhead = ""
    wall, llm, sequential = session_times(run_dir)
    if wall and sequential:
        overhead = (f"\n\nHarness overhead (wall time not spent waiting on the reader, sequential sessions): "
                    f"{100 * (wall - llm) / wall:.1f}% of {wall:.0f} s.")
    closed = [r for r in rows if r["strategy"] == "closed-book"]
    if closed:
        overhead += (f"\n\nQuestion filter (closed-book stage): {sum(r['score'] >= 0.999 for r in closed)} of "
                     f"{len(closed)} questions answered correctly without any context.")
    metrics = "; ".join(f"`{k}` = {v}" for k, v in manifest.get("metrics", {}).items())
    return (f"# Evaluation report\n\nRun: `{run_dir}` · reader `{manifest.get('reader')}` · "
            f"prompts `{manifest.get('prompt_version')}` · {len(rows)} rows.\n\nMetrics: {metrics or 'see rows'}.\n"
            "Scores are ×100 means over questions; token % = Self-Route's (or the strategy's) prompt tokens "
            "over LC's on the same questions." + overhead)
