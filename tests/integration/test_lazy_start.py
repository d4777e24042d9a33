"""Start-up stays cheap: parts are imported and models started only when used (issue 15's start-up constraint)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lcrag.readers.base import Completion, GenerationParams
from lcrag.readers.cache import CachedReader, CompletionCache, completion_key
from lcrag.readers.llamacpp import EmbeddedLlamaReader


MESSAGES = [{"role": "user", "content": "Who is the keeper?"}]


def test_a_cache_hit_never_starts_the_embedded_reader(tmp_path):
    gguf = tmp_path / "tiny.gguf"
    gguf.write_bytes(b"not a real model, never loaded")
    reader = EmbeddedLlamaReader(gguf)  # its identity is the file's fingerprint: known without the server
    cache = CompletionCache(tmp_path / "completions.sqlite")
    cache.put(completion_key(reader.identity, MESSAGES, GenerationParams()),
              Completion(text="Tobias", model="tiny", prompt_tokens=9, completion_tokens=1))
    cached = CachedReader(reader, cache)
    answer = cached.complete(MESSAGES, GenerationParams())
    assert (answer.text, answer.from_cache, cached.max_concurrency) == ("Tobias", True, 1)
    assert reader.identity.startswith("gguf:tiny.gguf#") and reader.model == "tiny"
    cached.close()  # closing a reader that never started starts nothing either
    assert reader.__dict__["_server"] is None


def test_a_missing_model_is_still_refused_at_once(tmp_path):
    from lcrag.core.errors import InputError

    with pytest.raises(InputError, match="does not exist"):
        EmbeddedLlamaReader(tmp_path / "missing.gguf")


def test_the_command_line_imports_neither_numpy_nor_httpx():
    code = "import sys, lcrag.cli; print(sorted({'numpy', 'httpx', 'xllamacpp'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "[]"
