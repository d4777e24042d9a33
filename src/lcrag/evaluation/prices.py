"""Cost in money: a price table per model (USD per million input, cached input and output tokens) and the cost of
LLM calls from the token counts the reader reported.

Cached prompt tokens are what the server said it reused (OpenAI's ``prompt_tokens_details.cached_tokens``, which
llama.cpp's server also fills, so the embedded reader reports its prefix cache too); they are billed at the cached
price. A model not in the table is unpriced (cost None, never 0): ``price_as`` prices a run as if it had used a
listed model (what would this local run cost on gpt-4o-mini?).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lcrag.core.errors import OptionError

PER = 1_000_000


@dataclass(frozen=True)
class Price:
    input: float  # USD per million prompt tokens
    cached_input: float  # USD per million prompt tokens the server reused from its cache
    output: float  # USD per million completion tokens

    def cost(self, prompt_tokens: int, completion_tokens: int, cached_prompt_tokens: int = 0) -> float:
        cached = min(max(0, cached_prompt_tokens), prompt_tokens)
        return ((prompt_tokens - cached) * self.input + cached * self.cached_input
                + completion_tokens * self.output) / PER


# List prices (USD per 1M tokens) from the providers' pricing pages as we last read them in 2025; this machine cannot
# re-check them, so pass --prices FILE with your own. Short-prompt tiers where a price depends on the prompt length.
BUILT_IN = {
    # https://openai.com/api/pricing/ (gpt-4o, gpt-4o-mini: 2024-10; gpt-4.1 family: 2025-04)
    "gpt-4o": Price(2.50, 1.25, 10.00),
    "gpt-4o-mini": Price(0.15, 0.075, 0.60),
    "gpt-4.1": Price(2.00, 0.50, 8.00),
    "gpt-4.1-mini": Price(0.40, 0.10, 1.60),
    # https://www.anthropic.com/pricing#api (cache reads at 0.1x input; cache writes, 1.25x, are not modelled)
    "claude-3-5-sonnet": Price(3.00, 0.30, 15.00),
    "claude-sonnet-4": Price(3.00, 0.30, 15.00),
    # https://ai.google.dev/pricing (prompts <= 128K tokens; context caching at 0.25x input; 2024-10)
    "gemini-1.5-pro": Price(1.25, 0.3125, 5.00),
    "gemini-1.5-flash": Price(0.075, 0.01875, 0.30),
    # https://ai.google.dev/pricing (2025-02)
    "gemini-2.0-flash": Price(0.10, 0.025, 0.40),
    # https://openai.com/api/pricing/ (gpt-4o-2024-08-06, 2024-10)
    "gpt-4o-0806": Price(2.50, 1.25, 10.00),
    # The first gpt-4o snapshot kept its launch price (no cached-input discount): a dated name is not always the alias
    "gpt-4o-2024-05-13": Price(5.00, 5.00, 15.00),
    # Open-weight readers (LaRA's recorded ones) at a serverless host's list price: https://www.together.ai/pricing
    # as last read in 2025 (the *-Instruct-Turbo endpoints; no cached-prompt discount), Mistral NeMo at
    # https://mistral.ai/pricing (open-mistral-nemo, 2024-07). Names as LaRA's recordings call them.
    "qwen2.5-72b-instruct": Price(1.20, 1.20, 1.20),
    "qwen2.5-7b-instruct": Price(0.30, 0.30, 0.30),
    "llama-3.3-70b": Price(0.88, 0.88, 0.88),
    "llama-3.3-70b-turbo": Price(0.88, 0.88, 0.88),
    "llama-3.1-8b": Price(0.18, 0.18, 0.18),
    "llama-3.2-3b": Price(0.06, 0.06, 0.06),
    "mistral-nemo": Price(0.15, 0.15, 0.15),
}
_KEYS = ("input", "cached_input", "output")


def model_key(model: str) -> str:
    """The name a price is listed under: ``openai:gpt-4o@https://...`` -> ``gpt-4o``."""
    name = model.split(":", 1)[1] if model.startswith("openai:") else model
    return name.split("@", 1)[0]


