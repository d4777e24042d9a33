"""The package layout follows the pipeline: a stage imports only from itself, earlier stages and shared modules.

Stages, in order: documents -> chunking -> retrieval -> assembly -> readers -> strategies -> pipeline (``pipeline``
and ``config``, which put the stages together) -> evaluation (which runs pipelines) -> service (which serves them). Every import counts, including
those inside functions and under ``TYPE_CHECKING``: a lazy upward import is still an upward dependency. Shared
top-level modules are allowed anywhere but may import no stage themselves (else a stage could reach a later one
through them). ``lcrag`` itself, ``synthetic`` and the ``cli*`` modules sit on top and may import anything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SRC = Path(__file__).resolve().parents[2] / "src" / "lcrag"
STAGES = ("documents", "chunking", "retrieval", "assembly", "readers", "strategies", "pipeline", "evaluation",
          "service")
PIPELINE = ("pipeline", "config")
ON_TOP = ("__init__", "synthetic")
# Imports that cross the order on purpose, each with its reason. Keep it short.
_SUMMARIES = "tree and RAPTOR retrievers write their summaries with a reader: they take the reader interface"
ALLOWED: dict[tuple[str, str], str] = {
    ("lcrag.retrieval.index", "lcrag.readers.base"): _SUMMARIES,
    ("lcrag.retrieval.summaries", "lcrag.readers.base"): _SUMMARIES,
    ("lcrag.retrieval.tree_index", "lcrag.readers.base"): _SUMMARIES,
    ("lcrag.retrieval.summaries", "lcrag.assembly.truncation"): _SUMMARIES + ", and cut a too long text to its window",
    ("lcrag.retrieval.embedders", "lcrag.readers"): "an unknown embedder spec is shown redacted by the readers' "
    "redact_spec (lcrag.redaction.redact_spec redacts fewer forms)",
    **dict.fromkeys([("lcrag.readers.replay", "lcrag.evaluation.datasets.recordings"),
                     ("lcrag.readers.replay", "lcrag.evaluation.datasets.records")],
                    "the replay reader answers from recordings, which are also a dataset format: one parser, and the "
                    "dataset files' strict reading (imported when a replay reader is made)"),
}


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> list[tuple[int, str]]:
    """(line, imported module) of every import in the file, relative ones resolved."""
    package = _module_name(path).split(".") if path.name == "__init__.py" else _module_name(path).split(".")[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package[: len(package) - node.level + 1]) if node.level else ""
            module = ".".join(filter(None, [base, node.module or ""]))
            names = [f"{module}.{alias.name}" for alias in node.names] if module == "lcrag" else [module]
            found += [(node.lineno, name) for name in names]
    return found


def _place(module: str) -> str | None:
    """The stage of an ``lcrag`` module, ``"shared"`` for a shared top-level module, None outside lcrag."""
    parts = module.split(".")
    if parts[0] != "lcrag" or len(parts) == 1:
        return None
    if parts[1] in STAGES:
        return parts[1]
    if parts[1] in PIPELINE:
        return "pipeline"
    return "on top" if parts[1] in ON_TOP or parts[1].startswith("cli") else "shared"


def _allowed(importer: str, target: str | None) -> bool:
    if target in (None, "shared"):
        return True
    if target == "on top" or importer == "shared":  # shared modules sit below every stage
        return False
    return STAGES.index(target) <= STAGES.index(importer)


def layout_violations() -> list[str]:
    problems = []
    for path in sorted(SRC.rglob("*.py")):
        importer = _module_name(path)
        where = "on top" if importer == "lcrag" else _place(importer)
        if where == "on top":
            continue
        for line, imported in _imports(path):
            target = _place(imported)
            if not _allowed(where, target) and (importer, imported) not in ALLOWED:
                problems.append(f"{path.relative_to(SRC.parent)}:{line}: {where} module imports {imported} ({target})")
    return problems


def test_no_stage_imports_a_later_stage():
    assert layout_violations() == []


def test_the_checker_sees_an_upward_import(tmp_path, monkeypatch):
    stage = tmp_path / "lcrag" / "strategies"
    stage.mkdir(parents=True)
    (stage / "bad.py").write_text("def f():\n    from lcrag.evaluation.metrics import normalize_answer\n")
    monkeypatch.setattr(__import__(__name__, fromlist=["SRC"]), "SRC", tmp_path / "lcrag")
    assert layout_violations() == ["lcrag/strategies/bad.py:2: strategies module imports "
                                   "lcrag.evaluation.metrics (evaluation)"]
