"""Places at the reader: how many questions the service answers at once.

As many as the reader takes (its ``max_concurrency``): a pool of reader servers (``--base-url A --base-url B``) its
servers' connections together, one OpenAI-compatible server its own (llama.cpp with ``--parallel`` slots, vLLM), the
embedded reader its ``parallel`` slots (one by default); a reader that says nothing takes one question at a time.
Never more than the service queues (``max_waiting``: no more questions are in flight than that). The count is
learned from the reader the first time a place is taken (the reader is made lazily), and fixed from then on."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from lcrag.readers import reader_slots, streaming


class ReaderSlots:
    """A semaphore of :func:`lcrag.readers.reader_slots` places, at most ``limit``; also a context manager holding one place (a
    chunker using the reader's tokenizer takes one, as a question does)."""

    def __init__(self, reader: Callable[[], Any], limit: int):
        self._reader, self.limit = reader, max(1, limit)
        self._gate: threading.BoundedSemaphore | None = None
        self._lock = threading.Lock()  # makes the gate once
        self.size = 0

    def _semaphore(self) -> threading.BoundedSemaphore:
        if self._gate is None:
            size = min(self.limit, reader_slots(self._reader()))  # made outside the lock: a model may load
            with self._lock:
                if self._gate is None:
                    self._gate, self.size = threading.BoundedSemaphore(size), size
        return self._gate

    def take(self, cancelled: threading.Event | None = None) -> None:
        """Wait for a place; a question whose client left (``cancelled``) leaves the queue instead."""
        gate = self._semaphore()
        while not gate.acquire(timeout=0.1):
            if cancelled is not None and cancelled.is_set():
                raise streaming.Cancelled("the client left while its question waited")

    def give_back(self) -> None:
        self._semaphore().release()

    def __enter__(self) -> ReaderSlots:
        self.take()
        return self

    def __exit__(self, *exc: object) -> None:
        self.give_back()
