"""`lcrag route calibrate` on the bundled reader (issue 44): questions generated from a document answered with
Self-Route's RAG step and with LC, the calibration kept under the cache for this reader and the shipped router, and
a later `lcrag ask --router lara` with the same reader and cache routing with it (and saying so), exploring as told
(`--explore`): a question kept on RAG also answered by LC, counted, billed, and added to the calibration."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from lcrag.strategies.routing.learned import Router

LCRAG = [sys.executable, "-m", "lcrag.cli"]


def lcrag(*args: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run([*LCRAG, *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def document(tmp_path, needles):
    text, facts = needles
    path = tmp_path / "doc.txt"
    path.write_text(text.text, encoding="utf-8")
    return path, facts


def test_calibrate_on_the_bundled_reader_then_ask_routes_with_it(tmp_path, document):
    path, facts = document
    cache = tmp_path / "cache"
    common = ["--cache-dir", str(cache), "--max-tokens", "24", "-k", "3", "--chunking", "words:100"]
    out = lcrag("route", "calibrate", "--documents", str(path), "-n", "3", "--router", "lara", "--explore", "1",
                *common)
    assert out.returncode == 0, out.stderr
    assert "3 questions (generated from the documents' sentences) answered both ways" in out.stdout
    files = list((cache / "routing-calibrations").glob("*.json"))
    assert len(files) == 1
    kept = json.loads(files[0].read_text())
    assert kept["format"] == "lcrag-routing-calibration" and kept["questions"] == 3
    assert kept["router"] == Router.load("lara").digest and kept["reader"].startswith("gguf:")
    assert all(source == "agreement" for _, _, source in kept["labels"])

    # --lc-share 0: the router keeps every question on RAG; exploring every one (--explore 1) sends it to LC too,
    # counted in the share and billed, and its agreement joins the calibration
    asked = lcrag("ask", str(path), facts[0].question, "--router", "lara", "--lc-share", "0", "--json", *common)
    assert asked.returncode == 0, asked.stderr
    answer = json.loads(asked.stdout)
    routing = answer["routing"]
    assert routing["calibration"]["questions"] == 3 and routing["calibration"]["factor"] > 0
    assert routing["explored"] is True and "declined" not in routing and answer["route"] == "lc"
    assert routing["realized_lc_share"] == 1.0 and [c["stage"] for c in answer["calls"]] == ["route", "answer"]
    grown = json.loads(files[0].read_text())
    assert grown["questions"] == 4 and grown["labels"][-1][2] == "explore" and grown["explore"] == 1.0

    elsewhere = lcrag("ask", str(path), facts[0].question, "--router", "lara", "--json", "--cache-dir",
                      str(tmp_path / "other-cache"), "--max-tokens", "24", "-k", "3", "--chunking", "words:100")
    assert elsewhere.returncode == 0, elsewhere.stderr
    assert "calibration" not in json.loads(elsewhere.stdout)["routing"]  # no calibration there: as shipped


@pytest.mark.parametrize("lines, message", [
    ('{"question": ""}\n', "no question"),
    ('{"question": "Who?"\n', "not JSON"),
    ("Who wrote it?\n", "no document for the question"),
])
def test_bad_questions_are_one_line_and_exit_2(tmp_path, lines, message):
    questions = tmp_path / "q.jsonl"
    questions.write_text(lines, encoding="utf-8")
    out = lcrag("route", "calibrate", "--questions", str(questions), "--cache-dir", str(tmp_path / "c"), timeout=120)
    assert out.returncode == 2 and message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
