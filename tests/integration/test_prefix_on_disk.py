"""LC's document prefix survives the process: with the bundled reader, a second LC question on a document in a new
Pipeline (a restart, a new `lcrag ask`) restores the document's KV state from disk instead of reading it again; a
damaged state file is discarded and the document read again, with the same answer."""

from __future__ import annotations

from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.documents.synthetic import needle_document


def lc_call(tmp_path, question, **settings):
    pipeline = Pipeline(Settings(cache_dir=tmp_path, context_window=2048, strategy="lc", **settings))
    try:
        answer = pipeline.ask(needle_document(1200, seed=5)[0], question)
    finally:
        pipeline.close()
    return answer.text, answer.calls[0]


def test_a_new_process_reads_the_document_prefix_from_disk(tmp_path, caplog):
    _, first = lc_call(tmp_path, "What is the pass key?")
    assert first.cached_prompt_tokens == 0
    states = list((tmp_path / "kv").glob("*.bin"))
    assert len(states) == 1
    text, second = lc_call(tmp_path, "Which city is mentioned?")
    assert second.cached_prompt_tokens >= 0.9 * second.prompt_tokens  # only the question was read
    states[0].write_bytes(b"damaged")
    again, third = lc_call(tmp_path, "Which city is mentioned?", cache=True, max_tokens=48)  # a new completion key
    assert third.cached_prompt_tokens == 0 and "discarded a KV state file" in caplog.text
    assert list((tmp_path / "kv").glob("*.bin"))  # saved again
