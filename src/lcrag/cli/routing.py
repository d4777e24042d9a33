"""`lcrag route`: fit a learned router on evaluation runs, and report every router's quality-cost frontier."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from lcrag.cli.commands import command_group
from lcrag.core.errors import InputError

route_app = command_group("Learned routing between LC and RAG: fit a router, report routers.")

Runs = Annotated[list[Path], typer.Argument(help="Run directories of `lcrag eval` with lc and self-route rows.")]


Model = Annotated[str, typer.Option("--model", help="logistic (P(LC better)) or trees (boosted regression trees on LC's gain over RAG; interactions a linear model misses).")]
Judge = Annotated[Optional[str], typer.Option("--judge", help="Score the LC and RAG answers with LaRA's LLM judge on this OpenAI-compatible model (base URL and key from LCRAG_BASE_URL/OPENAI_BASE_URL and LCRAG_API_KEY/OPENAI_API_KEY) instead of the runs' metric; verdicts cached in the lcrag cache. Also openai:MODEL@BASE_URL.")]
JudgeSample = Annotated[Optional[int], typer.Option("--judge-sample", help="With --judge: judge only N sampled questions per run (both answers) and report the main policies' quality as a prediction-powered estimate (the runs' metric on every answer, corrected by the judged ones) with its 95% interval, next to the metric alone and the judged answers alone.")]
JudgeSeed = Annotated[int, typer.Option("--judge-seed", help="The seed of the --judge-sample draw.")]


def _questions(runs: list[Path], judge: str | None = None):
    from lcrag.evaluation.routing.report import judge_questions, load_questions

    for run in runs:
        if not (run / "rows.jsonl").is_file():
            raise InputError(f"{run} holds no rows.jsonl: not a run directory of lcrag eval")
    questions, skipped = load_questions(runs)
    if not questions:
        raise InputError("no question has both an lc and a self-route row: run `lcrag eval --strategies lc,self-route`")
    if judge:
        from lcrag.evaluation.judge_sample import open_judge

        questions, unjudged = judge_questions(questions, open_judge(judge))
        if unjudged:
            typer.echo(f"skipped {len(unjudged)} question(s) the judge gave no True/False verdict on; first: "
                       f"{unjudged[0]}", err=True)
        skipped += len(unjudged)
        if not questions:
            raise InputError(f"the judge {judge} gave no usable verdict on any question")
    return questions, skipped


@route_app.command("fit")
def fit(runs: Runs, out: Annotated[Path, typer.Option("--out", help="The router file to write (JSON).")],
        judge: Judge = None, model: Model = "logistic") -> None:
    """Fit a router (logistic regression, or boosted trees) predicting where LC beats Self-Route's RAG step."""
    from lcrag.evaluation.routing.report import fit_router

    questions, skipped = _questions(runs, judge)
    unmeasured = sum(not q.grounded for q in questions)
    if unmeasured:
        typer.echo(f"{unmeasured} of {len(questions)} questions come from runs made before lcrag recorded the RAG "
                   "answer's grounding: their answers count as grounded (run `lcrag eval` again to measure them)",
                   err=True)
    router = fit_router(questions, model)
    router.save(out)
    f = router.fitted_on
    typer.echo(f"{out}: fitted on {f['questions']} questions ({f['positives']} where LC is better; {skipped} without "
               f"both rows skipped) from {', '.join(f['datasets'])}")


