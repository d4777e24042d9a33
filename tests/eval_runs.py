"""Three vault questions evaluated by EvalRunner with a scripted reader, for the run-directory and eval tests of every
tier."""

from lcrag.evaluation.datasets import EvalItem
from lcrag.evaluation.runner import EvalRunner, expand_configs
from lcrag.pipeline.pipeline import Settings
from tests.conftest import ScriptedReader


def vault_items(context_repeats: int = 1) -> list[EvalItem]:
    """Three questions, each answered by its own short context (repeated, for more than one chunk)."""
    contexts = [f"Some text. The code for vault {i} is K{i}. More text." for i in range(3)]
    if context_repeats > 1:
        contexts = [(context + " ") * context_repeats for context in contexts]
    return [EvalItem(id=f"d/q{i}", dataset="d", question=f"What is the code for vault {i}?", answers=[f"K{i}"],
                     context=context) for i, context in enumerate(contexts)]


ITEMS = vault_items()


def run(out, reader=None, settings=None, configs=("lc",), items=ITEMS):
    runner = EvalRunner(items, expand_configs(list(configs), ["bm25"], [1], []), out,
                        settings or Settings(chunking="words:20"), reader=reader or ScriptedReader())
    return runner.run()


