"""Embedders: text -> unit-norm float32 vectors, behind one interface."""

from __future__ import annotations

import os
import threading
import unicodedata
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from lcrag.core.errors import InputError, ModelNotFoundError, ReaderError
from lcrag.core.lazy import lazy_module
from lcrag.readers import streaming
from lcrag.core.registry import EMBEDDERS

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")


@runtime_checkable
class Embedder(Protocol):
    name: str
    dimension: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """Shape (len(texts), dimension), float32, rows of unit length."""
        ...


def uncached(embedder: Embedder) -> Embedder:
    """The embedder that embeds text in bulk (chunks, sentences, summaries, corpus pieces): ``embedder`` itself, or
    the one a query cache wraps (see :mod:`lcrag.retrieval.query_cache`), so bulk text never fills that cache."""
    return getattr(embedder, "uncached", embedder)


def minilm_name(max_length: int = 256) -> str:
    """The bundled embedder's identity (its name), known without loading it."""
    return f"onnx:all-MiniLM-L6-v2-int8:max{max_length}"


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


def _splits_words(char: str) -> bool:
    """BERT's pre-tokenizer cuts at ``char``: a space (as its normalizer counts them: a control character is
    dropped, joining its neighbours), or punctuation (printable ASCII symbols count, as in BERT)."""
    if char in " \t\n\r" or unicodedata.category(char) == "Zs":
        return True
    return (char.isascii() and char.isprintable() and not char.isalnum()) or unicodedata.category(char).startswith("P")


