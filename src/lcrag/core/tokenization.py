"""Tokenizers that count exactly what a reader counts.

Chunking by tokens and middle truncation must use the reader's own tokenizer; these adapters give one
interface over a llama.cpp-compatible ``/tokenize`` endpoint and a Hugging Face ``tokenizer.json``.
"""

from __future__ import annotations

import bisect
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from lcrag.core.errors import InputError, ReaderError

if TYPE_CHECKING:
    import httpx


@runtime_checkable
class Tokenizer(Protocol):
    name: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: list[int]) -> str: ...

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        """Character span of each token of ``text``, in order; spans tile the text without gaps."""
        ...


def count_tokens(tokenizer: Tokenizer, text: str) -> int:
    return len(tokenizer.encode(text)) if text else 0


def _byte_to_char_offsets(text: str, byte_ends: list[int]) -> list[int]:
    """Map UTF-8 byte offsets into ``text`` to character offsets (a split inside a character moves past it)."""
    char_byte_starts: list[int] = []
    pos = 0
    for ch in text:
        char_byte_starts.append(pos)
        pos += len(ch.encode("utf-8"))
    char_byte_starts.append(pos)
    return [bisect.bisect_left(char_byte_starts, b) for b in byte_ends]


class LlamaServerTokenizer:
    """The tokenizer of a llama.cpp server (also the embedded reader's), through ``/tokenize`` and ``/detokenize``.

    ``model_identity`` names the model for the caches of token counts: the reader's identity (see
    :func:`lcrag.readers.base.reader_identity`), not just a model name that two models may share.
    """

    def __init__(self, base_url: str, model_identity: str, timeout: float = 120.0, client: httpx.Client | None = None,
                 api_key: str | None = None):
        import httpx  # here, not at the top: ~0.1 s that only a server tokenizer needs

        from lcrag.core.redaction import redact_url

        self.base_url = base_url.rstrip("/")
        if self.base_url.endswith("/v1"):
            self.base_url = self.base_url[: -len("/v1")]
        self.shown_url = redact_url(self.base_url)
        self.name = f"llama.cpp:{model_identity}"
        self.timeout = timeout
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._client = client or httpx.Client(timeout=timeout, headers=headers)

    def _post(self, path: str, payload: dict) -> dict:
        import httpx

        from lcrag.core.http_client import (RETRY_STATUS, DeadlineExceeded, ServerUnavailable, per_operation_timeout,
                                       run_within)

        try:
            response = run_within(self.timeout, lambda: self._client.post(
                self.base_url + path, json=payload, timeout=per_operation_timeout(self.timeout)))
        except DeadlineExceeded:
            raise ServerUnavailable(f"tokenizer endpoint {self.shown_url}{path} gave no answer within the "
                                    f"{self.timeout:g} s deadline (--timeout)") from None
        except httpx.HTTPError as exc:
            raise ServerUnavailable(f"tokenizer endpoint {self.shown_url}{path} failed: {type(exc).__name__}") from None
        if response.status_code == 404:
            raise ReaderError(
                f"{self.shown_url} has no {path} endpoint; pass a tokenizer.json with --tokenizer for exact counts"
            )
        if response.status_code >= 400:
            failed = ServerUnavailable if response.status_code in RETRY_STATUS else ReaderError
            raise failed(f"tokenizer endpoint {self.shown_url}{path} answered {response.status_code}")
        try:
            return response.json()
        except ValueError:
            raise ReaderError(f"tokenizer endpoint {self.shown_url}{path} answered with invalid JSON") from None

    def encode(self, text: str) -> list[int]:
        if not text:
            return []
        return list(self._post("/tokenize", {"content": text, "add_special": False})["tokens"])

    def decode(self, ids: list[int]) -> str:
        if not ids:
            return ""
        return self._post("/detokenize", {"tokens": list(ids)})["content"]

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        if not text:
            return []
        pieces = self._post("/tokenize", {"content": text, "add_special": False, "with_pieces": True})["tokens"]
        byte_ends: list[int] = []
        pos = 0
        for item in pieces:
            piece = item["piece"]
            pos += len(piece) if isinstance(piece, list) else len(piece.encode("utf-8"))
            byte_ends.append(pos)
        if pos != len(text.encode("utf-8")):
            raise InputError(
                f"{self.name} does not tokenize text losslessly (its pieces cover {pos} of "
                f"{len(text.encode('utf-8'))} bytes); chunk by words or sentences instead"
            )
        ends = _byte_to_char_offsets(text, byte_ends)
        starts = [0, *ends[:-1]]
        return list(zip(starts, ends))


def _file_sha256(path: Path) -> str:
    import hashlib

    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class HFTokenizer:
    """A Hugging Face ``tokenizer.json`` (the ``tokenizers`` library), e.g. for an OpenAI-compatible reader."""

    def __init__(self, path: str | Path, name: str | None = None):
        from tokenizers import Tokenizer as _HFTokenizer

        path = Path(path)
        if path.is_dir():
            path = path / "tokenizer.json"
        if not path.is_file():
            raise InputError(f"tokenizer file {path} does not exist")
        self._tok = _HFTokenizer.from_file(str(path))
        self._tok.no_truncation()
        self._tok.no_padding()
        # Token-count caches key on the name: the file's content, not its path, says which tokenizer this is.
        self.name = name or f"hf:{path.name}#{_file_sha256(path)[:16]}"

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids if text else []

    def decode(self, ids: list[int]) -> str:
        return self._tok.decode(list(ids), skip_special_tokens=True) if ids else ""

    def count_many(self, texts: list[str]) -> list[int]:
        return [len(e.ids) for e in self._tok.encode_batch(texts, add_special_tokens=False)]

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        if not text:
            return []
        offsets = self._tok.encode(text, add_special_tokens=False).offsets
        # Offsets may leave gaps (stripped whitespace); stretch each token to the next one's start.
        spans: list[tuple[int, int]] = []
        for i in range(len(offsets)):
            begin = 0 if i == 0 else spans[-1][1]
            stop = offsets[i + 1][0] if i + 1 < len(offsets) else len(text)
            spans.append((begin, max(begin, stop)))
        return spans


class WordCounter:
    """Whitespace words as "tokens": a fast, reader-independent size for corpora too large to tokenize (sizes only;
    budgets that must match a reader use the reader's own tokenizer)."""

    name = "words"

    def encode(self, text: str) -> list[int]:
        return [0] * len(text.split())

    def decode(self, ids: list[int]) -> str:
        raise NotImplementedError("word counts cannot be decoded")

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        raise NotImplementedError("word counts have no spans")


def count_many(tokenizer: Tokenizer, texts: list[str], threads: int = 4) -> list[int]:
    """Token counts of many texts; a tokenizer behind HTTP is asked by a few threads at once."""
    if isinstance(tokenizer, LlamaServerTokenizer) and len(texts) > 1:
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(threads) as pool:
            return list(pool.map(lambda t: count_tokens(tokenizer, t), texts))
    if isinstance(tokenizer, HFTokenizer):
        return tokenizer.count_many(texts)
    return [count_tokens(tokenizer, t) for t in texts]
