"""``keyword-overlap``: chunks ranked by how many of the question's words they contain."""

import re

from lcrag.core.registry import RETRIEVERS
from lcrag.core.types import ScoredChunk


def words(text):
    return set(re.findall(r"\w+", text.lower()))


class KeywordOverlap:
    name = "keyword-overlap"

    def __init__(self, chunks):
        self.chunks = chunks

    def run(self, query, k=None):
        wanted = words(query)
        ranked = [ScoredChunk(c, float(len(wanted & words(c.text)))) for c in self.chunks]
        ranked.sort(key=lambda s: (-s.score, s.chunk.index))
        return ranked[:k] if k is not None else ranked


@RETRIEVERS.register("keyword-overlap", help="chunks ranked by the question words they share (example plugin)")
def keyword_overlap(index):
    return KeywordOverlap(index.chunks)