def _word_prefix(text: str, reach: int | None, word_chars: int | None) -> str:
    """``text`` up to about ``reach`` characters, cut after a character the pre-tokenizer splits at; or, when the
    last ``word_chars`` + 1 characters hold none, inside a word already too long to be more than one unknown token.
    ``text`` itself when it is no longer, or when the model's words cannot be bounded (``word_chars`` None)."""
    if reach is None or word_chars is None or len(text) <= reach:
        return text
    for cut in range(reach, max(reach - word_chars - 1, 0), -1):
        if _splits_words(text[cut - 1]):
            return text[:cut]
    return text[:reach]


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 as int8 ONNX on onnxruntime: the offline default, no torch.

    Mean pooling over the attention mask, then L2 normalisation, as sentence-transformers does for this model.

    Every run is one thread (onnxruntime's intra-op pool of one): many texts are embedded ``threads`` batches at a
    time, each batch on its own thread, and a query (one batch) on the thread that asks. Splitting batches is the
    faster use of the cores (300 chunks on 2 cores: 16.4-17.2 s against 22.7-24.4 s with two intra-op threads per
    run, at the same peak memory: the batches in flight hold ``max_batch_tokens`` between them), and a query no
    longer takes every core for its few tokens: in a server its one run left the other requests of the process
    (a BM25 question beside it) waiting for a core each of its operators needed.
    """

    dimension = 384

    def __init__(
        self,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
        max_length: int = 256,
        max_batch_tokens: int = 1024,
        threads: int | None = None,
    ):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from lcrag.core import bundled_models as models

        model_path = Path(model_path) if model_path else models.minilm_onnx()
        tokenizer_path = Path(tokenizer_path) if tokenizer_path else models.minilm_tokenizer()
        options = ort.SessionOptions()
        options.intra_op_num_threads = 1  # (parallel batches instead: see the class's docstring)
        options.inter_op_num_threads = 1
        # Its threads sleep when a run ends instead of spinning for the next (onnxruntime's default): in a server a
        # question's one query vector left both cores spinning, slowing every other request of the process.
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        self._session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        self._input_names = {i.name for i in self._session.get_inputs()}
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.enable_truncation(max_length=max_length)
        self._tokenizer.no_padding()
        self.max_length = max_length
        self.threads = max(1, threads or min(4, os.cpu_count() or 1))  # batches run at once, one thread each
        # Each batch's share of max_batch_tokens (at least one whole text), so the batches in flight hold no more
        # padded tokens between them than one batch of max_batch_tokens did.
        self.max_batch_tokens = max(max_length, max_batch_tokens // self.threads)
        self._batches: ThreadPoolExecutor | None = None  # made on the first embedding of more than one batch
        self._batches_lock = threading.Lock()
        # A word longer than this is one unknown token (WordPiece); None: another model, whose texts are read whole.
        self._word_chars = (getattr(self._tokenizer.model, "max_input_chars_per_word", None)
                            if type(self._tokenizer.pre_tokenizer).__name__ == "BertPreTokenizer" else None)
        self.name = minilm_name(max_length)

    def _embed_batch(self, encodings: list) -> np.ndarray:
        width = max(len(e.ids) for e in encodings)
        ids = np.zeros((len(encodings), width), dtype=np.int64)
        mask = np.zeros_like(ids)
        for row, e in enumerate(encodings):
            ids[row, : len(e.ids)] = e.ids
            mask[row, : len(e.ids)] = 1
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return _normalise(pooled)

    def _encode(self, texts: list[str]) -> list:
        """Each text's first ``max_length`` tokens, exactly as the whole text's, without tokenizing the whole of a
        long one: the tokenizer makes every token of a text before it truncates, so one hostile chunk (12 MB of
        ``*a_``: 12 million tokens) took gigabytes. A text is read from a prefix cut where BERT's pre-tokenizer
        cuts (a space or a punctuation mark: tokens never cross one, so the prefix's tokens begin the text's), or
        inside a word too long to be anything but one unknown token; a prefix that does not fill the length grows."""
        reach = {i: self.max_length * 32 for i, text in enumerate(texts) if len(text) > self.max_length * 32}
        encodings = self._tokenizer.encode_batch([_word_prefix(t, reach.get(i), self._word_chars) for i, t in
                                                 enumerate(texts)])
        while reach := {i: n * 4 for i, n in reach.items() if n < len(texts[i])
                        and len(encodings[i].ids) < self.max_length}:
            again = self._tokenizer.encode_batch([_word_prefix(texts[i], n, self._word_chars) for i, n in reach.items()])
            for i, encoding in zip(reach, again):
                encodings[i] = encoding
        return encodings

    def _batched(self, encodings: list) -> list[list[int]]:
        """The texts' positions in batches of similar length, at most max_batch_tokens padded tokens each. Small
        batches of long texts are both faster and far lighter here (300-word chunks on 2 cores: 4 per batch 16.3
        chunks/s and 379 MiB peak, 32 per batch 12.0 chunks/s and 1454 MiB), while short texts (questions,
        sentences) still batch widely."""
        order = sorted(range(len(encodings)), key=lambda i: len(encodings[i].ids))
        batches: list[list[int]] = []
        batch: list[int] = []
        for i in order:
            if batch and (len(batch) + 1) * len(encodings[i].ids) > self.max_batch_tokens:
                batches.append(batch)
                batch = []
            batch.append(i)
        return batches + [batch] if batch else batches

    def _pool(self) -> ThreadPoolExecutor:
        with self._batches_lock:
            if self._batches is None:
                self._batches = ThreadPoolExecutor(self.threads, thread_name_prefix="lcrag-embed")
            return self._batches

    def embed(self, texts: list[str]) -> np.ndarray:
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        if not texts:
            return out
        encodings = self._encode(texts)
        batches = self._batched(encodings)
        if len(batches) == 1 or self.threads == 1:  # a query: on this thread, nothing handed over
            for batch in batches:
                streaming.check_cancelled()  # a question's bulk embedding stops between two batches
                out[batch] = self._embed_batch([encodings[j] for j in batch])
            return out
        running: deque = deque()  # (batch, its run), at most self.threads at once, in order
        for batch in batches:
            streaming.check_cancelled()  # (here, where the question's context is: not in the pool's threads)
            if len(running) == self.threads:
                done, run = running.popleft()
                out[done] = run.result()
            running.append((batch, self._pool().submit(self._embed_batch, [encodings[j] for j in batch])))
        for done, run in running:
            out[done] = run.result()
        return out

    def close(self) -> None:
        """Let the batches' threads go (an embedder used after is given new ones)."""
        with self._batches_lock:
            pool, self._batches = self._batches, None
        if pool is not None:
            pool.shutdown(wait=False)


class SentenceTransformerEmbedder:
    """Any sentence-transformers model by name or path (``pip install -e '.[st]' in lcrag's checkout``)."""

    def __init__(self, model: str | None = None, batch_size: int = 32, device: str | None = None):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ModelNotFoundError(
                "sentence-transformers is not installed: pip install torch==2.13.0 'lcrag[st]'"
            ) from None
        from lcrag.core import bundled_models as models

        model = model or str(models.minilm_sentence_transformers_dir())
        self._model = SentenceTransformer(model, device=device)
        self.dimension = int(self._model.get_sentence_embedding_dimension())
        self.batch_size = batch_size
        self.name = st_name(model)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self._model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True)
        return _normalise(vectors)


def st_name(model: str | None) -> str:
    from lcrag.core import bundled_models as models

    return f"st:{model or models.minilm_sentence_transformers_dir()}"


