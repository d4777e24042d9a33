"""Defect 21 end to end: the bundled GGUF reader is known by its content, and a copy under another directory (a
temporary path, say) is the same model with the same cached answers."""

import shutil

from lcrag.core import bundled_models as models
from lcrag.readers import CachedReader, CompletionCache, GenerationParams


def test_bundled_reader_identity_is_its_content(reader, tmp_path):
    path = models.smollm2_gguf()
    assert reader.identity == models.gguf_identity(path)
    assert reader.identity.startswith(f"gguf:{path.name}#") and str(path.parent) not in reader.identity
    assert reader.tokenizer.name == f"llama.cpp:{reader.identity}"
    copy = tmp_path / "elsewhere" / path.name
    copy.parent.mkdir()
    shutil.copyfile(path, copy)
    assert models.gguf_identity(copy) == reader.identity  # where the file lies does not matter

    cached = CachedReader(reader, CompletionCache(tmp_path / "completions.sqlite"))
    messages = [{"role": "user", "content": "Say yes."}]
    first = cached.complete(messages, GenerationParams(max_tokens=4))
    again = cached.complete(messages, GenerationParams(max_tokens=4))
    assert again.from_cache and (again.text, again.prompt_tokens) == (first.text, first.prompt_tokens)
