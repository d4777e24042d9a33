"""Any OpenAI-compatible chat endpoint: OpenAI, vLLM, llama.cpp server, Ollama."""

from __future__ import annotations

import functools
import threading
import time

from lcrag.core.errors import InputError, ReaderError
from lcrag.core.http_client import DEFAULT_TIMEOUT, HttpClient, ServerUnavailable, resolve_endpoint
from lcrag.readers import streaming
from lcrag.readers.base import Completion, GenerationParams, Message
from lcrag.core.redaction import redact_url
from lcrag.core.tokenization import LlamaServerTokenizer, Tokenizer, count_tokens

# Chat templates add a few tokens per message; used only when the server cannot render its template for us.
_TEMPLATE_TOKENS_PER_MESSAGE = 8


class ServerTally:
    """What one server reported for the completions it answered (its own ``usage``: prompt tokens, and those of them
    its prefix cache held), counted under one lock; :meth:`snapshot` adds the cached-token share."""

    def __init__(self, server: str):
        self.server = server
        self._lock = threading.Lock()
        self._counts = {"completions": 0, "prompt_tokens": 0, "cached_prompt_tokens": 0}

    def add(self, completion: Completion) -> None:
        with self._lock:
            self._counts["completions"] += 1
            self._counts["prompt_tokens"] += completion.prompt_tokens
            self._counts["cached_prompt_tokens"] += completion.cached_prompt_tokens

    def snapshot(self) -> dict:
        with self._lock:
            counts = dict(self._counts)
        return {"server": self.server, **counts, "cached_share": cached_share(counts)}


def cached_share(counts: dict) -> float | None:
    """Cached prompt tokens over prompt tokens (None before any prompt token)."""
    return counts["cached_prompt_tokens"] / counts["prompt_tokens"] if counts["prompt_tokens"] else None


