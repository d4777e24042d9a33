"""`lcrag eval --router lara` (issue 33): a router shipped with lcrag works by name in an eval as in `lcrag ask`; the
run's identity hashes the shipped file (it was `FileNotFoundError: 'lara'`)."""

from __future__ import annotations

import hashlib
import json
from importlib.resources import files

import pytest

from lcrag.core.errors import RunDirectoryError
from lcrag.evaluation.datasets import EvalItem
from lcrag.evaluation.runner import EvalRunner, expand_configs
from lcrag.pipeline.pipeline import Settings
from tests.conftest import ScriptedReader

pytestmark = pytest.mark.unit

ITEMS = [EvalItem(id=f"d/q{i}", dataset="d", question=f"What is the code for vault {i}?", answers=[f"K{i}"],
                  context=f"Some text. The code for vault {i} is K{i}. More text. " * 5) for i in range(3)]
LARA = hashlib.sha256(files("lcrag.strategies.routing").joinpath("routers", "lara.json").read_bytes()).hexdigest()


def run(out, router):
    return EvalRunner(ITEMS, expand_configs(["self-route"], ["bm25"], [1], []), out,
                      Settings(chunking="words:10", router=router), reader=ScriptedReader(lambda m: "K1")).run()


def test_a_shipped_router_runs_by_name_and_is_recorded_by_its_file(tmp_path):
    rows = run(tmp_path / "run", "lara")
    assert len(rows) == 3 and all(r["route"] in ("rag", "lc") for r in rows)
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert manifest["router_sha256"] == LARA
    assert len(run(tmp_path / "run", "lara")) == 3  # the same identity: it resumes


def test_a_router_file_is_hashed_as_before_and_is_another_run_than_the_shipped_one(tmp_path):
    copy = tmp_path / "router.json"
    copy.write_text(files("lcrag.strategies.routing").joinpath("routers", "lara.json").read_text(encoding="utf-8")
                    .replace('"format"', ' "format"', 1))  # the same router, another file
    run(tmp_path / "file", str(copy))
    manifest = json.loads((tmp_path / "file" / "manifest.json").read_text())
    assert manifest["router_sha256"] == hashlib.sha256(copy.read_bytes()).hexdigest() != LARA
    with pytest.raises(RunDirectoryError, match="router_sha256 differ"):
        run(tmp_path / "file", "lara")


def test_a_folder_called_lara_beside_the_run_does_not_hide_the_shipped_router(tmp_path, monkeypatch):
    """Issue 44: a bare name is the shipped router's, whatever the working directory holds."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lara").mkdir()
    assert len(run(tmp_path / "run", "lara")) == 3
    assert json.loads((tmp_path / "run" / "manifest.json").read_text())["router_sha256"] == LARA


def test_an_evals_share_ledger_is_kept_in_its_run_directory(tmp_path):
    """The README's place for it (issue 44): RUN/cache/routing-shares/, whatever cache directory the settings name:
    it belongs to the run, so a resumed run continues its own ledger."""
    out = tmp_path / "run"
    EvalRunner(ITEMS, expand_configs(["self-route"], ["bm25"], [1], []), out,
               Settings(chunking="words:10", router="lara", cache_dir=tmp_path / "machine-cache"),
               reader=ScriptedReader(lambda m: "K1")).run()
    ledgers = list((out / "cache" / "routing-shares").glob("*.json"))
    assert len(ledgers) == 1 and json.loads(ledgers[0].read_text())["questions"] == 3
    assert not (tmp_path / "machine-cache" / "routing-shares").exists()
