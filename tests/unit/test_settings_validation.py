"""Defect 2b (issue 14): option values are checked in one place, the settings objects, before any model call."""

import re

import pytest

import lcrag
from lcrag.pipeline import pipeline
from lcrag.core.errors import InputError, OptionError
from lcrag.core.options import EvalOptions, cli_message
from lcrag.pipeline.pipeline import Settings


@pytest.mark.parametrize(
    "values, message",
    [
        ({"chunking": "words:0"}, "chunking must be UNIT:SIZE with UNIT one of words, tokens, sentences, sentence-splitter and SIZE ≥ 1"),
        ({"chunking": "pages:3"}, "got 'pages:3'"),
        ({"chunking": "words:-5"}, "got 'words:-5'"),
        ({"max_tokens": 0}, "max_tokens must be ≥ 1, got 0"),
        ({"max_tokens": -1}, "max_tokens must be ≥ 1, got -1"),
        ({"max_tokens": 2.5}, "max_tokens must be a whole number ≥ 1, got 2.5"),
        ({"context_window": 0}, "context_window must be ≥ 1, got 0"),
        ({"context_window": -1}, "context_window must be ≥ 1, got -1"),
        ({"context_window": 32}, "context_window must be above max_tokens (64), got 32"),
        ({"window": -1}, "window must be ≥ 0, got -1"),
        ({"threads": 0}, "threads must be ≥ 1, got 0"),
        ({"k": 0}, "k must be ≥ 1, got 0"),
        ({"budget": 0}, "budget must be ≥ 1, got 0"),
        ({"strategy": "magic"}, "strategy must be one of closed-book, lc, rag, op-rag, self-route"),
        ({"retriever": "grep"}, "retriever must be one of bm25, dense"),
        ({"order": "random"}, "order must be one of score, document; got 'random'"),
        ({"tree_navigation": "guess"}, "tree_navigation must be one of embedding, llm; got 'guess'"),
        ({"prompts": {"lc": "x"}}, "prompts must be a PromptSet, got dict"),
    ],
)
def test_settings_refuse_values_outside_their_range(values, message):
    with pytest.raises(OptionError) as caught:
        Settings(**values)
    assert message in str(caught.value)


def test_valid_edges_are_accepted():
    Settings(window=0, k=1, budget=1, max_tokens=1, context_window=2, threads=1, chunking="sentences:1")
    Settings(chunking="words")  # a unit alone takes its default size


def test_cli_names_the_flag():
    with pytest.raises(OptionError) as caught:
        Settings(max_tokens=0)
    assert cli_message(caught.value) == "--max-tokens must be ≥ 1, got 0"


@pytest.mark.parametrize("values", [{"max_tokens": 0}, {"chunking": "words:0"}, {"threads": 0}])
def test_python_api_refuses_before_any_model_call(tmp_path, monkeypatch, values):
    def no_model(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(pipeline, "make_reader", no_model)
    monkeypatch.setattr(pipeline, "make_embedder", no_model)
    doc = tmp_path / "doc.txt"
    doc.write_text("Some text.")
    with pytest.raises(OptionError):
        lcrag.ask(doc, "q", strategy="lc", **values)
    with pytest.raises(OptionError, match="max_tokens must be ≥ 1, got 0"):
        pipeline.Pipeline(Settings(cache=False)).ask(doc, "q", max_tokens=0)


@pytest.mark.parametrize(
    "values, message",
    [
        ({"budgets": (512, 0)}, "budget must be ≥ 1, got 0"),
        ({"ks": (0,)}, "k must be ≥ 1, got 0"),
        ({"ks": (), "budgets": ()}, "k needs at least one value"),
        ({"limit": 0}, "limit must be ≥ 1, got 0"),
        ({"concurrency": 0}, "concurrency must be ≥ 1, got 0"),
        ({"concurrency": -1}, "concurrency must be ≥ 1, got -1"),
    ],
)
def test_eval_options_refuse_values_outside_their_range(values, message):
    with pytest.raises(OptionError, match=message):
        EvalOptions(**values)


def test_eval_runner_checks_its_options_too(tmp_path):
    from lcrag.evaluation.datasets import EvalItem
    from lcrag.evaluation.runner import EvalRunner, RunConfig

    item = EvalItem(id="1", question="q", answers=["a"], context="c", dataset="d")
    with pytest.raises(OptionError, match="concurrency must be ≥ 1, got 0"):  # was silently raised to 1
        EvalRunner([item], [RunConfig("lc")], tmp_path / "run", concurrency=0)
    with pytest.raises(OptionError, match="budget must be ≥ 1, got 0"):
        EvalRunner([item], [RunConfig("rag", budget=0)], tmp_path / "run")
    assert not (tmp_path / "run").exists()  # refused before the run directory is made


@pytest.mark.parametrize("field, value, message", [
    ("llm", "bogus", "unknown reader 'bogus'"),
    ("llm", "/nowhere/model.gguf", "does not exist"),
    ("summary_llm", "openai:", "needs a model name"),
    ("embedder", "bogus", "unknown embedder 'bogus'"),
    ("base_url", "http://[::1", "bad base URL"),
    ("base_url", "localhost:8000", "bad base URL"),
    ("tokenizer", "/nowhere/tokenizer.json", "does not exist"),
])
def test_names_are_checked_before_anything_loads(field, value, message):
    with pytest.raises(InputError, match=re.escape(message)):
        Settings(**{field: value})
