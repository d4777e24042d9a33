"""Fitting text to a token limit: middle truncation by reader tokens, as LongBench's ``pred.py`` does for over-long
prompts, and filling a limit with whole ranked chunks (LC over a corpus index)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from lcrag.core.tokenization import Tokenizer, count_tokens
from lcrag.core.types import Chunk, ScoredChunk


@dataclass(frozen=True)
class TruncatedText:
    text: str
    original_tokens: int
    kept_tokens: int

    @property
    def cut_tokens(self) -> int:
        return self.original_tokens - self.kept_tokens


def truncate_middle(text: str, tokenizer: Tokenizer, max_tokens: int) -> TruncatedText:
    """Keep the first and last ``max_tokens // 2`` tokens, drop the middle.

    Exactly LongBench's rule: ``half = int(max_length / 2); decode(ids[:half]) + decode(ids[-half:])``,
    so an odd ``max_tokens`` keeps one token fewer. Text within the limit is returned unchanged.
    """
    ids = tokenizer.encode(text)
    if len(ids) <= max_tokens:
        return TruncatedText(text, len(ids), len(ids))
    half = max(0, max_tokens) // 2
    if half == 0:
        return TruncatedText("", len(ids), 0)
    kept = tokenizer.decode(ids[:half]) + tokenizer.decode(ids[-half:])
    return TruncatedText(kept, len(ids), 2 * half)


def fill_with_chunks(ranked: list[ScoredChunk], token_counts: Callable[[list[Chunk]], list[int]], tokenizer: Tokenizer,
                     limit: int, separator: str = "\n\n") -> TruncatedText:
    """The best chunks, whole, while they fit ``limit`` tokens, joined in document order; when even the best one is
    longer, that one cut in the middle. ``cut_tokens`` counts only what was cut from a chunk, not the chunks left out
    (for a corpus, that would be nearly all of it)."""
    chosen, used = best_that_fit(ranked, token_counts, tokenizer, limit, separator)
    if not chosen:
        return truncate_middle(ranked[0].chunk.text, tokenizer, limit) if ranked else TruncatedText("", 0, 0)
    return TruncatedText(separator.join(c.text for c in chosen), used, used)


def best_that_fit(ranked: list[ScoredChunk], token_counts: Callable[[list[Chunk]], list[int]], tokenizer: Tokenizer,
                  limit: int, separator: str = "\n\n") -> tuple[list[Chunk], int]:
    """The best chunks, whole, while they fit ``limit`` tokens joined by ``separator``, in document order, and the
    tokens they take."""
    between = count_tokens(tokenizer, separator)
    chosen: list[Chunk] = []
    used = 0
    for scored in ranked:  # counted one by one: only chunks that may still fit are tokenized
        need = token_counts([scored.chunk])[0] + (between if chosen else 0)
        if used + need > limit:
            break
        chosen.append(scored.chunk)
        used += need
    return sorted(chosen, key=lambda c: c.start), used
