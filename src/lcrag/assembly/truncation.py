"""Middle truncation by reader tokens, as LongBench's ``pred.py`` does for over-long prompts."""

from __future__ import annotations

from dataclasses import dataclass

from lcrag.tokenization import Tokenizer


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
