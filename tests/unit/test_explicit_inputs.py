"""What a part reads it is given (issue 45, item 6): the largest file read whole reaches the loaders in their
ParseLimits and a dataset's reader as ``max_bytes``, from ``lcrag --max-file-mb`` through the command's context, never
through an environment variable; the parse limits are an argument of the loaders, not context state."""

from __future__ import annotations

import os
import sys

import pytest

from lcrag.documents import load_document, load_documents
from lcrag.documents.limits import ParseLimits, TextBudget
from lcrag.core.errors import DatasetError, InputError
from lcrag.evaluation.datasets import load_dataset

pytestmark = pytest.mark.unit

ENV = "LCRAG_MAX_FILE_MB"


@pytest.fixture
def big_text(tmp_path):
    path = tmp_path / "big.txt"
    path.write_text("word " * 300_000)  # 1.4 MB
    return path


def test_the_file_limit_reaches_the_loader_in_its_parse_limits_and_the_environment_is_not_read(big_text, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(InputError, match=r"big\.txt is 1\.4 MB, over the 1 MB limit"):
        load_documents(big_text, ParseLimits(file_mb=1))
    # the environment says otherwise either way: what the loader was given decides
    monkeypatch.setenv(ENV, "10000")
    with pytest.raises(InputError, match="over the 1 MB limit"):
        load_document(big_text, ParseLimits(file_mb=1))
    monkeypatch.setenv(ENV, "1")
    assert load_document(big_text).text.startswith("word")  # the defaults: 512 MB


def test_a_directorys_files_are_each_read_within_the_limits_given(big_text, monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    (big_text.parent / "small.txt").write_text("A small note.")
    with pytest.raises(InputError, match="over the 1 MB limit"):
        load_documents(big_text, ParseLimits(file_mb=1))
    assert [d.id for d in load_documents(big_text.parent, ParseLimits(file_mb=1))] == ["small"]  # big skipped
    with pytest.raises(InputError, match="over the 5 limit for one document"):
        load_documents(big_text.parent / "small.txt", ParseLimits(chars=5))


def test_a_text_budget_counts_against_the_limits_it_is_given(tmp_path):
    path = tmp_path / "a.txt"
    path.write_text("x")
    budget = TextBudget(path, ParseLimits(chars=10))
    budget.add(10)
    with pytest.raises(InputError, match="11 characters of text, over the 10 limit"):
        budget.add(1)


def test_a_datasets_limit_is_its_max_bytes(tmp_path, monkeypatch):
    monkeypatch.setenv(ENV, "10000")
    path = tmp_path / "big.jsonl"
    path.write_text('{"question": "Q?", "answers": ["a"], "context": "' + "x" * 2_000_000 + '"}\n')
    with pytest.raises(DatasetError, match="over the 1 MB limit"):
        load_dataset(path, max_bytes=1 << 20)
    assert len(load_dataset(path).items) == 1


def test_max_file_mb_reaches_the_command_without_the_environment(tmp_path, monkeypatch, capsys):
    from lcrag.cli import main

    monkeypatch.delenv(ENV, raising=False)
    document = tmp_path / "doc.txt"
    document.write_text("Some text. " * 50)
    monkeypatch.setattr(sys, "argv", ["lcrag", "--max-file-mb", "0.00001", "ask", str(document), "q"])
    with pytest.raises(SystemExit) as exit_:
        main()
    assert exit_.value.code == 2
    assert "over the 10 bytes limit (raise it with --max-file-mb)" in capsys.readouterr().err
    assert ENV not in os.environ  # handed to the command, not left in the process's environment


def test_a_folder_of_predictions_is_read_by_the_dataset_format_that_declares_its_layout(tmp_path, monkeypatch):
    """The replay reader knows no dataset's folder layout: a folder is handed to the format declaring
    ``predictions`` (LaRA's, in lcrag.evaluation.datasets.lara_predictions)."""
    from types import SimpleNamespace

    from lcrag.evaluation.datasets.lara_predictions import PredictionFolder
    from lcrag.readers import replay
    from lcrag.readers.recordings import Recording
    from lcrag.core.registry import DATASET_FORMATS

    folder = tmp_path / "answers"
    folder.mkdir()
    (folder / "all.txt").write_text("one answer")
    document = tmp_path / "doc.txt"
    document.write_text("The text.")

    def read(directory):
        records = iter([(Recording("Q?", document, "lc", "A.", f"{directory}/all.txt:1", "m", None), False)])
        return PredictionFolder("stand-in model", [directory / "all.txt"], records)

    monkeypatch.setattr(DATASET_FORMATS, "parts", lambda: [SimpleNamespace(meta={"predictions": read})])
    recordings = replay.Recordings.load(folder)
    assert recordings.model == "stand-in model" and recordings.find("Q?", "lc", None).prediction == "A."
    monkeypatch.setattr(DATASET_FORMATS, "parts", lambda: [])
    with pytest.raises(InputError, match="no dataset format reads a folder of predictions"):
        replay.Recordings.load(folder)


def test_a_loader_that_cannot_be_given_its_limits_is_refused_when_it_registers():
    from lcrag.core.errors import OptionError
    from lcrag.core.registry import LOADERS

    with pytest.raises(OptionError, match=r"does not follow the loader contract: it must take \(path, limits\)"):
        @LOADERS.register("path-only", help="a loader of the old form", suffixes=(".old",))
        def load_path_only(path):
            return []
    assert "path-only" not in LOADERS.names()
