"""No per-question waste in an eval (issue 26): rows keep no sources, so no LC answer is located in the document;
every k of a matrix reads one index per document; question vectors are kept for every dense configuration."""

from __future__ import annotations

from eval_runs import vault_items

from lcrag.evaluation.runner import EvalRunner, expand_configs
from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.retrieval.query_cache import CachedQueryEmbedder
from tests.conftest import ScriptedReader


ITEMS = vault_items(context_repeats=5)


def run(tmp_path, strategies, ks):
    runner = EvalRunner(ITEMS, expand_configs(strategies, ["bm25"], ks, []), tmp_path / "run",
                        Settings(chunking="words:10"), reader=ScriptedReader(lambda m: "K1"))
    return runner.run()


def test_question_vectors_are_kept_when_asked_even_without_the_completion_cache(tmp_path):
    settings = Settings(cache=False, cache_dir=tmp_path)
    assert not isinstance(Pipeline(settings).embedder, CachedQueryEmbedder)
    assert isinstance(Pipeline(settings, query_cache=True).embedder, CachedQueryEmbedder)