@route_app.command("eval")
def evaluate(
    runs: Runs,
    router: Annotated[Optional[str], typer.Option("--router", help="A router to report: `lara` (shipped) or a file from `lcrag route fit`, given by a path with a slash or a suffix (else leave-one-dataset-out routers are fitted). Its landing is shown per run, dataset and length: its fixed threshold against run-time share control, both replayed offline, beside the routes the run itself took.")] = None,
    plot: Annotated[Optional[Path], typer.Option("--plot", help="Write the frontier as a PNG (needs lcrag[report]).")] = None,
    price_as: Annotated[Optional[str], typer.Option("--price-as", help="Price every call as this model (e.g. gpt-4o-mini): adds cost columns and the cache-aware router.")] = None,
    prices: Annotated[Optional[Path], typer.Option("--prices", help="A TOML/YAML price table over the built-in one.")] = None,
    judge: Judge = None,
    model: Model = "logistic",
    wide: Annotated[Optional[list[Path]], typer.Option("--wide", help="Runs of `lcrag eval --strategies self-route` at a larger k on the same questions: cascades (RAG -> wider RAG -> LC) are reported against the two-way routers at equal cost, on the questions they share.")] = None,
    judge_sample: JudgeSample = None,
    judge_seed: JudgeSeed = 0,
    lc_share: Annotated[Optional[float], typer.Option("--lc-share", help="With --router: the LC share run-time control holds (default: the router's own, else 0.3).", min=0.0, max=1.0)] = None,
    lc_cost_share: Annotated[Optional[float], typer.Option("--lc-cost-share", help="With --router: also hold LC's share of prompt tokens at this.", min=0.0, max=1.0)] = None,
    max_share: Annotated[float, typer.Option("--max-share", help="The operating point: a router's best setting sending at most this share of questions to LC (as benchmarks/results/routing_lara.md).", min=0.0, max=1.0)] = 0.4,
    max_cost: Annotated[float, typer.Option("--max-cost", help="The operating point's cost bound: at most this share of always-LC's cost (USD with --price-as, else prompt tokens).", min=0.0)] = 0.45,
) -> None:
    """Every router's quality, LC share and tokens per run, dataset and length; APGR, CPT and the oracle gain
    recovered at the operating point (LC share <= --max-share, cost <= --max-cost of always-LC's)."""
    from lcrag.evaluation.routing.report import leave_one_dataset_out, plot_frontier
    from lcrag.strategies.routing.learned import Router

    from lcrag.evaluation.judge_sample import open_judge, route_judged
    from lcrag.evaluation.prices import PriceTable

    price = PriceTable.load(prices).require(price_as) if price_as else None
    sampled = open_judge(judge, judge_sample) if judge_sample is not None else None  # else --judge judges every one
    questions, skipped = _questions(runs, None if sampled else judge)
    if router is not None:
        fitted = Router.load(router)
        probabilities, how = [fitted.probability(q.x) for q in questions], f"router {router}"
    else:
        probabilities, how = leave_one_dataset_out(questions, model), f"leave-one-dataset-out {model} routers"
    datasets = sorted({q.dataset for q in questions})
    typer.echo(f"{len(questions)} questions ({skipped} skipped) from {len(datasets)} datasets; learned router: {how}\n")
    points = _cell_reports(questions, probabilities, price, max_share, max_cost)
    if plot is not None:
        typer.echo(f"\nplot: {plot}" if plot_frontier(points, plot) else "\nplot skipped: pip install -e '.[report]' in lcrag's checkout")
    if router is not None:
        _landing(questions, probabilities, fitted, points, price, lc_share, lc_cost_share)
    if wide:
        _cascades(questions, probabilities, wide, price)
    if sampled is not None:
        typer.echo(f"\nQuality judged on a sample (--judge-sample {judge_sample}), per run\n")
        typer.echo(route_judged(questions, points, sampled, judge_sample, judge_seed))


OFFLINE = ("Every figure below is computed offline from the runs' recorded answers; a router's `share S` setting cuts "
           "at the cell's own S-quantile of its scores, in hindsight (not a share held at run time).")


def _cell_reports(questions, probabilities, price, max_share: float, max_cost: float):
    """The summary and frontier of each (run, dataset, length) cell, then of every cell pooled (labelled so) when
    there are several; returns the pooled points (the plot, landing, cascade and judged tables read them)."""
    from lcrag.evaluation.routing.report import SUMMARY_NOTE, cells, policies

    typer.echo(OFFLINE)
    found = cells(questions)
    for (run, dataset, length), mine in found.items():
        cell = [questions[i] for i in mine]
        typer.echo(f"\n### {run} · {dataset} · length {length}: {len(mine)} questions\n")
        _tables(cell, policies(cell, [probabilities[i] for i in mine], price), max_share, max_cost)
    points = policies(questions, probabilities, price)
    if len(found) > 1:
        typer.echo(f"\n### All {len(found)} cells pooled ({len(questions)} questions): several readers, datasets or "
                   "lengths in one table; the cells above are the figures to read\n")
        _tables(questions, points, max_share, max_cost)
    typer.echo(f"\n{SUMMARY_NOTE}")
    return points


def _tables(questions, points, max_share: float, max_cost: float) -> None:
    from lcrag.evaluation.report import _md_table
    from lcrag.evaluation.routing.report import frontier_table, summary_table

    typer.echo(_md_table(*summary_table(points, max_share, max_cost)) + "\n")
    typer.echo(_md_table(*frontier_table(questions, points)))


