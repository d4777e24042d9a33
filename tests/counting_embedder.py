"""A stand-in embedder that counts what it embeds (a question embeds only its query: one text), and two short
manual passages, shared by the tests of a collection's indexes being ready and warmed."""

from __future__ import annotations

import numpy as np

CRANE = "The crane reset code is 7781. Hold the red button for five seconds before entering the reset code."
PUMP = "The pump pressure limit is 4711 kilopascal. Open the bypass valve when the pump pressure alarm sounds."


class CountingEmbedder:
    """A bag of hashed words that counts the texts it embeds: a question embeds only its query (one text)."""

    name = "counting-test"
    dimension = 32

    def __init__(self):
        self.calls: list[int] = []

    def embed(self, texts):
        self.calls.append(len(texts))
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, text in enumerate(texts):
            for word in text.lower().split():
                out[i, sum(map(ord, word)) % self.dimension] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)
