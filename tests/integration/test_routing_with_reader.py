"""Routing with the bundled reader: Self-Route's decline probability from llama.cpp's token log-probabilities, and
--route-threshold sending questions to LC."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lcrag import Pipeline, Settings


@pytest.fixture
def routed(tmp_path, reader, embedder):
    def make(threshold):
        settings = Settings(k=3, chunking="words:100", cache_dir=tmp_path, max_tokens=24, route_threshold=threshold)
        return Pipeline(settings, reader=reader, embedder=embedder)
    return make


def test_the_decline_probability_is_measured_and_the_threshold_routes(routed, needles):
    document, facts = needles
    unknown = "What is the name of the ship's cat on the lunar ferry?"  # nothing in the document says
    answers = {t: routed(t).ask(document, unknown) for t in (None, 0.0)}
    p = answers[None].decline_probability
    assert p is not None and 0.0 < p < 1.0  # llama.cpp returned log-probabilities; a graded value, not 0 or 1
    assert answers[0.0].route == "lc"
    assert [c.stage for c in answers[0.0].calls] == ["route", "answer"]  # both calls billed
    # The server's numbers move a little between calls (its prompt cache changes the arithmetic: measured 0.034 vs
    # 0.037), so the thresholds sit well below and above the measured probability.
    assert answers[0.0].decline_probability == pytest.approx(p, rel=0.5)
    assert routed(p / 3).ask(document, unknown).route == "lc"
    assert routed((1 + 2 * p) / 3).ask(document, unknown).route == "rag"


def test_cli_route_threshold_in_json(tmp_path, needles):
    document, facts = needles
    path = tmp_path / "doc.txt"
    path.write_text(document.text, encoding="utf-8")
    out = subprocess.run([sys.executable, "-m", "lcrag.cli", "ask", str(path), facts[0].question, "--route-threshold",
                          "0", "--json", "--cache-dir", str(tmp_path / "cache"), "--price-as", "gpt-4o-mini"], capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert data["route"] == "lc" and 0.0 <= data["decline_probability"] <= 1.0
    # priced as gpt-4o-mini from the tokens the server reported (its cached prompt tokens at the cached price)
    from lcrag.evaluation.prices import BUILT_IN

    price = BUILT_IN["gpt-4o-mini"]
    expected = sum(price.cost(c["prompt_tokens"], c["completion_tokens"], c["cached_prompt_tokens"])
                   for c in data["calls"])
    assert data["cost"]["total"] == pytest.approx(expected) and data["cost"]["priced_as"] == "gpt-4o-mini"


def test_the_shipped_lara_router_routes_by_name(tmp_path, needles):
    """`--router lara`: the router lcrag ships, read from the package, its features computed live (the document's
    terms, the RAG answer in the reader's words); --lc-share 1 sends every question to LC, 0 none."""
    document, facts = needles
    path = tmp_path / "doc.txt"
    path.write_text(document.text, encoding="utf-8")
    routes = {}
    for share in ("1", "0"):
        out = subprocess.run([sys.executable, "-m", "lcrag.cli", "ask", str(path), facts[0].question, "--router", "lara",
                              "--lc-share", share, "--json", "--cache-dir", str(tmp_path / "cache")],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        routes[share] = json.loads(out.stdout)["route"]
    assert routes == {"1": "lc", "0": "rag"}


def test_separate_ask_processes_hold_one_lc_share(tmp_path, needles):
    """`--lc-share` is held per reader across `lcrag ask` processes: each process's decision is recorded in the
    cache's ledger and the next one continues it (the realized share counts every question so far)."""
    document, facts = needles
    path = tmp_path / "doc.txt"
    path.write_text(document.text, encoding="utf-8")
    seen = []
    questions = [f.question for f in facts[:3]] + ["What is the name of the ship's cat on the lunar ferry?"]
    for question in questions:
        out = subprocess.run([sys.executable, "-m", "lcrag.cli", "ask", str(path), question, "--router", "lara",
                              "--lc-share", "0.5", "--json", "--cache-dir", str(tmp_path / "cache")],
                             capture_output=True, text=True, timeout=600)
        assert out.returncode == 0, out.stderr
        data = json.loads(out.stdout)
        seen.append((data["route"], data["routing"]))
    assert [r["questions"] for _, r in seen] == [1, 2, 3, 4]
    assert all(r["lc_share"] == 0.5 for _, r in seen)
    sent = sum(route == "lc" for route, _ in seen)
    assert seen[-1][1]["realized_lc_share"] == pytest.approx(sent / 4, abs=0.01)
    assert all((route == "lc") == (r["score"] >= r["threshold"]) for route, r in seen if r["threshold"] is not None)
