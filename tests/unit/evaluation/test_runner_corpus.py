"""The runner's corpus-backed mode: configuration matrix and input checks (the real run is an integration test)."""

import pytest

from lcrag.core.errors import InputError
from lcrag.evaluation.datasets import EvalItem
from lcrag.evaluation.runner import EvalRunner, expand_configs


def test_longrag_configs_cross_units_and_keep_lc_once():
    configs = expand_configs(["lc", "longrag"], ["dense", "bm25"], [1, 4], [3072], units=["passage", "grouped"])
    ids = [c.id for c in configs]
    assert ids.count("lc") == 1
    assert "longrag|grouped|dense|k4" in ids and "longrag|passage|bm25|budget3072" in ids
    assert len(ids) == 1 + 2 * 2 * 3


def test_corpus_questions_need_a_corpus_and_a_corpus_strategy(tmp_path):
    items = [EvalItem(id="q", dataset="nq-open", question="who?", answers=["x"], context=None, metric="em")]
    with pytest.raises(InputError, match="pass --corpus"):
        EvalRunner(items, expand_configs(["longrag"], ["bm25"], [1], []), tmp_path)
    with pytest.raises(InputError, match="have no context: with a corpus-backed dataset pass --corpus INDEX"):
        EvalRunner(items, expand_configs(["rag"], ["bm25"], [1], []), tmp_path)
    # with a corpus, every strategy reads it (tests/unit/test_corpus_source.py runs them)
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "meta.json").write_text("{}")
    (corpus / "pieces.npz").touch()
    EvalRunner(items, expand_configs(["rag"], ["bm25"], [1], []), tmp_path / "run", corpus=corpus)


def test_a_corpus_that_is_not_one_is_refused_even_when_no_strategy_reads_it(tmp_path):
    items = [EvalItem(id="q", dataset="d", question="who?", answers=["x"], context="text", metric="em")]
    for wrong in (tmp_path / "missing", tmp_path):
        with pytest.raises(InputError, match="is not a corpus index"):
            EvalRunner(items, expand_configs(["rag"], ["bm25"], [1], []), tmp_path / "run", corpus=wrong)
