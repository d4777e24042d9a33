"""The embedded reader: llama.cpp running a GGUF in this process (xllamacpp), served on loopback.

xllamacpp runs llama.cpp's own server in-process, so the embedded reader speaks the same OpenAI-compatible
protocol as a remote llama.cpp/vLLM server and gets its prompt-prefix cache for free: LC prompts that start
with the same document reuse its KV cache across questions.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import threading
from pathlib import Path

from lcrag.core.errors import InputError, ModelNotFoundError
from lcrag.readers.cache import question_tags
from lcrag.readers.kv_store import KVStore
from lcrag.readers.openai_compat import OpenAIChatReader
from lcrag.core.registry import READERS

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
        if importlib.util.find_spec("xllamacpp") is None:  # checked now, imported (~50 ms) only when started
            raise ModelNotFoundError("the embedded reader needs xllamacpp: pip install xllamacpp")
        from lcrag.core import bundled_models as models

        path = Path(model_path) if model_path else models.smollm2_gguf()
        if not path.is_file():
            raise InputError(f"GGUF model {path} does not exist")
        self.model_path = path
        self.model = path.stem
        # Identity: the file's content, not its name (two GGUFs may share one) nor its loopback port. Known without
        # the server, so a cached answer never starts it.
        self.identity = models.gguf_identity(path)
        self.max_concurrency = parallel
        self.system_fingerprint = None
        self._server = None
        self._start_lock = threading.Lock()
        self._options = {"context_window": context_window, "threads": threads, "parallel": parallel,
                         "cache_ram_mib": cache_ram_mib, "verbose": verbose, "timeout": timeout}
        self._kv: KVStore | None = None
        self._slot_key: str | None = None  # whose prefix slot 0 holds now (None: unknown or another prompt's)
        self._slot_lock = threading.Lock()  # restore, complete and save of one question go together

    def keep_prefixes(self, directory: Path, max_bytes: int) -> None:
        """Keep LC prompts' document prefixes on disk in ``directory`` (before the server starts; one slot only:
        with parallel slots a request's slot is the server's choice)."""
        if self.__dict__.get("_server") is None and self._options["parallel"] == 1:
            self._kv = KVStore(directory, max_bytes)

    def _slot(self, action: str, filename: str) -> bool:
        import httpx

        try:
            response = httpx.post(f"{self.base_url}/slots/0?action={action}", json={"filename": filename}, timeout=600)
        except httpx.HTTPError as exc:
            log.warning("KV %s of %s failed: %s", action, filename, exc)
            return False
        return response.status_code == 200

    def complete(self, messages, params):
        """A completion; with a ``prefix_key`` and a prefix store, the document's KV state is restored from disk
        first (unless the slot holds it already) and saved after (once per key)."""
        key = params.prefix_key if self._kv is not None else None
        if key is None:
            completion = super().complete(messages, params)
            self._slot_key = None  # the slot now holds this prompt
            return completion
        self._start()
        with self._slot_lock:
            if self._slot_key != key:
                self._kv.restore(self._slot, key)
            self._slot_key = None  # until done: a cancelled or failed call leaves the slot holding part of it
            completion = super().complete(messages, params)
            self._kv.save(self._slot, key, question_tags(params))
            self._slot_key = key
        return completion

    def __getattr__(self, name: str):
        # Called only for attributes not set yet: those of the HTTP client, which exist once the server is started
        # (on the first completion, token count or context window; never for a cache hit).
        if name.startswith("__") or "_start_lock" not in self.__dict__ or self.__dict__.get("_server") is not None:
            raise AttributeError(name)
        self._start()
        return getattr(self, name)

    def _start(self) -> None:
        with self._start_lock:
            if self._server is not None:
                return
            import xllamacpp

            opts = self._options
            params = xllamacpp.CommonParams()
            params.model.path = str(self.model_path)
            params.n_ctx = int(opts["context_window"])  # 0: the model's training context
            params.n_parallel = opts["parallel"]
            params.port = 0  # any free loopback port
            params.verbosity = 1 if opts["verbose"] else 0
            params.cache_ram_mib = opts["cache_ram_mib"]
            if self._kv is not None:  # the server reads and writes slot states there (the path is a prefix)
                params.endpoint_slots = True
                params.slot_save_path = str(self._kv.directory) + os.sep
            n = opts["threads"] or default_threads()
            params.cpuparams.n_threads = n
            params.cpuparams_batch.n_threads = n
            server = xllamacpp.Server(params)
            extra = {"timeout": opts["timeout"]} if opts["timeout"] else {}
            super().__init__(model=self.model, base_url=server.listening_address, api_key=None,
                             max_concurrency=opts["parallel"], identity=self.identity, **extra)
            self.base_url = server.listening_address
            self._server = server  # last: other threads see a started reader only once it is complete
            log.info("embedded llama.cpp serving %s at %s", self.model_path.name, self.base_url)

    def server_stats(self) -> list[dict]:
        """The in-process server's counts once it is started ([] before: asking never starts it)."""
        return super().server_stats() if self.__dict__.get("_server") is not None else []

    def close(self) -> None:
        if self.__dict__.get("_server") is not None:  # a reader never started has nothing to close
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