class OpenAIEmbedder:
    """Any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, llama.cpp server, Ollama)."""

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout: float | None = None,
        max_retries: int = 5,
    ):
        from lcrag.core.http_client import DEFAULT_TIMEOUT, HttpClient, resolve_endpoint

        base_url, api_key = resolve_endpoint(base_url, api_key, "embedder")
        self._http = HttpClient(base_url, api_key=api_key, timeout=timeout or DEFAULT_TIMEOUT, max_retries=max_retries)
        self.model = model
        self.batch_size = batch_size
        # Keys the embedding caches and is stored in manifests: the server and model, never credentials.
        self.name = f"openai:{model}@{self._http.shown_url}"  # = openai_name(model, base_url)
        self.dimension = 0  # learned from the first response

    def embed(self, texts: list[str]) -> np.ndarray:
        rows: list[list[float]] = []
        for s in range(0, len(texts), self.batch_size):
            batch = texts[s : s + self.batch_size]
            streaming.check_cancelled()
            data = self._http.post_json("/embeddings", {"model": self.model, "input": batch})
            try:
                items = sorted(data["data"], key=lambda d: d["index"])
                rows.extend(item["embedding"] for item in items)
            except (KeyError, TypeError):
                raise ReaderError(f"{self.name}: unexpected /embeddings response") from None
        if not rows:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = _normalise(np.array(rows, dtype=np.float32))
        self.dimension = vectors.shape[1]
        return vectors


def openai_name(model: str, base_url: str | None = None, api_key: str | None = None, **_endpoint: object) -> str:
    """An OpenAI-compatible embedder's identity (its name), known without a connection."""
    from lcrag.core.http_client import resolve_endpoint
    from lcrag.core.redaction import redact_url

    return f"openai:{model}@{redact_url(resolve_endpoint(base_url, api_key, 'embedder')[0])}"


def make_embedder(spec: str = "minilm", base_url: str | None = None, api_key: str | None = None,
                  timeout: float | None = None) -> Embedder:
    """``minilm`` (bundled ONNX), ``st:NAME_OR_PATH`` (sentence-transformers), ``openai:MODEL`` (HTTP; ``timeout``:
    seconds one call may take, retries included), or any spec a registered embedder (:data:`EMBEDDERS`) reads."""
    kind, name = parse_embedder_spec(spec)
    return EMBEDDERS.get(kind).create(name, base_url=base_url, api_key=api_key, timeout=timeout)


def parse_embedder_spec(spec: str) -> tuple[str, str]:
    """``(kind, name)`` of an embedder spec, checked without loading anything; ``kind`` names the registered
    embedder that reads it."""
    spec = spec.strip() if isinstance(spec, str) else ""
    found = EMBEDDERS.match_spec(spec)
    # an embedder's ``parse`` returns None for a spec it cannot use (``openai:`` without a model)
    name = found[0].meta.get("parse", _rest_or_empty)(found[1]) if found else None
    if name is None:
        from lcrag.readers import redact_spec

        raise InputError(f"unknown embedder {redact_spec(spec)!r}; use {EMBEDDERS.spec_forms()}")
    return found[0].name, name


def _rest_or_empty(rest: str | None) -> str:
    return rest or ""


@EMBEDDERS.register("minilm", help="the bundled all-MiniLM-L6-v2 (int8 ONNX, offline)", default=True,
                    aliases=("minilm", "default", ""), prefixes=(), forms=("minilm",),
                    identity=lambda name, **_endpoint: minilm_name(), dimension=OnnxMiniLMEmbedder.dimension)
def minilm_embedder(name: str, **_endpoint: object) -> OnnxMiniLMEmbedder:
    return OnnxMiniLMEmbedder()


@EMBEDDERS.register("st", help="any sentence-transformers model by name or path (pip install -e '.[st]' in lcrag's checkout)",
                    prefixes=("st",), forms=("st:NAME_OR_PATH",), identity=lambda name, **_endpoint: st_name(name))
def sentence_transformers_embedder(name: str, **_endpoint: object) -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder(name or None)


@EMBEDDERS.register("openai", help="an OpenAI-compatible /embeddings endpoint", prefixes=("openai",),
                    forms=("openai:MODEL",), parse=lambda rest: rest or None, identity=openai_name)
def openai_embedder(name: str, base_url: str | None = None, api_key: str | None = None,
                    timeout: float | None = None) -> OpenAIEmbedder:
    return OpenAIEmbedder(name, base_url=base_url, api_key=api_key, timeout=timeout)
