import json
import sys

import pytest

from lcrag.core.errors import RunDirectoryError
from lcrag.evaluation.report import table1, win_lose, write_report
from lcrag.evaluation.runner import expand_configs, question_type


def row(item, strategy, score, tokens, route=None, pred="x", em=False, f1=0.0, k=5, budget=None, dataset="d1"):
    config = strategy if strategy == "lc" else f"{strategy}|bm25|k{k}"
    return {"item_id": item, "dataset": dataset, "config": config, "strategy": strategy, "retriever": "bm25", "k": k,
            "budget": budget, "question": "Who is it?", "question_type": "who", "answers": ["a"], "prediction": pred,
            "metric": "qa_f1", "score": score, "em": em, "f1": f1, "route": route or ("lc" if strategy == "lc" else "rag"),
            "prompt_tokens": tokens, "completion_tokens": 1}


def test_table1_and_win_lose():
    rows = [
        row("q1", "lc", 1.0, 1000, em=True, f1=1.0), row("q1", "rag", 0.0, 100), row("q1", "self-route", 1.0, 1100, route="lc"),
        row("q2", "lc", 0.0, 1000, f1=0.2), row("q2", "rag", 0.5, 100, f1=0.5), row("q2", "self-route", 0.5, 100),
    ]
    header, body = table1(rows)
    assert body[0] == ["d1", "qa_f1", 2, "50.00", "25.00", "75.00", "50.0", "60.0"]
    _, wl = win_lose(rows, "dataset")
    assert wl[-1] == ["all", 2, 0, 1, 0, 0, 1, 0]  # q1: LC only; q2: both wrong, RAG has the higher F1


def test_write_report_files(tmp_path):
    rows = [row(f"q{i}", s, i % 2, 100 * (i + 1)) for i in range(4) for s in ("lc", "rag", "self-route")]
    rows += [row(f"q{i}", "rag", 0.5, 50 * k, k=k) for i in range(4) for k in (1, 10)]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows) + '{"cut": ')
    (tmp_path / "manifest.json").write_text(json.dumps({"reader": "r", "metrics": {"qa_f1": "LongBench"}}))
    path = write_report(tmp_path)
    text = path.read_text()
    assert "Table 1" in text and "win–lose" in text and "k ablation" in text
    for name in ("table1.csv", "overlap.csv", "win_lose_by_question_type.csv", "overlap_hist.png", "k_ablation.png"):
        assert (path.parent / name).stat().st_size > 0


def test_config_matrix_and_question_types():
    ids = [c.id for c in expand_configs(["lc", "rag", "op-rag"], ["bm25", "dense"], [5, 10], [1024])]
    assert ids.count("lc") == 1 and "op-rag|dense|budget1024" in ids and len(ids) == 1 + 2 * 2 * 3
    assert [question_type(q) for q in ("Who wrote it?", "Is it red?", "In which year?", "Name it.")] == ["who", "yes-no", "which", "other"]


def _run_dir(tmp_path):
    rows = [row(f"q{i}", s, i % 2, 100 * (i + 1)) for i in range(4) for s in ("lc", "rag", "self-route")]
    (tmp_path / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return tmp_path / "rows.jsonl"


def test_report_refuses_a_malformed_line_anywhere_but_the_torn_end(tmp_path):
    path = _run_dir(tmp_path)
    lines = path.read_text().splitlines(keepends=True)
    path.write_text("".join(lines[:5]) + '{"item_id": "q9", "con\n' + "".join(lines[5:]))
    with pytest.raises(RunDirectoryError, match=r"rows.jsonl:6: not a JSON row.*fix or delete line 6"):
        write_report(tmp_path)
    path.write_text("".join(lines) + "not a row\n")  # a whole last line is not torn
    with pytest.raises(RunDirectoryError, match=r"rows.jsonl:13: "):
        write_report(tmp_path)


def test_report_skips_a_torn_last_line_and_says_so(tmp_path, caplog):
    path = _run_dir(tmp_path)
    path.write_text(path.read_text() + '{"item_id": "q9", "con')
    text = write_report(tmp_path).read_text()
    assert "12 rows" in text
    assert "skipped a torn last line" in caplog.text
    assert path.read_text().endswith('"con')  # the report never changes the run


def test_report_without_matplotlib_names_the_skipped_plots(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError
    _run_dir(tmp_path)
    text = write_report(tmp_path).read_text()
    assert "Not drawn: overlap_hist.png" in text and "pip install -e '.[report]' in lcrag's checkout" in text
    assert "plots skipped (matplotlib is not installed): overlap_hist.png" in caplog.text
    assert not (tmp_path / "report" / "overlap_hist.png").exists()


def test_any_strategy_whose_answers_took_more_than_one_route_shows_its_lc_share():
    from lcrag.evaluation.report import by_config

    rows = [row("q1", "cascade", 1.0, 900, route="lc"), row("q2", "cascade", 0.0, 100, route="rag-wide"),
            row("q3", "cascade", 1.0, 100, route="rag"), row("q1", "rag", 0.0, 100), row("q2", "rag", 0.0, 100)]
    rows[0]["calls"] = [{"stage": "route", "prompt_tokens": 100}, {"stage": "answer", "prompt_tokens": 800}]
    _, body = by_config(rows)
    shares = {line[1]: line[-2:] for line in body}
    # 1 of 3 questions to LC; LC's 800 prompt tokens of the 1,100 the configuration read
    assert shares == {"cascade|bm25|k5": ["33", "73"], "rag|bm25|k5": ["", ""]}


def test_the_k_and_budget_sweeps_cover_every_strategy_that_retrieves_not_a_list_of_names():
    from lcrag.evaluation.report import _sweep

    def row(strategy, item, k=None, budget=None, tokens=100, score=1.0):
        return {"strategy": strategy, "item_id": item, "k": k, "budget": budget, "prompt_tokens": tokens,
                "score": score, "retriever": "bm25", "config": f"{strategy}-k{k}-b{budget}"}

    rows = [row("lc", "q1", tokens=1000), row("closed-book", "q1", k=None)]
    rows += [row(s, "q1", k=k) for s in ("rag", "cascade", "map-reduce") for k in (3, 5)]
    rows += [row("op-rag", "q1", budget=512, tokens=500)]
    _, k_body = _sweep([r for r in rows if r["budget"] is None], "k")
    assert [(r[0], r[1]) for r in k_body] == [(s, k) for s in ("rag", "cascade", "map-reduce") for k in (3, 5)]
    assert k_body[0][-1] == "10.0"  # its prompt tokens as a share of LC's on the same questions
    _, budget_body = _sweep(rows, "budget")
    assert [(r[0], r[1], r[-1]) for r in budget_body] == [("op-rag", 512, "50.0")]
