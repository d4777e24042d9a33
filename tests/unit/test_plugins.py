"""Plugins: third-party parts come from entry points, are listed without being imported, are imported only when used,
and one that fails to load is reported in one line naming it while lcrag keeps working.

Most tests use the example plugin in tests/plugins/lcrag-example-plugin (a ``keyword-overlap`` retriever, a
``first-chunk`` strategy and a ``broken`` metric whose module raises ImportError). The README's test command installs
it with ``pip install --target .venv/lcrag-plugins``: a real installation, visible only to the tests here (they put
that directory on the path), so that the other tests keep seeing the built-in parts alone. The last tests give a fresh
registry entry points of their own."""

import logging
import sys
from importlib.metadata import EntryPoint

import pytest
from plugin_fixtures import TEXT, example_plugin_installed  # noqa: F401 - example_plugin_installed: a fixture

import lcrag
from lcrag import Settings
from lcrag.pipeline import pipeline
from lcrag.core.errors import OptionError
from lcrag.core.registry import RETRIEVERS, Registry


@pytest.mark.usefixtures("example_plugin_installed")
def test_the_plugin_retriever_answers_through_lcrag_ask(tmp_path, monkeypatch, scripted_reader):
    reader = scripted_reader(lambda messages: "here")
    monkeypatch.setattr(pipeline, "make_reader", lambda *args, **kwargs: reader)
    document = tmp_path / "doc.txt"
    document.write_text(TEXT)
    answer = lcrag.ask(document, "Where is the end?", strategy="rag", retriever="keyword-overlap", k=1,
                       chunking="words:5", cache=False, cache_dir=tmp_path / "cache")
    assert answer.text == "here" and answer.route == "rag"
    assert [c.index for c in answer.chunks] == [3]  # the only chunk holding "the", "end", "is"
    assert "omega the end is here." in reader.calls[0][-1]["content"]
    assert RETRIEVERS.get("keyword-overlap").factory.__module__ == "lcrag_example_plugin.retriever"


@pytest.mark.usefixtures("example_plugin_installed")
def test_the_plugin_strategy_answers_from_the_first_chunk(tmp_path, scripted_reader):
    reader = scripted_reader(lambda messages: "alpha")
    document = tmp_path / "doc.txt"
    document.write_text(TEXT)
    pipe = lcrag.Pipeline(Settings(strategy="first-chunk", chunking="words:5", cache=False, cache_dir=tmp_path / "c"),
                          reader=reader)
    try:
        answer = pipe.ask(document, "Where is the end?")
    finally:
        pipe.close()
    assert (answer.strategy, answer.route, [c.index for c in answer.chunks]) == ("first-chunk", "first-chunk", [0])
    assert "alpha one two three four." in reader.calls[0][-1]["content"]
    assert "omega" not in reader.calls[0][-1]["content"]


# -- the mechanism, on a registry of its own (no installed package needed) -------------------------------------------
@pytest.fixture
def things(tmp_path, monkeypatch):
    """A registry whose entry points are three temporary modules: one registers its part, one raises, one registers
    nothing under its entry point's name."""
    modules = {
        "lcrag_test_plugin_good": "from lcrag_test_plugin_registry import THINGS\n"
                                  "@THINGS.register('good', help='a good thing')\ndef good():\n    return 'good'\n",
        "lcrag_test_plugin_bad": "raise RuntimeError('no GPU here\\nsecond line')\n",
        "lcrag_test_plugin_other": "from lcrag_test_plugin_registry import THINGS\n"
                                   "@THINGS.register('other-name', help='?')\ndef other():\n    return 'other'\n",
    }
    for module, code in modules.items():
        (tmp_path / f"{module}.py").write_text(code)
    registry = Registry("thing", "lcrag.test-things")
    registry_module = type(sys)("lcrag_test_plugin_registry")
    registry_module.THINGS = registry
    monkeypatch.setitem(sys.modules, "lcrag_test_plugin_registry", registry_module)
    monkeypatch.syspath_prepend(str(tmp_path))
    points = [EntryPoint("good", "lcrag_test_plugin_good", "lcrag.test-things"),
              EntryPoint("bad", "lcrag_test_plugin_bad", "lcrag.test-things"),
              EntryPoint("mislabelled", "lcrag_test_plugin_other", "lcrag.test-things")]
    monkeypatch.setattr(registry, "_entry_points", lambda: points)
    yield registry
    for module in modules:
        sys.modules.pop(module, None)


def test_a_plugin_is_imported_only_when_asked_for(things):
    assert things.names() == ("bad", "good", "mislabelled")
    assert things.describe() == "bad; good; mislabelled"
    assert not {"lcrag_test_plugin_good", "lcrag_test_plugin_bad"} & set(sys.modules)
    assert things.get("good").create() == "good"
    assert "lcrag_test_plugin_good" in sys.modules and "lcrag_test_plugin_bad" not in sys.modules


def test_failing_plugins_are_reported_once_in_one_line_and_forgotten(things, caplog):
    with caplog.at_level(logging.WARNING, logger="lcrag"):
        for _ in range(2):
            for name in ("bad", "mislabelled"):
                with pytest.raises(OptionError, match=f"unknown thing '{name}'; choose one of "):
                    things.get(name)
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        "plugin bad (lcrag.test-things = lcrag_test_plugin_bad) failed to load: RuntimeError: no GPU here second line",
        "plugin mislabelled (lcrag.test-things = lcrag_test_plugin_other) failed to load: it registered no thing "
        "named 'mislabelled'",
    ]
    assert things.names() == ("other-name", "good")  # what it did register is usable
