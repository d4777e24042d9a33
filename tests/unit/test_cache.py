from lcrag.readers import CachedReader, CompletionCache, GenerationParams


def test_cache_hits_skip_the_reader(tmp_path, scripted_reader):
    inner = scripted_reader(lambda m: f"answer to {m[-1]['content']}")
    reader = CachedReader(inner, CompletionCache(tmp_path / "c.sqlite"))
    q1 = [{"role": "user", "content": "one"}]
    first = reader.complete(q1, GenerationParams())
    second = reader.complete(q1, GenerationParams())
    assert len(inner.calls) == 1
    assert not first.from_cache and second.from_cache
    assert (second.text, second.prompt_tokens) == (first.text, first.prompt_tokens)
    # any change of model, messages or parameters is a miss
    reader.complete([{"role": "user", "content": "two"}], GenerationParams())
    reader.complete(q1, GenerationParams(max_tokens=5))
    assert len(inner.calls) == 3
    assert (reader.hits, reader.misses) == (1, 3)


def test_cache_persists_across_processes(tmp_path, scripted_reader):
    q = [{"role": "user", "content": "persist"}]
    CachedReader(scripted_reader(), CompletionCache(tmp_path / "c.sqlite")).complete(q, GenerationParams())
    inner = scripted_reader()
    again = CachedReader(inner, CompletionCache(tmp_path / "c.sqlite")).complete(q, GenerationParams())
    assert again.from_cache and inner.calls == []


# -- defect 7: a damaged cache is derived data (set aside, rebuilt, one warning); a run's cache is user data ---------
import json  # noqa: E402
import logging  # noqa: E402
import sqlite3  # noqa: E402

import pytest  # noqa: E402

from lcrag.core.errors import RunDirectoryError  # noqa: E402
from lcrag.readers.cache import completion_key  # noqa: E402

QUESTION = [{"role": "user", "content": "what is kept?"}]


def filled_cache(path, entries=300):
    """A real cache file of several pages, closed (its write-ahead log checkpointed away)."""
    cache = CompletionCache(path)
    from lcrag.readers import Completion

    for i in range(entries):
        cache.put(f"key-{i}", Completion("m", 10, 2, text=f"answer {i} " * 10))
    cache.close()
    return path


def overwrite_header(data: bytes) -> bytes:
    return b"this is not sqlite" * 6 + data[108:]


def truncate(data: bytes) -> bytes:
    return data[: len(data) // 2]


def clobber_page(data: bytes) -> bytes:
    return data[:8192] + b"\xff" * 4096 + data[12288:]


@pytest.mark.parametrize("damage", [overwrite_header, truncate, clobber_page])
def test_damaged_cache_file_is_set_aside_and_rebuilt(tmp_path, scripted_reader, caplog, damage):
    path = filled_cache(tmp_path / "completions.sqlite")
    path.write_bytes(damage(path.read_bytes()))
    with caplog.at_level(logging.WARNING, logger="lcrag"):
        inner = scripted_reader(lambda m: "clean answer")
        reader = CachedReader(inner, CompletionCache(path))
        first = reader.complete(QUESTION, GenerationParams())
        again = reader.complete(QUESTION, GenerationParams())
    assert (first.text, again.text, again.from_cache) == ("clean answer", "clean answer", True)
    assert len(inner.calls) == 1
    assert [r.levelno for r in caplog.records] == [logging.WARNING]  # exactly one warning line
    assert "damaged" in caplog.records[0].getMessage()
    assert len(list(tmp_path.glob("completions.sqlite.damaged-*"))) == 1  # kept for inspection, not deleted


def test_cache_table_with_other_columns_is_damage(tmp_path, scripted_reader):
    path = tmp_path / "completions.sqlite"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE completions (k TEXT, v BLOB, extra INT)")
    db.commit()
    db.close()
    reader = CachedReader(scripted_reader(), CompletionCache(path))
    assert reader.complete(QUESTION, GenerationParams()).text == "42"
    assert list(tmp_path.glob("completions.sqlite.damaged-*"))


@pytest.mark.parametrize("bad_value", [
    "not json {", "[1, 2]", json.dumps({"text": "x"}),  # missing fields
    json.dumps({"text": 5, "model": "m", "prompt_tokens": 1, "completion_tokens": 1}),  # wrong type
    json.dumps({"text": "x", "model": "m", "prompt_tokens": -1, "completion_tokens": 1}),  # impossible count
])
def test_damaged_row_is_a_miss_and_is_replaced(tmp_path, scripted_reader, bad_value):
    path = tmp_path / "completions.sqlite"
    inner = scripted_reader(lambda m: "fresh")
    reader = CachedReader(inner, CompletionCache(path))
    key = completion_key(reader.identity, QUESTION, GenerationParams())
    reader.cache._store._db.execute("INSERT INTO completions VALUES (?, ?)", (key, bad_value))
    reader.cache._store._db.commit()
    assert reader.complete(QUESTION, GenerationParams()).text == "fresh"
    assert reader.complete(QUESTION, GenerationParams()).from_cache  # the bad row was replaced
    assert len(inner.calls) == 1


def test_run_cache_damage_is_reported_not_repaired(tmp_path, scripted_reader):
    path = filled_cache(tmp_path / "completions.sqlite")
    damaged = overwrite_header(path.read_bytes())
    path.write_bytes(damaged)
    with pytest.raises(RunDirectoryError, match=r"completions\.sqlite: damaged SQLite database"):
        CompletionCache(path, derived=False)
    assert path.read_bytes() == damaged and not list(tmp_path.glob("*.damaged-*"))

    run_cache = CompletionCache(tmp_path / "run.sqlite", derived=False)
    run_cache._store._db.execute("INSERT INTO completions VALUES ('k', 'not json')")
    run_cache._store._db.commit()
    with pytest.raises(RunDirectoryError, match=r"run\.sqlite: the entry k is not a completion"):
        run_cache.get("k")


