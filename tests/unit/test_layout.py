"""The import contract (README "Layout"): lcrag's layers import only downward and no modules import each other in a
circle, at any depth. The contracts are declared once, in pyproject.toml's ``[tool.importlinter]``, and checked by
import-linter over grimp's import graph (every import counts: lazy ones and those under TYPE_CHECKING too)."""

from __future__ import annotations

import logging
import textwrap
from pathlib import Path

import pytest
from importlinter.cli import lint_imports as run_import_linter

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def lint_imports(config: Path, capsys) -> tuple[int, str]:
    """import-linter in this process (its graph is grimp's, built in this process too): exit code and report."""
    loggers = [logging.getLogger(name) for name in logging.root.manager.loggerDict]
    enabled = [logger for logger in loggers if isinstance(logger, logging.Logger) and not logger.disabled]
    capsys.readouterr()
    try:
        code = run_import_linter(config_filename=str(config), no_cache=True)
    finally:
        for logger in enabled:  # its logging set-up disables every logger there was (lcrag's warnings included)
            logger.disabled = False
    return code, capsys.readouterr().out


def test_lcrag_keeps_its_layers_and_has_no_import_circles(capsys):
    code, report = lint_imports(ROOT / "pyproject.toml", capsys)
    assert code == 0, report[-3000:]
    assert "3 kept, 0 broken" in report


def test_the_contracts_see_an_upward_import_and_a_circle(tmp_path, monkeypatch, capsys):
    package = tmp_path / "src" / "shop"
    (package / "stages").mkdir(parents=True)
    files = {
        "__init__.py": "", "stages/__init__.py": "",
        "stages/low.py": "def f():\n    from shop.stages import high  # lazy, still an upward import\n",
        "stages/high.py": "from shop.stages import low\n",
        "a.py": "from shop import b\n", "b.py": "import typing\nif typing.TYPE_CHECKING:\n    from shop import a\n",
    }
    for name, text in files.items():
        (package / name).write_text(text)
    config = tmp_path / "pyproject.toml"
    config.write_text(textwrap.dedent("""\
        [tool.importlinter]
        root_package = "shop"
        [[tool.importlinter.contracts]]
        name = "layers"
        type = "layers"
        containers = ["shop.stages"]
        layers = ["high", "low"]
        [[tool.importlinter.contracts]]
        name = "no circles"
        type = "acyclic_siblings"
        ancestors = ["shop"]
    """))
    monkeypatch.syspath_prepend(tmp_path / "src")
    code, report = lint_imports(config, capsys)
    assert code == 1 and "0 kept, 2 broken" in report, report
    assert "shop.stages.low -> shop.stages.high" in report
