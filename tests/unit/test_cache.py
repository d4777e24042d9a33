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
