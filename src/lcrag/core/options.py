"""Option values, checked in one place: the settings objects (:class:`lcrag.pipeline.pipeline.Settings`,
:class:`EvalOptions`) call these checks, so the CLI, the Python API and a later config file or service refuse the
same values with the same reason. Messages name the setting (``max_tokens must be ≥ 1, got 0``); the CLI shows the
flag instead (``--max-tokens must be ≥ 1, got 0``) through :func:`cli_message`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from lcrag.core.errors import LcragError, OptionError
from lcrag.core.question_settings import QuestionSetting, by_name

# The command-line flag of each setting, for messages. One name per setting across all commands.
FLAGS = {
    "strategy": "--strategy", "retriever": "--retriever", "order": "--order", "chunking": "--chunking",
    "k": "-k", "budget": "--budget", "window": "--window", "tree_navigation": "--tree-navigation",
    "context_window": "--context-window", "threads": "--threads", "max_tokens": "--max-tokens",
    "limit": "--limit", "concurrency": "--concurrency", "max_file_mb": "--max-file-mb", "words": "--words",
    "piece_words": "--piece-words", "group_tokens": "--group-tokens",
    "batch": "--batch", "top": "--top", "timeout": "--timeout",
    "base_url": "--base-url", "backoff": "--backoff", "max_backoff": "--max-backoff",
    "server_slots": "--server-slots",
    "unit": "--unit", "route_threshold": "--route-threshold", "lc_share": "--lc-share",
    "lc_cost_share": "--lc-cost-share", "options": "--option",
}


class SettingError(OptionError):
    """An :class:`OptionError` about one named setting, so that each front end can name it its own way."""

    def __init__(self, setting: str, problem: str, other: str | None = None):
        """``other``: a setting the problem names as ``{other}`` (each front end names it its own way too)."""
        super().__init__(f"{setting} {_naming(problem, other)}")
        self.setting, self.problem, self.other = setting, problem, other


def _naming(problem: str, other: str | None) -> str:
    return problem if other is None else problem.replace("{other}", other)  # no format(): values may hold braces


def cli_message(exc: LcragError) -> str:
    """``exc``'s message with a setting's name replaced by its command-line flag (a declared per-question setting's
    flag is its declaration's)."""
    flags = FLAGS | {name: setting.flag for name, setting in by_name().items()}
    if isinstance(exc, SettingError) and exc.setting in flags:
        return f"{flags[exc.setting]} {_naming(exc.problem, flags.get(exc.other, exc.other))}"
    return str(exc)


def option_values(assignments: Iterable[str]) -> dict[str, object]:
    """``--option`` values, ``["widen=2", "style=short"]`` -> ``{"widen": 2, "style": "short"}``: a value is a number,
    true, false or null when it reads as one (JSON), else text. The part that declares the option checks it."""
    import json

    values: dict[str, object] = {}
    for assignment in assignments:
        name, equals, text = assignment.partition("=")
        if not equals or not name.strip().isidentifier():
            raise SettingError("options", f"must be NAME=VALUE (e.g. widen=2), got {assignment!r}")
        try:
            value = json.loads(text)
        except ValueError:
            value = text
        values[name.strip()] = value if value is None or isinstance(value, (int, float, bool, str)) else text
    return values


def at_least(name: str, value: object, low: int, optional: bool = False) -> None:
    """``value`` is a whole number ≥ ``low`` (or None, when ``optional``)."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise SettingError(name, f"must be a whole number ≥ {low}, got {value!r}")
    if value < low:
        raise SettingError(name, f"must be ≥ {low}, got {value}")


def at_most(name: str, value: object, high: int, optional: bool = False) -> None:
    """``value`` (a whole number, checked by :func:`at_least` first) is ≤ ``high``: the bound that caps the work."""
    if not (value is None and optional) and value > high:
        raise SettingError(name, f"must be ≤ {high:,}, got {value:,}")


def in_range(name: str, value: object, low: float, high: float) -> None:
    """``value`` is a number in [``low``, ``high``], or None (not set)."""
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
        raise SettingError(name, f"must be a number from {low:g} to {high:g}, got {value!r}")


def one_of(name: str, value: object, allowed: Iterable[str], optional: bool = False) -> None:
    if value is None and optional:
        return
    allowed = tuple(allowed)
    if value not in allowed:
        raise SettingError(name, f"must be one of {', '.join(allowed)}; got {value!r}")


def declared_value(setting: QuestionSetting, value: object) -> object:
    """``value`` when it is within ``setting``'s declared bounds or choices, else :class:`SettingError` naming the
    setting (the settings sections check the same bounds, with their own cross-setting rules)."""
    if value is None and setting.nullable:
        return value
    if setting.choices is not None:
        one_of(setting.name, value, setting.choices)
    elif setting.kind is int:
        at_least(setting.name, value, int(setting.low if setting.low is not None else -(1 << 62)))
        at_most(setting.name, value, int(setting.high if setting.high is not None else 1 << 62))
    elif setting.kind is float and (setting.low is not None or setting.high is not None):
        in_range(setting.name, value, setting.low if setting.low is not None else float("-inf"),
                 setting.high if setting.high is not None else float("inf"))
    elif not isinstance(value, setting.kind) or (setting.kind is not bool and isinstance(value, bool)):
        kind = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}[setting.kind]
        raise SettingError(setting.name, f"must be {kind}, got {value!r}")
    return value


@dataclass(frozen=True)
class EvalOptions:
    """The options only ``lcrag eval`` has; the CLI and :class:`lcrag.evaluation.runner.EvalRunner` check them here."""

    ks: tuple[int, ...] = (5,)
    budgets: tuple[int, ...] = ()
    limit: int | None = None  # first N questions of each dataset file
    concurrency: int = 1

    def __post_init__(self) -> None:
        for k in self.ks:
            at_least("k", k, 1)
        for budget in self.budgets:
            at_least("budget", budget, 1)
        if not self.ks and not self.budgets:
            raise SettingError("k", "needs at least one value (or give --budget)")
        at_least("limit", self.limit, 1, optional=True)
        at_least("concurrency", self.concurrency, 1)


def reader_forms() -> str:
    """How a reader spec is written, from the readers' registry, for ``--help`` texts. ``[`` is escaped: rich would
    take ``[@URL]`` for markup and drop it."""
    from lcrag.core.registry import READERS

    return READERS.spec_forms().replace("[", "\\[")


def longrag_choices(option: str) -> tuple[str, ...]:
    """The values the registered ``longrag`` strategy takes for ``option`` (``unit``: the corpus units, ``scorer``:
    the corpus index's scorers, ``task``: the turn-1 prompts), for ``--help`` texts: defined where LongRAG is."""
    from lcrag.core.registry import STRATEGIES

    found = STRATEGIES.get("longrag").option(option)
    if found is None or found.choices is None:
        raise LookupError(f"the longrag strategy has no option {option!r} with choices")
    return found.choices
