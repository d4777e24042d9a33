"""Embedders: text -> unit-norm float32 vectors, behind one interface."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from lcrag.errors import InputError, ModelNotFoundError, ReaderError


@runtime_checkable
class Embedder(Protocol):
    name: str
    dimension: int

    def embed(self, texts: list[str]) -> np.ndarray:
        """Shape (len(texts), dimension), float32, rows of unit length."""
        ...


def _normalise(vectors: np.ndarray) -> np.ndarray:
    vectors = np.asarray(vectors, dtype=np.float32)
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.maximum(norms, 1e-12)


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 as int8 ONNX on onnxruntime: the offline default, no torch.

    Mean pooling over the attention mask, then L2 normalisation, as sentence-transformers does for this model.
    """

    dimension = 384

    def __init__(
        self,
        model_path: str | Path | None = None,
        tokenizer_path: str | Path | None = None,
        max_length: int = 256,
        batch_size: int = 32,
        threads: int | None = None,
    ):
        import onnxruntime as ort
        from tokenizers import Tokenizer

        from lcrag import models

        model_path = Path(model_path) if model_path else models.minilm_onnx()
        tokenizer_path = Path(tokenizer_path) if tokenizer_path else models.minilm_tokenizer()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or min(4, os.cpu_count() or 1)
        options.inter_op_num_threads = 1
        self._session = ort.InferenceSession(str(model_path), options, providers=["CPUExecutionProvider"])
        self._input_names = {i.name for i in self._session.get_inputs()}
        self._tokenizer = Tokenizer.from_file(str(tokenizer_path))
        self._tokenizer.enable_truncation(max_length=max_length)
        self.max_length = max_length
        self.batch_size = batch_size
        self.name = f"onnx:all-MiniLM-L6-v2-int8:max{max_length}"

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        # Sort-free batches padded to their longest member: cheap, and keeps the output order.
        self._tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
        encodings = self._tokenizer.encode_batch(texts)
        ids = np.array([e.ids for e in encodings], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encodings], dtype=np.int64)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self._input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = self._session.run(None, feeds)[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return _normalise(pooled)

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        # Batching texts of similar length wastes less padding; restore the caller's order after.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        out = np.empty((len(texts), self.dimension), dtype=np.float32)
        for s in range(0, len(order), self.batch_size):
            idx = order[s : s + self.batch_size]
            out[idx] = self._embed_batch([texts[i] for i in idx])
        return out


class SentenceTransformerEmbedder:
    """Any sentence-transformers model by name or path (``pip install lcrag[st]``)."""

    def __init__(self, model: str | None = None, batch_size: int = 32, device: str | None = None):
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ModelNotFoundError(
                "sentence-transformers is not installed: pip install torch==2.13.0 'lcrag[st]'"
            ) from None
        from lcrag import models

        model = model or str(models.minilm_sentence_transformers_dir())
        self._model = SentenceTransformer(model, device=device)
        self.dimension = int(self._model.get_sentence_embedding_dimension())
        self.batch_size = batch_size
        self.name = f"st:{model}"

    def embed(self, texts: list[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        vectors = self._model.encode(texts, batch_size=self.batch_size, normalize_embeddings=True, convert_to_numpy=True)
        return _normalise(vectors)


class OpenAIEmbedder:
    """Any OpenAI-compatible ``/embeddings`` endpoint (OpenAI, vLLM, llama.cpp server, Ollama)."""

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        batch_size: int = 64,
        timeout: float = 60.0,
        max_retries: int = 5,
    ):
        from lcrag.readers.http import HttpClient, resolve_endpoint

        base_url, api_key = resolve_endpoint(base_url, api_key, "embedder")
        self._http = HttpClient(base_url, api_key=api_key, timeout=timeout, max_retries=max_retries)
        self.model = model
        self.batch_size = batch_size
        self.name = f"openai:{model}@{self._http.base_url}"
        self.dimension = 0  # learned from the first response

    def embed(self, texts: list[str]) -> np.ndarray:
        rows: list[list[float]] = []
        for s in range(0, len(texts), self.batch_size):
            batch = texts[s : s + self.batch_size]
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


def make_embedder(spec: str = "minilm", base_url: str | None = None, api_key: str | None = None) -> Embedder:
    """``minilm`` (bundled ONNX), ``st:NAME_OR_PATH`` (sentence-transformers), ``openai:MODEL`` (HTTP)."""
    if spec in ("minilm", "default", ""):
        return OnnxMiniLMEmbedder()
    if spec.startswith("st:"):
        return SentenceTransformerEmbedder(spec[3:] or None)
    if spec.startswith("openai:"):
        return OpenAIEmbedder(spec[len("openai:") :], base_url=base_url, api_key=api_key)
    raise InputError(f"unknown embedder {spec!r}; use minilm, st:NAME_OR_PATH or openai:MODEL")