# A snapshot's date or a moving alias after a listed name: claude-3-5-sonnet-20241022, gpt-4o-2024-08-06,
# claude-3-5-sonnet@20240620 (Vertex), claude-3-5-sonnet-latest.
_SNAPSHOT = re.compile(r"(?:[-@](?:\d{8}|\d{4}-\d{2}-\d{2})|-latest|-v\d+(?::\d+)?)$")


def model_names(model: str) -> list[str]:
    """The names a model may be priced under, most specific first: as given, without lcrag's ``openai:...@URL``,
    without a provider's ``org/`` prefix, then without a snapshot date or ``-latest`` (a dated snapshot listed on
    its own, like gpt-4o-2024-05-13, is found before its alias)."""
    names = [model, model_key(model)]
    bare = names[-1].rsplit("/", 1)[-1]
    names.append(bare)
    while (shorter := _SNAPSHOT.sub("", bare)) != bare:
        names.append(bare := shorter)
    return list(dict.fromkeys(names))


class PriceTable:
    def __init__(self, prices: Mapping[str, Price] | None = None):
        self.prices = dict(BUILT_IN if prices is None else prices)

    @classmethod
    def load(cls, path: str | Path | None) -> PriceTable:
        """The built-in table, with a TOML/YAML file's models (``[models."NAME"] input = .. cached_input = ..
        output = ..``) added over it; any mistake is one line naming ``FILE: models.NAME.key``."""
        table = cls()
        if path is None:
            return table
        from lcrag.pipeline.config import ConfigFileError, read_run_file

        data = read_run_file(Path(path))
        unknown = set(data) - {"models", "currency"} if isinstance(data, dict) else {"(not a table)"}
        if unknown or not isinstance(data.get("models"), dict):
            raise ConfigFileError(f"{path}: a prices file has a `models` table (and optionally currency = \"USD\"); "
                                  f"got {', '.join(sorted(map(str, unknown))) or 'no models'}")
        if data.get("currency", "USD") != "USD":
            raise ConfigFileError(f"{path}: currency: only USD is supported, got {data['currency']!r}")
        for name, entry in data["models"].items():
            table.prices[str(name)] = _price(path, str(name), entry)
        return table

    def get(self, model: str) -> Price | None:
        """The price of ``model`` under its own name, else under the name it is a dated snapshot of."""
        return next((self.prices[n] for n in model_names(model) if n in self.prices), None)

    def require(self, model: str) -> Price:
        price = self.get(model)
        if price is None:
            raise OptionError(f"--price-as: no price for {model!r}; known: {', '.join(sorted(self.prices))} "
                              "(or add it with --prices FILE)")
        return price


def _price(path: str | Path, name: str, entry: Any) -> Price:
    where = f"{path}: models.{name}"
    if not isinstance(entry, dict):
        raise OptionError(f"{where}: must be a table of {', '.join(_KEYS)}")
    extra = set(entry) - set(_KEYS)
    if extra:
        raise OptionError(f"{where}.{sorted(extra)[0]}: unknown key; the keys are {', '.join(_KEYS)}")
    values = {}
    for key in _KEYS:
        value = entry.get(key, entry.get("input") if key == "cached_input" else None)
        if value is None:
            raise OptionError(f"{where}.{key}: missing (USD per million tokens)")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise OptionError(f"{where}.{key}: must be a number ≥ 0 (USD per million tokens), got {value!r}")
        values[key] = float(value)
    return Price(**values)


def calls_cost(calls: Iterable[Any], table: PriceTable, price_as: str | None = None) -> float | None:
    """The money cost of LLM calls (LLMCall objects or their dicts in evaluation rows); None when a call's model is
    unpriced. ``price_as`` prices every call at that model's price."""
    total = 0.0
    for call in calls:
        get = call.get if isinstance(call, dict) else lambda key, c=call: getattr(c, key, 0)
        price = table.require(price_as) if price_as else table.get(str(get("model") or ""))
        if price is None:
            return None
        total += price.cost(int(get("prompt_tokens") or 0), int(get("completion_tokens") or 0),
                            int(get("cached_prompt_tokens") or 0))
    return total
