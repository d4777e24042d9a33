"""No per-question waste in an eval (issue 26): rows keep no sources, so no LC answer is located in the document;
every k of a matrix reads one index per document; question vectors are kept for every dense configuration."""

from __future__ import annotations

import pytest
from eval_runs import vault_items

import lcrag.pipeline.pipeline
from lcrag.evaluation.runner import EvalRunner, expand_configs
from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.retrieval import index as index_module
from lcrag.core.types import Document
from tests.conftest import ScriptedReader

pytestmark = pytest.mark.unit

ITEMS = vault_items(context_repeats=5)


def run(tmp_path, strategies, ks):
    runner = EvalRunner(ITEMS, expand_configs(strategies, ["bm25"], ks, []), tmp_path / "run",
                        Settings(chunking="words:10"), reader=ScriptedReader(lambda m: "K1"))
    return runner.run()


def test_an_eval_never_locates_sources_but_ask_still_does(tmp_path, monkeypatch):
    located = []
    cite = lcrag.pipeline.pipeline.cite
    monkeypatch.setattr(lcrag.pipeline.pipeline, "cite", lambda ctx, answer, *question: located.append(answer) or cite(ctx, answer, *question))
    rows = run(tmp_path, ["lc", "rag"], [1])
    assert len(rows) == 6 and located == []
    pipeline = Pipeline(Settings(chunking="words:10", cache=False, cache_dir=tmp_path), reader=ScriptedReader())
    answer = pipeline.ask(Document(text=ITEMS[1].context, source="v.txt"), ITEMS[1].question, "lc")
    assert located == [answer] and answer.sources


def test_every_k_of_an_eval_reads_one_index_per_document(tmp_path, monkeypatch):
    opened = []
    real = index_module.DocumentIndex.__init__

    def counting(self, document, *args, **kwargs):
        opened.append(document.content_hash)
        real(self, document, *args, **kwargs)

    monkeypatch.setattr(index_module.DocumentIndex, "__init__", counting)
    rows = run(tmp_path, ["rag"], [1, 2, 3])
    assert len(rows) == 9 and sorted(opened) == sorted({i for i in opened}) and len(opened) == 3
