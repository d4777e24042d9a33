"""Plugins: third-party parts come from entry points, are listed without being imported, are imported only when used,
and one that fails to load is reported in one line naming it while lcrag keeps working.

Most tests use the example plugin in tests/plugins/lcrag-example-plugin (a ``keyword-overlap`` retriever, a
``first-chunk`` strategy and a ``broken`` metric whose module raises ImportError). The README's test command installs
it with ``pip install --target .venv/lcrag-plugins``: a real installation, visible only to the tests here (they put
that directory on the path), so that the other tests keep seeing the built-in parts alone. (The mechanism on a
registry of its own, and the plugin's parts answering in this process: tests/unit/test_plugins.py.)"""

import json
import os
import subprocess
import sys

import pytest
from plugin_fixtures import SITE, TEXT, example_plugin_installed  # noqa: F401 - example_plugin_installed: a fixture

from lcrag.pipeline import pipeline
from lcrag.cli import main


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
