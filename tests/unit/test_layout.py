"""The import contract (README "Layout"): lcrag's layers import only downward and no modules import each other in a
circle, at any depth. The contracts are declared once, in pyproject.toml's ``[tool.importlinter]``, and checked by
import-linter over grimp's import graph (every import counts: lazy ones and those under TYPE_CHECKING too)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]


def lint_imports(config: Path, cwd: Path, pythonpath: Path) -> subprocess.CompletedProcess:
    lint = str(Path(sys.executable).with_name("lint-imports"))
    return subprocess.run([lint, "--config", str(config), "--no-cache"], cwd=cwd, capture_output=True, text=True,
                          timeout=300, env={"PYTHONPATH": str(pythonpath), "PATH": "/usr/bin:/bin"})


def test_lcrag_keeps_its_layers_and_has_no_import_circles():
    result = lint_imports(ROOT / "pyproject.toml", ROOT, ROOT / "src")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert "2 kept, 0 broken" in result.stdout


def test_the_contracts_see_an_upward_import_and_a_circle(tmp_path):
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
    result = lint_imports(config, tmp_path, tmp_path / "src")
    assert result.returncode == 1 and "0 kept, 2 broken" in result.stdout, result.stdout
    assert "shop.stages.low -> shop.stages.high" in result.stdout
