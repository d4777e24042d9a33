"""Hostile values for every option a registered strategy or retriever declares (issue 42), generated from the
registries: a part added later is covered without a test of its own. Each case is one option of one part set to one
extreme — its maximum, the maximum + 1, 10^15, -1, NaN, a string, a list — and says whether the value is out of the
option's declared bounds (then every front end must refuse it) or within them (refused for another reason in one line,
or answered)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from lcrag.core.registry import RETRIEVERS, STRATEGIES, Option, Part

HUGE = 10**15


@dataclass(frozen=True)
class OptionCase:
    part: Part
    option: Option
    label: str
    value: object
    out_of_bounds: bool  # every front end must refuse it

    @property
    def id(self) -> str:
        return f"{self.part.kind}:{self.part.name}:{self.option.name}={self.label}"

    @property
    def strategy(self) -> str:
        """The strategy the case is asked with: its own part, or plain RAG over the retriever's."""
        return self.part.name if self.part.kind == STRATEGIES.kind else "rag"

    @property
    def retriever(self) -> str:
        return self.part.name if self.part.kind == RETRIEVERS.kind else "bm25"

    def cli_value(self) -> str:
        """The value as ``--option NAME=VALUE`` writes it (JSON for numbers and lists, as a shell user would type)."""
        if isinstance(self.value, float) and math.isnan(self.value):
            return "NaN"
        if isinstance(self.value, bool):
            return "true" if self.value else "false"
        if isinstance(self.value, list):
            return "[1, 2]"
        return str(self.value)


def extremes(option: Option) -> list[tuple[str, object, bool]]:
    """``(label, value, out of bounds)`` for one option: the valid extremes of its type, then the hostile ones."""
    hostile = [("1e15", HUGE), ("-1", -1), ("nan", float("nan")), ("list", [1, 2])]
    if option.choices is not None:
        return ([("choice", option.choices[-1], False), ("text", "no-such-choice", True)]
                + [(label, value, True) for label, value in hostile])
    if option.type is bool:
        return [("true", True, False), ("text", "yes", True)] + [(label, value, True) for label, value in hostile]
    if option.type in (int, float):
        top = option.type(option.max)
        return [("max", top, False), ("max+1", top + 1, True), ("text", "three", True),
                *[(label, value, not in_bounds(option, value)) for label, value in hostile]]
    return [("text", "no-such-thing", False)] + [(label, value, False) for label, value in hostile]


def in_bounds(option: Option, value: object) -> bool:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return False
    if option.type is int and not isinstance(value, int):
        return False
    return option.min <= value <= option.max


def option_cases() -> list[OptionCase]:
    """Every option of every registered strategy and retriever, at each of its extremes."""
    return [OptionCase(part, option, label, value, out)
            for registry in (STRATEGIES, RETRIEVERS) for part in registry.parts() for option in part.options
            for label, value, out in extremes(option)]


def one_line(text: str) -> bool:
    """A refusal a person reads: one line, no traceback."""
    text = text.strip()
    return bool(text) and "\n" not in text and "Traceback" not in text
