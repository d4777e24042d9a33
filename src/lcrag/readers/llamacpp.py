"""The embedded reader: llama.cpp running a GGUF in this process (xllamacpp), served on loopback.

xllamacpp runs llama.cpp's own server in-process, so the embedded reader speaks the same OpenAI-compatible
protocol as a remote llama.cpp/vLLM server and gets its prompt-prefix cache for free: LC prompts that start
with the same document reuse its KV cache across questions.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from lcrag.errors import InputError, ModelNotFoundError
from lcrag.readers.openai_compat import OpenAIChatReader
from lcrag.registry import READERS

log = logging.getLogger(__name__)


def default_threads() -> int:
    # Prompt processing scales with cores (measured here: 2 threads read a prompt 1.8x faster than 1); past 8 the
    # memory bandwidth, not the core count, limits a small model.
    return max(1, min(8, os.cpu_count() or 1))


class EmbeddedLlamaReader(OpenAIChatReader):
    """A GGUF model run by llama.cpp in this process. ``model_path=None`` picks the bundled SmolLM2-135M-Instruct."""

    def __init__(
        self,
        model_path: str | Path | None = None,
        context_window: int = 0,
        threads: int | None = None,
        parallel: int = 1,
        cache_ram_mib: int = 1024,
        verbose: bool = False,
        timeout: float | None = None,
    ):
        # Spinning OpenMP workers starve each other on a busy small machine; passive waits keep generation steady.
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        try:
            import xllamacpp
        except ImportError:
            raise ModelNotFoundError("the embedded reader needs xllamacpp: pip install xllamacpp") from None
        from lcrag import models

        path = Path(model_path) if model_path else models.smollm2_gguf()
        if not path.is_file():
            raise InputError(f"GGUF model {path} does not exist")
        params = xllamacpp.CommonParams()
        params.model.path = str(path)
        params.n_ctx = int(context_window)  # 0: the model's training context
        params.n_parallel = parallel
        params.port = 0  # any free loopback port
        params.verbosity = 1 if verbose else 0
        params.cache_ram_mib = cache_ram_mib
        n = threads or default_threads()
        params.cpuparams.n_threads = n
        params.cpuparams_batch.n_threads = n
        self._server = xllamacpp.Server(params)
        self.base_url = self._server.listening_address
        self.model_path = path
        # Identity: the file's content, not its name (two GGUFs may share one) nor its loopback port.
        extra = {"timeout": timeout} if timeout else {}
        super().__init__(model=path.stem, base_url=self.base_url, api_key=None, max_concurrency=parallel,
                         identity=models.gguf_identity(path), **extra)
        log.info("embedded llama.cpp serving %s at %s", path.name, self.base_url)

    def close(self) -> None:
        super().close()
        self._server = None


def _gguf_path(rest: str | None) -> tuple[str | None, None]:
    """The model of a ``gguf:PATH`` or ``PATH.gguf`` spec, checked to exist now (``None``: the bundled model)."""
    if rest is None:
        return None, None
    if not Path(rest).is_file():
        raise InputError(f"GGUF model {rest} does not exist")
    return rest, None


@READERS.register("gguf", help="a local GGUF run in-process by llama.cpp (smollm2, the default: the bundled "
                  "SmolLM2-135M-Instruct)", default=True, aliases=("", "smollm2", "default"), prefixes=("gguf",),
                  suffixes=(".gguf",), forms=("smollm2", "PATH.gguf"), parse=_gguf_path)
def embedded_reader(model: str | None, url: None, *, context_window: int | None = None, threads: int | None = None,
                    timeout: float | None = None, **_endpoint: object) -> EmbeddedLlamaReader:
    """The reader of a GGUF spec; ``_endpoint`` (base URL, key, tokenizer) is for servers, this one is its own."""
    return EmbeddedLlamaReader(model, context_window=context_window or 0, threads=threads, timeout=timeout)