def _landing(questions, probabilities, router, points, price, share: float | None, cost_share: float | None) -> None:
    """Where the router lands on each run: its fixed threshold and run-time share control replayed offline, beside
    the baselines and the run's own routes."""
    from lcrag.evaluation.routing.held_share import landing_points, landing_table
    from lcrag.evaluation.report import _md_table

    share = share if share is not None else router.default_share if router.default_share is not None else 0.3
    landed = landing_points(questions, probabilities, router, share, cost_share)
    typer.echo("\nWhere the router lands per run (reader), dataset and length: its fixed threshold, calibrated on its "
               "fitting questions, against run-time share control (`--lc-share`), both replayed offline over the "
               "recorded questions (each run's decided in its order, one state per run), beside the routes the run "
               "itself took\n")
    typer.echo(_md_table(*landing_table(questions, points, landed, price)))


def _cascades(questions, probabilities, wide: list[Path], price) -> None:
    """The cascade table: the questions the wide runs also answered, every policy recomputed on them."""
    from lcrag.evaluation.report import _md_table
    from lcrag.evaluation.routing.report import attach_wide, cascade_table, policies

    for run in wide:
        if not (run / "rows.jsonl").is_file():
            raise InputError(f"{run} holds no rows.jsonl: not a run directory of lcrag eval")
    index = {id(q): p for q, p in zip(questions, probabilities)}
    shared = attach_wide(questions, wide)
    if not shared:
        raise InputError("no question of the runs is in the --wide runs: run them on the same dataset files")
    points = policies(shared, [index[id(q)] for q in shared], price)
    typer.echo(f"\n{len(shared)} questions also answered by the wide step: cascades vs two-way routers at equal cost\n")
    typer.echo(_md_table(*cascade_table(shared, points, price)))


MAX_CALIBRATION = 1000  # --max-questions' default: the most questions one calibration answers both ways


@route_app.command("calibrate")
def calibrate(
    ctx: typer.Context,
    documents: Annotated[Optional[list[Path]], typer.Option("--documents", help="A document (or a directory of them, as `lcrag ask` takes it) the questions are about; repeatable. Without --questions, questions are generated from its sentences.")] = None,
    questions: Annotated[Optional[Path], typer.Option("--questions", help="Your own questions: JSONL ({\"question\": ..., \"document\": PATH, \"answers\": [...]}, document and answers optional) or TSV (question, document path, gold answers...); a line without a document is about the one --documents.")] = None,
    n: Annotated[int, typer.Option("-n", help="Questions to answer both ways (the first N of --questions, or N generated).", min=1)] = 100,
    max_questions: Annotated[int, typer.Option("--max-questions", help="The most questions -n may ask for (each costs an LC answer).", min=1)] = MAX_CALIBRATION,
    router: Annotated[str, typer.Option("--router", help="The router to adapt: `lara` (shipped) or a router file (a path with a slash or a suffix).")] = "lara",
    llm: Annotated[str, typer.Option("--llm", "--reader", help="The reader to calibrate for, as `lcrag ask --llm` takes it (smollm2: bundled).")] = "smollm2",
    base_url: Annotated[Optional[str], typer.Option("--base-url", help="The reader's OpenAI-compatible server, as `lcrag ask` takes it.")] = None,
    chunking: Annotated[Optional[str], typer.Option("--chunking", help="Chunking of the RAG step, as `lcrag ask` takes it (default: Self-Route's own).")] = None,
    k: Annotated[int, typer.Option("-k", help="Chunks the RAG step retrieves.", min=1)] = 5,
    context_window: Annotated[Optional[int], typer.Option("--context-window", help="Reader window in tokens (default: the model's).")] = None,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Answer length limit.", min=1)] = 64,
    threads: Annotated[Optional[int], typer.Option("--threads", help="CPU threads for the embedded reader.")] = None,
    cache_dir: Annotated[Optional[Path], typer.Option("--cache-dir", envvar="LCRAG_CACHE_DIR", help="The cache the calibration is kept in (the one `lcrag ask`/`eval`/`serve` use).")] = None,
    explore: Annotated[float, typer.Option("--explore", help="Keep adapting as traffic flows: of the questions the router keeps on RAG, this share (0..1) is sent to LC as well (counted in the held share and the cost), and whether the two answers agree is added to the calibration.", min=0.0, max=1.0)] = 0.0,
    strength: Annotated[float, typer.Option("--strength", help="How many of the reader's questions a group needs before its own rate counts as much as the router's (larger: moves less).", min=1.0)] = 50.0,
    judge: Judge = None,
    judge_sample: JudgeSample = None,
    judge_seed: JudgeSeed = 0,
) -> None:
    """Adapt a router to your reader: answer N questions with both Self-Route's RAG step and LC, read where the
    two answers agree (LC was not needed there) and where they part (LC may gain), and keep the router's per-group
    scaling for this reader in the cache, where `lcrag ask`/`eval`/`serve --router` find it."""
    from lcrag.evaluation.routing.calibrate import generate_questions, read_questions
    from lcrag.pipeline.pipeline import as_source
    from lcrag.strategies.routing.learned import Router

    if n > max_questions:
        raise InputError(f"-n {n} is over --max-questions {max_questions} (each question costs an LC answer)")
    if not documents and questions is None:
        raise InputError("give --documents (questions are generated from them) or --questions FILE")
    fitted = Router.load(router)
    sampled = _calibration_judge(judge, judge_sample)
    from lcrag.pipeline.config import Config

    given = {"llm": llm, "base_url": base_url, "chunking": chunking, "k": k, "context_window": context_window,
             "max_tokens": max_tokens, "threads": threads, "cache_dir": cache_dir}
    settings = Config().merged({key: value for key, value in given.items() if value is not None}).settings()
    limits = ctx.find_root().obj  # lcrag --max-file-mb: the root command's ParseLimits
    loaded = [as_source(d, limits) for d in documents or []]
    asked = (read_questions(questions, loaded, lambda path: as_source(path, limits))[:n] if questions is not None
             else generate_questions(loaded, n))
    _run_calibration(settings, asked, questions is None, fitted, router, sampled, judge_sample, judge_seed, strength,
                     explore)