class OpenAIChatReader:
    """Chat completions over HTTP, with token counts from the server's reported ``usage``.

    ``tokenizer`` (for truncation and token chunking) defaults to the server's own ``/tokenize`` endpoint,
    which llama.cpp server and vLLM offer; for OpenAI itself pass an ``HFTokenizer``.
    """

    def __init__(
        self,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        context_window: int | None = None,
        tokenizer: Tokenizer | None = None,
        timeout: float = DEFAULT_TIMEOUT,
        max_retries: int = 5,
        max_concurrency: int = 4,
        identity: str | None = None,
    ):
        base_url, api_key = resolve_endpoint(base_url, api_key, "reader")
        if not base_url.endswith("/v1"):
            base_url += "/v1"
        self.model = model
        # The server and the model it serves (the same alias on two servers may be two models); never credentials.
        self.identity = identity or f"openai:{model}@{redact_url(base_url)}"
        # The build the server last reported (OpenAI's system_fingerprint); None until it reports one.
        self.system_fingerprint: str | None = None
        self.max_concurrency = max_concurrency
        self._http = HttpClient(base_url, api_key=api_key, timeout=timeout, max_retries=max_retries, max_connections=max_concurrency)
        self._server_root = base_url[: -len("/v1")]
        self.tally = ServerTally(redact_url(self._server_root) or "")
        self._root_http = HttpClient(self._server_root, api_key=api_key, timeout=timeout, max_retries=max_retries)
        self.tokenizer: Tokenizer = tokenizer or LlamaServerTokenizer(
            self._server_root, self.identity, timeout=timeout, api_key=api_key)
        self._context_window = context_window
        self._can_apply_template: bool | None = None
        self._gate = threading.BoundedSemaphore(max_concurrency)

    @property
    def context_window(self) -> int:
        if self._context_window is None:
            self._context_window = self._server_context_window()
        return self._context_window

    def _server_context_window(self) -> int:
        # llama.cpp server reports n_ctx at /props; vLLM reports max_model_len at /v1/models.
        # A server that is down says nothing of its window (ServerUnavailable goes on: a pool asks another).
        try:
            props = self._root_http.get_json("/props")
            n_ctx = props.get("default_generation_settings", {}).get("n_ctx") or props.get("n_ctx")
            if n_ctx:
                return int(n_ctx)
        except ServerUnavailable:
            raise
        except ReaderError:
            pass
        try:
            for item in self._http.get_json("/models").get("data", []):
                if item.get("id") == self.model and item.get("max_model_len"):
                    return int(item["max_model_len"])
        except ServerUnavailable:
            raise
        except ReaderError:
            pass
        raise InputError(f"cannot learn the context window of {self.identity}; pass --context-window")

    @functools.cached_property
    def parameter_count(self) -> int | None:
        """The model's parameters, as a llama.cpp server reports them (``meta.n_params`` at /v1/models); None from
        a server that does not say (vLLM, OpenAI)."""
        try:
            models = self._http.get_json("/models").get("data", [])
        except ReaderError:
            return None
        for item in models if isinstance(models, list) else []:
            count = (item.get("meta") or {}).get("n_params") if isinstance(item, dict) else None
            if isinstance(count, int) and count > 0 and (item.get("id") == self.model or len(models) == 1):
                return count
        return None

    def complete(self, messages: list[Message], params: GenerationParams) -> Completion:
        """One chat completion. While someone listens (:mod:`lcrag.readers.streaming`: the service), it is streamed:
        the tokens reach the listener as they arrive and a cancel ends the request."""
        payload = {"model": self.model, "messages": messages, **params.as_payload()}
        listener = streaming.current()
        with self._gate:
            started = time.perf_counter()
            if listener is None:
                data = self._http.post_json("/chat/completions", payload)
            else:
                data = self._streamed(payload, listener, streaming.token_sink())
            seconds = time.perf_counter() - started
        try:
            text = data["choices"][0]["message"]["content"] or ""
            usage = data["usage"]
            if not isinstance(usage, dict) or not isinstance(text, str):
                raise TypeError
        except (KeyError, IndexError, TypeError):
            raise ReaderError(f"{self.identity}: response without choices or usage") from None
        details = usage.get("prompt_tokens_details") or {}
        fingerprint = data.get("system_fingerprint")
        fingerprint = fingerprint if isinstance(fingerprint, str) and fingerprint else None
        if fingerprint:
            self.system_fingerprint = fingerprint
        completion = Completion(
            text=text,
            model=self.model,
            prompt_tokens=int(usage.get("prompt_tokens", 0)),
            completion_tokens=int(usage.get("completion_tokens", 0)),
            cached_prompt_tokens=int(details.get("cached_tokens") or 0),
            seconds=seconds,
            system_fingerprint=fingerprint,
            logprobs=_logprobs(data) if params.top_logprobs else None,
        )
        self.tally.add(completion)
        return completion

    def _streamed(self, payload: dict, listener: streaming.Listener, sink) -> dict:
        """A streamed completion gathered into the shape of a whole one (text, log-probabilities, usage)."""
        payload = payload | {"stream": True, "stream_options": {"include_usage": True}}
        text: list[str] = []
        logprobs: list[dict] = []
        whole: dict = {"usage": None}
        for event in self._http.post_stream("/chat/completions", payload, listener.cancelled):
            if isinstance(event.get("error"), dict):
                raise ReaderError(f"{self.identity}: {str(event['error'].get('message', 'error'))[:200]}")
            whole["usage"] = event.get("usage") or whole["usage"]
            whole["system_fingerprint"] = event.get("system_fingerprint") or whole.get("system_fingerprint")
            for choice in event.get("choices") or []:
                piece = (choice.get("delta") or {}).get("content")
                if isinstance(piece, str) and piece:
                    text.append(piece)
                    if sink is not None:
                        sink(piece)
                logprobs.extend(((choice.get("logprobs") or {}).get("content")) or [])
        content = "".join(text)
        if whole["usage"] is None:  # a server that ignores stream_options: our own count, exact for its tokenizer
            whole["usage"] = self._counted_usage(payload["messages"], content)
        return whole | {"choices": [{"message": {"content": content}, "logprobs": {"content": logprobs}}]}

    def _counted_usage(self, messages: list[Message], text: str) -> dict:
        """Usage from the reader's own tokenizer, for a server that streamed no usage."""
        return {"prompt_tokens": self.count_prompt_tokens(messages),
                "completion_tokens": count_tokens(self.tokenizer, text) if text else 0}

    def count_prompt_tokens(self, messages: list[Message]) -> int:
        if self._can_apply_template is not False:
            try:
                prompt = self._root_http.post_json("/apply-template", {"messages": messages})["prompt"]
                self._can_apply_template = True
                # The rendered template already holds the special tokens as text; the server parses them.
                return count_tokens(self.tokenizer, prompt)
            except ServerUnavailable:
                raise  # the server is down, not without the endpoint
            except (ReaderError, KeyError):
                self._can_apply_template = False
        return sum(count_tokens(self.tokenizer, m["content"]) + _TEMPLATE_TOKENS_PER_MESSAGE for m in messages)

    def server_stats(self) -> list[dict]:
        """What the server reported (:class:`ServerTally`), as a list of one (a pool lists each of its servers)."""
        return [self.tally.snapshot()]

    def close(self) -> None:
        self._http.close()
        self._root_http.close()


# Positions kept: enough for a short answer's first words (a decline), small enough for the completion cache.
_LOGPROB_POSITIONS = 8


def _logprobs(data: dict) -> list[dict] | None:
    """The first generated tokens and their top candidates from an OpenAI-style ``choices[0].logprobs.content``
    (OpenAI, vLLM, llama.cpp server); None when the server sent none or something else."""
    try:
        content = data["choices"][0]["logprobs"]["content"]
        return [{"token": str(pos["token"]),
                 "top": [[str(c["token"]), float(c["logprob"])] for c in pos.get("top_logprobs") or []]
                 or [[str(pos["token"]), float(pos["logprob"])]]}
                for pos in content[:_LOGPROB_POSITIONS]]
    except (KeyError, IndexError, TypeError, ValueError):
        return None
