"""Plugins: third-party parts come from entry points, are listed without being imported, are imported only when used,
and one that fails to load is reported in one line naming it while lcrag keeps working.

Most tests use the example plugin in tests/plugins/lcrag-example-plugin (a ``keyword-overlap`` retriever, a
``first-chunk`` strategy and a ``broken`` metric whose module raises ImportError). The README's test command installs
it with ``pip install --target .venv/lcrag-plugins``: a real installation, visible only to the tests here (they put
that directory on the path), so that the other tests keep seeing the built-in parts alone. The last tests give a fresh
registry entry points of their own."""

import importlib
import json
import os
import subprocess
import sys
from importlib import metadata
from importlib.metadata import EntryPoint
from pathlib import Path

import pytest

import lcrag
from lcrag.pipeline import pipeline
from lcrag.cli import main
from lcrag.core.errors import OptionError
from lcrag.core.registry import METRICS, RETRIEVERS, STRATEGIES, Registry, installed_entry_points

PLUGIN = "lcrag-example-plugin"
TEXT = "alpha one two three four. beta five six seven eight. gamma nine ten eleven twelve. omega the end is here."


SITE = Path(sys.prefix) / "lcrag-plugins"  # where the README's test command installs the example plugin
INSTALL = f"pip install --upgrade --target {SITE} ./tests/plugins/{PLUGIN}"


@pytest.fixture(scope="module")
def example_plugin_installed():
    """The example plugin's installation on the path (and its entry points seen) for these tests only."""
    sys.path.insert(0, str(SITE))
    importlib.invalidate_caches()
    installed_entry_points.cache_clear()
    try:
        try:
            metadata.distribution(PLUGIN)
            installed = True
        except metadata.PackageNotFoundError:
            installed = False
        if not installed:
            pytest.fail(f"the example plugin is not installed in {SITE}: {INSTALL} (the README's test command does it)",
                        pytrace=False)
        yield
    finally:
        sys.path.remove(str(SITE))
        installed_entry_points.cache_clear()
        RETRIEVERS.remove("keyword-overlap")
        STRATEGIES.remove("first-chunk")
        METRICS._failed.discard("broken")
        for module in [m for m in sys.modules if m.startswith("lcrag_example_plugin")]:
            del sys.modules[module]


def python(*args: str, code: str | None = None) -> subprocess.CompletedProcess:
    """``python -c code`` (or ``python ARGS``) in a fresh interpreter with the example plugin on its path: no plugin
    imported yet, no plugin failure remembered."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")])),
           "COLUMNS": "400", "NO_COLOR": "1"}
    command = [sys.executable, "-c", code] if code is not None else [sys.executable, *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=120, env=env)


@pytest.mark.usefixtures("example_plugin_installed")
def test_plugins_are_listed_without_being_imported():
    done = python(code="import json, sys\n"
                  "from lcrag.core.registry import RETRIEVERS, STRATEGIES\n"
                  "names = RETRIEVERS.names() + STRATEGIES.names() + (RETRIEVERS.describe(), STRATEGIES.describe())\n"
                  "print(json.dumps([names, sorted(m for m in sys.modules if m.startswith('lcrag_example_plugin'))]))")
    names, imported = json.loads(done.stdout)
    assert {"keyword-overlap", "first-chunk"} <= set(names) and imported == []
    assert "keyword-overlap: plugin from lcrag-example-plugin" in names[-2]  # --help names it, from its package
    assert done.stderr == ""


@pytest.mark.usefixtures("example_plugin_installed")
def test_ask_help_lists_the_plugin_parts():
    done = python("-m", "lcrag.cli", "ask", "--help")
    assert done.returncode == 0, done.stderr
    assert "keyword-overlap" in done.stdout and "first-chunk" in done.stdout


@pytest.mark.usefixtures("example_plugin_installed")
def test_lcrag_eval_runs_the_plugin_strategy_and_retriever(tmp_path, monkeypatch, scripted_reader, capsys):
    monkeypatch.setattr(pipeline, "make_reader", lambda *args, **kwargs: scripted_reader(lambda messages: "omega"))
    dataset = tmp_path / "data.jsonl"
    dataset.write_text(json.dumps({"question": "What is at the end?", "answers": ["omega"], "context": TEXT}) + "\n")
    out = tmp_path / "run"
    monkeypatch.setattr(sys, "argv", ["lcrag", "eval", "--dataset", str(dataset), "--out", str(out), "--strategies",
                                      "first-chunk,rag", "--retriever", "keyword-overlap", "-k", "1",
                                      "--chunking", "words:5"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code in (0, None), capsys.readouterr().err
    rows = [json.loads(line) for line in (out / "rows.jsonl").read_text().splitlines()]
    assert sorted(row["strategy"] for row in rows) == ["first-chunk", "rag"]
    assert all(row["retriever"] == "keyword-overlap" for row in rows if row["strategy"] == "rag")


@pytest.mark.usefixtures("example_plugin_installed")
def test_a_broken_plugin_is_one_warning_line_naming_it_and_lcrag_keeps_working():
    done = python(code="from lcrag.core.errors import OptionError\n"
                  "from lcrag.core.registry import METRICS, RETRIEVERS\n"
                  "assert 'broken' in METRICS.names()  # listed: not imported yet\n"
                  "for _ in range(3):\n"
                  "    try:\n"
                  "        METRICS.get('broken')\n"
                  "    except OptionError as exc:\n"
                  "        print(exc)\n"
                  "assert 'broken' not in METRICS and 'broken' not in METRICS.names()\n"
                  "assert 'qa_f1' in [part.name for part in METRICS.parts()]\n"
                  "assert RETRIEVERS.get('keyword-overlap').name == 'keyword-overlap'\n")
    assert done.returncode == 0, done.stderr
    warnings = done.stderr.splitlines()
    assert len(warnings) == 1, done.stderr
    assert "plugin broken from lcrag-example-plugin (lcrag.metrics = lcrag_example_plugin.broken) failed to load: " \
           "ImportError: lcrag_example_plugin.broken needs the package 'not-installed-anywhere'" in warnings[0]
    assert done.stdout.splitlines()[0].startswith("unknown metric 'broken'; choose one of qa_f1")


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
