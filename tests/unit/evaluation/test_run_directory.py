"""Run directories are user data: a torn last line is repaired, any other damage is refused with file:line and left
as it is, a run from other settings is refused naming the keys, and one process at a time holds a run."""

import json
import sqlite3
from dataclasses import replace

import pytest
from eval_runs import ITEMS, run

from lcrag.core.errors import RunDirectoryError
from lcrag.evaluation.runner import EvalRunner, expand_configs
from lcrag.pipeline.pipeline import Settings
from lcrag.strategies import PromptSet
from tests.conftest import ScriptedReader


def snapshot(out):
    return {p.name: p.read_bytes() for p in out.iterdir() if p.is_file() and p.name in ("rows.jsonl", "manifest.json")}


# -- defect 5: --out naming a file ----------------------------------------------------------------------------------


# -- defect 11: damaged run directories -----------------------------------------------------------------------------
def test_torn_last_line_is_cut_off_and_its_row_answered_again(tmp_path):
    reader = ScriptedReader()
    run(tmp_path, reader)
    rows_file = tmp_path / "rows.jsonl"
    lines = rows_file.read_text().splitlines(keepends=True)
    rows_file.write_text("".join(lines[:2]) + lines[2][:40])  # killed while writing the third row
    again = run(tmp_path, reader)
    assert len(again) == 3 and rows_file.read_text().count("\n") == 3
    assert rows_file.read_text().startswith("".join(lines[:2]))  # complete rows untouched
    assert len(reader.calls) == 3  # the torn row came from the run's cache, not a new call


def test_whole_last_row_without_its_newline_is_kept(tmp_path):
    run(tmp_path)
    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_bytes(rows_file.read_bytes()[:-1])
    assert len(run(tmp_path)) == 3
    assert rows_file.read_text().count("\n") == 3 and rows_file.read_text().endswith("}\n")


@pytest.mark.parametrize("damage, where", [
    (lambda lines: lines[:1] + ['{"item_id": "d/q1", "conf\n'] + lines[2:], "rows.jsonl:2"),
    (lambda lines: lines[:1] + ['[1, 2]\n'] + lines[2:], "rows.jsonl:2"),
    (lambda lines: lines[:1] + ['\xff\n'] + lines[2:], "rows.jsonl:2"),
    (lambda lines: lines + [lines[0]], "rows.jsonl:4"),  # the same row twice
    (lambda lines: lines[:2] + ["not json\n"], "rows.jsonl:3"),  # a whole last line that is not a row
])
def test_damaged_rows_are_refused_with_file_line_and_left_alone(tmp_path, damage, where):
    run(tmp_path)
    rows_file = tmp_path / "rows.jsonl"
    rows_file.write_text("".join(damage(rows_file.read_text().splitlines(keepends=True))))
    before = snapshot(tmp_path)
    with pytest.raises(RunDirectoryError, match=f"{where}: .*fix or delete line") as err:
        run(tmp_path)
    assert str(tmp_path) in str(err.value)
    assert snapshot(tmp_path) == before


def test_damaged_manifest_is_refused_and_left_alone(tmp_path):
    run(tmp_path)
    manifest = tmp_path / "manifest.json"
    manifest.write_text(manifest.read_text()[:-30])
    before = snapshot(tmp_path)
    with pytest.raises(RunDirectoryError, match=r"manifest.json:\d+: not valid JSON"):
        run(tmp_path)
    assert snapshot(tmp_path) == before


def test_rows_without_a_manifest_are_refused(tmp_path):
    run(tmp_path)
    (tmp_path / "manifest.json").unlink()
    with pytest.raises(RunDirectoryError, match="manifest.json is missing"):
        run(tmp_path)
    assert not (tmp_path / "manifest.json").exists()


def test_damaged_run_cache_is_refused_and_left_alone(tmp_path):
    run(tmp_path)
    cache = tmp_path / "cache" / "completions.sqlite"
    damaged = b"this is not an SQLite file" + cache.read_bytes()[26:]
    cache.write_bytes(damaged)
    with pytest.raises(RunDirectoryError, match="completions.sqlite"):
        run(tmp_path)
    assert cache.read_bytes() == damaged


def _set_first_value(cache, value):
    db = sqlite3.connect(cache)
    db.execute("UPDATE completions SET value = ? WHERE rowid = (SELECT MIN(rowid) FROM completions)", (value,))
    db.commit()
    db.close()


