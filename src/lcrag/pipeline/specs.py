"""One question's choices, resolved once into frozen, hashable specs built from the registries.

A question chooses its strategy, its retriever, how the retrieved chunks are assembled, and each part's options. The
:class:`QuestionSpec` holds all of it: a strategy spec and a retriever spec (:class:`lcrag.core.registry.PartSpec`: the
part's name and every option it declares, defaults filled), the assembly (k, budget) and what shapes the prompt.
Every cache of built things (strategies, answering contexts, retrievers) is keyed on the specs it depends on, so two
questions share something exactly when their choices make it the same; a setting a part declares reaches the part
without any list naming it.

A setting of :class:`~lcrag.pipeline.config.Settings` is an alias of the option of the same name (``window`` of the
sentence-window retriever, ``order``, ``route_threshold``, ``router``, ``lc_share`` and ``cache_aware`` of Self-Route,
``route_threshold`` of the cascade: one name for one idea); a value in ``Settings.options`` wins over the setting.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from lcrag.assembly import ContextAssembler
from lcrag.pipeline.config import Settings
from lcrag.core.registry import RETRIEVERS, STRATEGIES, Part, PartSpec, check_part_options
from lcrag.strategies import PromptSet

StrategySpec = PartSpec  # kind "strategy"
RetrieverSpec = PartSpec  # kind "retriever"
# The settings a part's option may alias, with their defaults (not the choice of part itself, nor the options table).
_SETTING_DEFAULTS = {f.name: getattr(Settings(), f.name) for f in fields(Settings)
                     if f.name not in ("options", "strategy", "retriever")}


@dataclass(frozen=True)
class QuestionSpec:
    """How one question is answered, every choice resolved: equal specs answer alike over the same document."""

    strategy: StrategySpec
    retriever: RetrieverSpec
    assembler: ContextAssembler  # k and budget; the order is the strategy's option
    chunking: str
    max_tokens: int
    prompts: PromptSet
    unit: str | None
    condense: str
    history_turns: int

    @property
    def context_key(self) -> tuple:
        """What shapes an answering context over a document (besides the document): everything but the strategy
        and how a follow-up is made to stand alone."""
        return (self.chunking, self.retriever, self.assembler, self.max_tokens, self.prompts, self.unit)


def part_choices(settings: Settings, part: Part) -> dict[str, Any]:
    """The options ``part`` declares, as the settings give them: ``options`` first, then the setting of the same
    name when it was set (a setting left at its default leaves the option at the part's own: LongRAG's
    ``k`` of None means "as many units as fit the budget" when a budget is set)."""
    given: dict[str, Any] = {}
    for option in part.options:
        if option.name in settings.options:
            given[option.name] = settings.options[option.name]
        elif option.name in _SETTING_DEFAULTS and getattr(settings, option.name) != _SETTING_DEFAULTS[option.name]:
            given[option.name] = getattr(settings, option.name)
    return given


def resolve(settings: Settings, strategy: str | None = None) -> QuestionSpec:
    """The settings' choices for one question (``strategy``: another strategy than the settings'), checked by the
    parts that declare them."""
    name = strategy or settings.strategy
    strategy_part, retriever_part = STRATEGIES.get(name), RETRIEVERS.get(settings.retriever)
    check_part_options(settings.options, [strategy_part, retriever_part])  # one neither takes: refused, naming both
    return QuestionSpec(
        strategy=strategy_part.spec(part_choices(settings, strategy_part)),
        retriever=retriever_part.spec(part_choices(settings, retriever_part)),
        assembler=ContextAssembler(k=settings.k, budget=settings.budget),
        chunking=settings.chunking_for(name),
        max_tokens=settings.max_tokens,
        prompts=settings.prompts,
        unit=settings.unit,
        condense=settings.condense,
        history_turns=settings.history_turns,
    )


def frozen(value: object) -> object:
    """A choice's value as a key: a table as its sorted items, a list as a tuple (a hostile value may be either,
    refused only once the settings check it: the key must be made first)."""
    if isinstance(value, Mapping):
        return tuple(sorted((str(name), frozen(item)) for name, item in value.items()))
    if isinstance(value, (list, tuple, set)):
        return ("list", tuple(frozen(item) for item in value))
    return value
