"""Retrieval units in one long prompt (LongRAG's long reader): whole units, best first, while they fit the room; then
trailing units dropped, and a last one cut in the middle, until the whole prompt fits the reader's window."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from lcrag.assembly.truncation import truncate_middle
from lcrag.core.errors import InputError
from lcrag.core.tokenization import Tokenizer
from lcrag.core.types import ChunkUsed
from lcrag.readers import streaming

SEPARATOR_TOKENS = 2  # "\n\n" between two units, as counted when choosing them


@dataclass
class UnitsContext:
    """The units a long prompt holds: their text joined, their documents' titles, which units, their tokens."""

    text: str
    titles: list[str]
    units: list[ChunkUsed]
    tokens: int
    truncated_tokens: int = 0


# (the chosen units' titles, their text joined, its tokens) -> tokens to remove for the prompt to fit (<= 0: fits).
Overflow = Callable[[list[str], str, int], int]
# (units) -> each one's text and each one's documents' titles.
ReadUnits = Callable[[list[int]], tuple[list[str], list[list[str]]]]


def assemble_units(hits: Sequence[tuple[int, float]], sizes: Sequence[int], room: int, read: ReadUnits,
                   tokenizer: Tokenizer, overflow: Overflow, window: int) -> UnitsContext:
    """Whole units of ``hits`` ((unit, score), best first), counted by ``sizes``, while they fit ``room`` tokens; then
    trailing units are dropped, and a last one cut in the middle, until ``overflow`` says the prompt fits the
    reader's ``window`` (named when even no context would fit)."""
    chosen: list[tuple[int, float]] = []
    used = 0
    for unit, score in hits:
        need = int(sizes[unit]) + (SEPARATOR_TOKENS if chosen else 0)
        if used + need > room and chosen:
            break
        chosen.append((unit, score))
        used += need
    texts, titles = read([unit for unit, _ in chosen])
    while True:  # each pass tokenizes the whole context: a cancelled question stops between two
        streaming.check_cancelled()
        text = "\n\n".join(texts)
        n_tokens = len(tokenizer.encode(text))
        over = overflow(sum(titles, []), text, n_tokens)
        if over <= 0 or len(chosen) <= 1:
            break
        chosen.pop()
        texts.pop()
        titles.pop()
    all_titles = sum(titles, [])
    full, full_tokens, target = text, n_tokens, n_tokens
    while over > 0:  # the target shrinks by at least one token a pass, so this ends
        streaming.check_cancelled()
        target = min(target, n_tokens) - over
        if target <= 0:
            raise InputError(f"the titles and prompt alone fill the reader's {window}-token window; use smaller "
                             "units or a reader with a larger window")
        text = truncate_middle(full, tokenizer, target).text
        n_tokens = len(tokenizer.encode(text))  # decoding and re-encoding may not give back the same count
        over = overflow(all_titles, text, n_tokens)
    return UnitsContext(text, all_titles, [ChunkUsed(u, 0, 0, s, int(sizes[u])) for u, s in chosen],
                        n_tokens, full_tokens - n_tokens)