def _calibration_judge(judge: str | None, size: int | None):
    from lcrag.evaluation.judge_sample import open_judge

    if judge and size is None:
        raise InputError("--judge needs --judge-sample N: the questions the judge labels (both answers each)")
    return open_judge(judge, size)


def _run_calibration(settings, asked, generated, router, name, judge, judge_sample, seed, strength,
                     explore) -> None:
    from lcrag.evaluation.routing.calibrate import calibrate
    from lcrag.pipeline.pipeline import Pipeline
    from lcrag.core.progress import progress_factory
    from lcrag.readers.base import reader_identity
    from lcrag.strategies.routing.share_control import ShareLedgers

    with progress_factory() as progress:
        pipeline = Pipeline(settings, progress=progress)
        try:
            reader = reader_identity(pipeline.reader)
            run, calibration = calibrate(pipeline.ask, asked, reader, router, judge, judge_sample, seed, strength,
                                         lambda i: typer.echo(f"answered {i} of {len(asked)} both ways", err=True)
                                         if i % 10 == 0 or i == len(asked) else None, explore)
        finally:
            pipeline.close()
    store = ShareLedgers(pipeline.cache_dir / "routing-shares").calibrations
    path = store.save(calibration)
    _report_calibration(run, calibration, name, path, generated)


def _report_calibration(run, calibration, name: str, path: Path, generated: bool) -> None:
    from lcrag.evaluation.report import _md_table

    counts, factors = calibration.counts(), calibration.factors()
    how = "generated from the documents' sentences" if generated else "yours"
    typer.echo(f"{len(run.questions)} questions ({how}) answered both ways; the RAG answer agrees with LC's on "
               f"{100 * run.agreement:.0f}% (LC was not needed there)")
    judged = sum(label.source == "judge" for label in calibration.labels)
    if judged:
        typer.echo(f"{judged} labelled by the judge instead of the agreement reading")
    rows = [[group, n, f"{k / n:.2f}", f"{calibration.prior_rate(group):.2f}", f"×{factors[group]:.2f}"]
            for group, (n, k) in sorted(counts.items())]
    typer.echo("\nHow the router moved for this reader (its score per group multiplied by the factor):\n")
    typer.echo(_md_table(["question form / RAG answer", "questions", "LC may gain (disagree)",
                          "router's rate" if calibration.prior else "this reader's overall rate", "factor"], rows))
    typer.echo(f"\ncalibration of `{name}` for reader {calibration.reader}: {path}\n"
               f"`lcrag ask`/`eval`/`serve` with --router {name} and this reader now route with it"
               + (f", and send {calibration.explore:.0%} of the questions it keeps on RAG to LC as well, adding what "
                  "they show" if calibration.explore else ""))