@pytest.mark.parametrize("damage", ["truncated", "not json", "wrong fields"])
def test_damaged_run_cache_entries_are_refused_and_left_alone(tmp_path, damage):
    run(tmp_path)
    (tmp_path / "rows.jsonl").write_text("")  # the rows must be answered again, from the cache
    cache = tmp_path / "cache" / "completions.sqlite"
    if damage == "truncated":
        cache.write_bytes(cache.read_bytes()[: cache.stat().st_size // 2])
    else:
        _set_first_value(cache, "{not json" if damage == "not json" else json.dumps({"answer": 1}))
    damaged = cache.read_bytes()
    with pytest.raises(RunDirectoryError, match="completions.sqlite: .*left as it is"):
        run(tmp_path)
    assert cache.read_bytes() == damaged


# -- defect 19: the run's identity ----------------------------------------------------------------------------------
CHANGES = {
    "chunking": lambda s: replace(s, chunking="words:30"),
    "max_tokens": lambda s: replace(s, max_tokens=32),
    "prompts_sha256": lambda s: replace(s, prompts=replace(PromptSet(), closed_book="Q: {question}")),
    "order": lambda s: replace(s, order="document"),
    "tokenizer": lambda s: replace(s, tokenizer=__file__),  # any existing file: the scripted reader never loads it
    # Declared per-question settings no hand-written key records: in the identity by their declaration alone.
    "condense": lambda s: replace(s, condense="join"),
    "history_turns": lambda s: replace(s, history_turns=2),
}


@pytest.mark.parametrize("key", sorted(CHANGES))
def test_resume_with_another_setting_is_refused_naming_it(tmp_path, key):
    settings = Settings(chunking="words:20")
    run(tmp_path, settings=settings, configs=("rag",))
    before = snapshot(tmp_path)
    with pytest.raises(RunDirectoryError, match=rf"holds a different run \({key} differ\)"):
        run(tmp_path, settings=CHANGES[key](settings), configs=("rag",))
    assert snapshot(tmp_path) == before  # the manifest still records the settings of its rows


def test_resume_at_the_default_of_a_setting_the_run_set_is_refused_naming_it(tmp_path):
    settings = Settings(chunking="words:20")
    run(tmp_path, settings=replace(settings, condense="join"), configs=("rag",))
    with pytest.raises(RunDirectoryError, match=r"holds a different run \(condense differ\)"):
        run(tmp_path, settings=settings, configs=("rag",))


def test_resume_with_another_context_window_or_reader_is_refused(tmp_path):
    run(tmp_path, ScriptedReader(context_window=4096))
    with pytest.raises(RunDirectoryError, match=r"\(context_window differ\): context_window: 4096 -> 2048;"):
        run(tmp_path, ScriptedReader(context_window=2048))
    other = ScriptedReader(context_window=4096)
    other.model = "another"
    with pytest.raises(RunDirectoryError, match=r"\(reader differ\)"):
        run(tmp_path, other)


def test_resume_with_another_embedder_is_refused_before_it_loads(tmp_path, monkeypatch):
    # The identity check comes before the embedder and indexes load, so no model is needed to see the refusal.
    loaded = []
    monkeypatch.setattr(EvalRunner, "_check_options", lambda self, configs: loaded.append(1))  # the step after
    monkeypatch.setattr(EvalRunner, "_run", lambda self, pipeline, closed_book, progress: [])
    settings = Settings(embedder="minilm")
    EvalRunner(ITEMS, expand_configs(["rag"], ["dense"], [1], []), tmp_path / "dense", settings,
               reader=ScriptedReader()).run()
    with pytest.raises(RunDirectoryError, match=r"\(embedder differ\)"):
        EvalRunner(ITEMS, expand_configs(["rag"], ["dense"], [1], []), tmp_path / "dense",
                   replace(settings, embedder="st:other-embedder"), reader=ScriptedReader()).run()
    assert len(loaded) == 1  # the refused run never reached the embedder
    assert json.loads((tmp_path / "dense" / "manifest.json").read_text())["embedder"] == "minilm"


def test_manifest_redacts_urls_and_never_stores_the_api_key(tmp_path):
    settings = Settings(llm="openai:m@http://user:hunter2@host:8080/v1", base_url="http://u:hunter2@host/v1",
                        api_key="sk-topsecret")
    run(tmp_path, settings=settings)
    text = (tmp_path / "manifest.json").read_text()
    assert "hunter2" not in text and "sk-topsecret" not in text
    assert json.loads(text)["llm"] == "openai:m@http://***@host:8080/v1"


def test_a_larger_question_list_extends_the_run(tmp_path):
    run(tmp_path, items=ITEMS[:2])
    assert len(run(tmp_path)) == 3
    assert json.loads((tmp_path / "manifest.json").read_text())["items"] == 3


# -- defect 13: one process per run directory -----------------------------------------------------------------------
