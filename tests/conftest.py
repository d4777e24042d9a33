from __future__ import annotations

from pathlib import Path

import pytest

from lcrag.readers.base import Completion, GenerationParams, Message


TIERS = ("unit", "integration", "system")  # tests/<tier>/...: the folder a test lies in is its tier's marker


def pytest_collection_modifyitems(config, items):
    here = Path(__file__).parent
    for item in items:
        tier = Path(str(item.fspath)).relative_to(here).parts[0]
        if tier in TIERS:
            item.add_marker(getattr(pytest.mark, tier))


class WhitespaceTokenizer:
    """A test tokenizer: each run of non-space characters plus the spaces before it is one token."""

    name = "whitespace-test"

    def _pieces(self, text: str) -> list[str]:
        import re

        return re.findall(r"\s*\S+|\s+$", text)

    def encode(self, text: str) -> list[int]:
        self.vocab = getattr(self, "vocab", {})
        return [self.vocab.setdefault(p, len(self.vocab)) for p in self._pieces(text)]

    def decode(self, ids: list[int]) -> str:
        inverse = {v: k for k, v in self.vocab.items()}
        return "".join(inverse[i] for i in ids)

    def token_spans(self, text: str) -> list[tuple[int, int]]:
        spans, pos = [], 0
        for piece in self._pieces(text):
            spans.append((pos, pos + len(piece)))
            pos += len(piece)
        return spans


class ScriptedReader:
    """A test reader that answers from a function of the prompt and records every call."""

    def __init__(self, answer=lambda messages: "42", context_window: int = 100_000):
        self.model = "scripted"
        self.context_window = context_window
        self.tokenizer = WhitespaceTokenizer()
        self.answer = answer
        self.calls: list[list[Message]] = []

    def count_prompt_tokens(self, messages: list[Message]) -> int:
        return sum(len(self.tokenizer.encode(m["content"])) for m in messages)

    def complete(self, messages: list[Message], params: GenerationParams) -> Completion:
        self.calls.append(messages)
        return Completion(self.model, self.count_prompt_tokens(messages), 1, text=self.answer(messages))


@pytest.fixture
def scripted_reader():
    return ScriptedReader


@pytest.fixture
def whitespace_tokenizer():
    return WhitespaceTokenizer()
