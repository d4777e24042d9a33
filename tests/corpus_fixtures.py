"""A small corpus (records with links and titles, written as JSONL, gzipped or not) and a hashing embedder, for the
corpus tests of every tier."""

from __future__ import annotations

import gzip
import json

import numpy as np

def write_corpus(path, records, gz=False):
    data = "".join(json.dumps(r) + "\n" for r in records)
    if gz:
        with gzip.open(path, "wt", encoding="utf-8") as f:
            f.write(data)
    else:
        path.write_text(data, encoding="utf-8")
    return path


RECORDS = [
    {"id": "a", "title": "Kiss and Tell (1945 film)", "text": "Kiss and Tell is a 1945 comedy starring Shirley Temple.",
     "links": ["Shirley Temple"]},
    {"id": "b", "title": "Shirley Temple", "text": "Shirley Temple was an actress and later a diplomat, Chief of Protocol."},
    {"id": "c", "title": "Tellurium", "text": "Tellurium is a chemical element; nothing here names a film."},
    {"id": "d", "title": "Zorblax Vault", "text": "The secret code of the Zorblax Vault is 73914, kept by the guild."},
    {"id": "e", "title": "Guild of Keys", "text": "The guild guards the Zorblax Vault and never speaks of the code.",
     "links": ["d", "unknown title"]},
]


class HashingEmbedder:
    """Unit test stand-in: a bag of hashed words, so MaxP arithmetic can be checked against brute force."""

    name = "hashing-test"
    dimension = 64

    def embed(self, texts):
        out = np.zeros((len(texts), self.dimension), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, sum(map(ord, w)) % self.dimension] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)


