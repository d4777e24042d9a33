"""The per-question settings, each declared once: its name, type, default, bounds or choices, help, and which parts
read it. The service's request model (:mod:`lcrag.service.requests`), the MCP ``ask`` tool's parameters and the eval
run identity (:meth:`lcrag.evaluation.runner.EvalRunner.identity`) are built from :data:`QUESTION_SETTINGS`; the run
file's keys and :class:`lcrag.pipeline.pipeline.Settings` fields must match it (tests/unit/test_question_settings.py
checks both ways, so a setting can be neither accepted and ignored nor used and unoffered).

This module imports nothing heavy (the CLI imports it when it builds its flags): pydantic is imported only by
:func:`request_fields`, when the service builds its models. Values are checked in one place, by the settings sections
(:mod:`lcrag.pipeline.config`), which name the valid range; the bounds here are the front ends' first line.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ALL_PARTS = ("every strategy",)
QUESTION_COMMANDS = ("ask", "eval", "chat")  # the lcrag commands that ask questions


@dataclass(frozen=True)
class QuestionSetting:
    """One setting a question may choose.

    ``kind``: int, float, bool or str; ``low``/``high``: a number's bounds (None: open); ``choices``: a string's
    values when fixed here (a registry's names are checked by the settings instead: a plugin adds to them);
    ``nullable``: None means "the part's own default"; ``offered``: a client of the service (HTTP, MCP) may set it;
    ``identity_key``: the eval run identity's key that already records it (None: recorded under its own name when
    not at its default); ``commands``: the ``lcrag`` commands it is a flag of; ``parts``: the strategies or retrievers
    that read it, for help texts; ``section``: the run file's table holding it (its field is added to that
    section's class by :func:`declared_fields`)."""

    name: str
    kind: type
    default: Any
    help: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] | None = None
    nullable: bool = False
    offered: bool = True
    max_length: int = 200
    identity_key: str | None = None
    commands: tuple[str, ...] = QUESTION_COMMANDS  # the commands that take it as a flag
    parts: tuple[str, ...] = ALL_PARTS
    section: str = "strategy"  # the run file's section (table) that holds it
    short: str | None = None  # its one-letter flag beside the long one
    lists: str | None = None  # the registry whose names a flag's help lists (a plugin adds to them)

    @property
    def flag(self) -> str:
        """Its command-line flag."""
        return self.short if len(self.name) == 1 else "--" + self.name.replace("_", "-")

    @property
    def flags(self) -> tuple[str, ...]:
        """Its command-line flags: the long one, then the short one."""
        return (self.flag,) + ((self.short,) if self.short and self.short != self.flag else ())


QUESTION_SETTINGS: tuple[QuestionSetting, ...] = (
    QuestionSetting("strategy", str, "self-route", "the strategy answering", identity_key="configs", short="-s",
                    lists="strategies"),
    QuestionSetting("retriever", str, "bm25", "the retriever of the RAG step", identity_key="configs",
                    section="retrieval", short="-r", lists="retrievers"),
    QuestionSetting("k", int, 5, "chunks to retrieve", low=1, high=1000, identity_key="configs", section="retrieval",
                    short="-k"),
    QuestionSetting("budget", int, None, "retrieved-token budget instead of k", low=1, high=100_000_000,
                    nullable=True, identity_key="configs", section="retrieval"),
    QuestionSetting("order", str, None, "score or document (default: the strategy's own)", nullable=True,
                    choices=("score", "document"), identity_key="order", section="retrieval"),
    QuestionSetting("chunking", str, None, "UNIT:SIZE (e.g. words:300, tokens:128) or UNIT:SIZE:OVERLAP "
                    "(sentence-splitter:600:100); default: the strategy's own", nullable=True, offered=False,
                    identity_key="chunking", section="chunking", lists="chunkers"),
    QuestionSetting("max_tokens", int, 64, "the answer's length limit in tokens (served: up to the server's "
                    "--max-tokens)", low=1, high=1 << 24, identity_key="max_tokens", section="reader"),
    QuestionSetting("window", int, 3, "sentences either side of a hit", low=0, high=64, offered=False,
                    identity_key="retriever_options", parts=("sentence-window",), section="retrieval"),
    QuestionSetting("tree_navigation", str, "embedding", "how the tree is walked (llm: the reader picks the branch)",
                    choices=("embedding", "llm"), offered=False, identity_key="retriever_options", parts=("tree",),
                    section="retrieval"),
    QuestionSetting("unit", str, None, "over a corpus index: the units retrieved (default: the smallest built)",
                    nullable=True, offered=False, identity_key="corpus_unit", parts=("longrag",),
                    section="retrieval", lists="units"),
    QuestionSetting("route_threshold", float, None, "go to LC when the reader's probability of answering "
                    "\"unanswerable\" is >= this (0: every question; default: the written answer decides)", low=0,
                    high=1, nullable=True, identity_key="route_threshold", parts=("self-route", "cascade")),
    QuestionSetting("router", str, None, "a router the server offers (GET /v1/routers), never a path",
                    nullable=True, max_length=64, identity_key="router_sha256", parts=("self-route",)),
    QuestionSetting("lc_share", float, None, "with a router: the share of questions answered going to LC, held per "
                    "reader at run time (a shipped router holds its own)", low=0, high=1, nullable=True,
                    identity_key="lc_share", parts=("self-route",)),
    QuestionSetting("lc_cost_share", float, None, "with a router: LC's share of the prompt tokens held instead",
                    low=0, high=1, nullable=True, identity_key="lc_cost_share", parts=("self-route",)),
    QuestionSetting("cache_aware", bool, False, "once LC has read a document (its prefix cached by the server), "
                    "its next questions go straight to LC while that costs fewer uncached tokens than the RAG step",
                    identity_key="cache_aware", parts=("self-route",)),
    QuestionSetting("condense", str, "auto", "how a follow-up is made to stand alone: the reader's rewrite, "
                    "joined turns, or auto (the rewrite unless the reader is too small to write it well)",
                    choices=("auto", "reader", "join"), commands=("chat",)),
    QuestionSetting("history_turns", int, 6, "the latest messages read to make a follow-up stand alone", low=0,
                    high=10_000, offered=False, commands=("chat",)),
)


def by_name(declared: Iterable[QuestionSetting] = QUESTION_SETTINGS) -> dict[str, QuestionSetting]:
    return {setting.name: setting for setting in declared}


def offered(declared: Iterable[QuestionSetting] = QUESTION_SETTINGS) -> tuple[QuestionSetting, ...]:
    """The settings a client of the service may choose."""
    return tuple(setting for setting in declared if setting.offered)


def request_fields(declared: Iterable[QuestionSetting] = QUESTION_SETTINGS, enforced: bool = True) -> dict[str, Any]:
    """``{name: Annotated[type | None, Field(...)]}`` of the offered settings, for a pydantic model or a tool's
    parameters: each optional (None: the server's setting), with its bounds, choices and help. ``enforced=False``:
    the bounds and choices are only published in the JSON schema (a tool whose SDK would refuse a value in its own
    many-line words leaves the check to the request model, which says it in one line)."""
    from typing import Annotated, Literal

    from pydantic import Field

    fields: dict[str, Any] = {}
    for setting in offered(declared):
        kind: Any = setting.kind
        bounds: dict[str, Any] = {}
        if setting.choices is not None:
            kind, bounds = ((Literal[setting.choices], {}) if enforced
                            else (kind, {"json_schema_extra": {"enum": [*setting.choices, None]}}))
        elif kind is str:
            bounds = {"min_length": 1, "max_length": setting.max_length}
        elif kind in (int, float):
            bounds = {"ge": setting.low, "le": setting.high}
        if not enforced and setting.choices is None:
            schema_names = {"min_length": "minLength", "max_length": "maxLength", "ge": "minimum", "le": "maximum"}
            bounds = {"json_schema_extra": {schema_names[k]: v for k, v in bounds.items() if v is not None}}
        fields[setting.name] = Annotated[kind | None, Field(description=setting.help, **bounds)]
    return fields


def identity_additions(values: Mapping[str, Any], recorded: Iterable[str],
                       declared: Iterable[QuestionSetting] = QUESTION_SETTINGS) -> dict[str, Any]:
    """The eval identity's entries for declared settings that no ``recorded`` key holds yet: each by its name,
    when its value is not its default (so a run directory from before a setting existed resumes at the default)."""
    recorded = set(recorded)
    return {s.name: values[s.name] for s in declared
            if (s.identity_key or s.name) not in recorded and values[s.name] != s.default}


def declared_fields(section: str, declared: Iterable[QuestionSetting] = QUESTION_SETTINGS) -> Callable[[type], type]:
    """A class decorator, applied before ``@dataclass``: the declared settings that a run file holds in ``section``
    become fields of the class (their type, None too when nullable, and default), before those it writes itself,
    marked per-question. So the run file's keys, and :class:`lcrag.pipeline.config.Settings`, have them from the
    declaration alone."""
    from dataclasses import field

    def add(cls: type) -> type:
        own = cls.__dict__.get("__annotations__", {})
        annotations = {}
        for setting in declared:
            if setting.section == section and setting.name not in own:
                annotations[setting.name] = setting.kind | None if setting.nullable else setting.kind
                setattr(cls, setting.name, field(default=setting.default, metadata={"per_question": True}))
        cls.__annotations__ = {**annotations, **own}
        return cls
    return add


def in_section(section: str, declared: Iterable[QuestionSetting] = QUESTION_SETTINGS) -> tuple[QuestionSetting, ...]:
    """The declared settings a run file holds in ``section``."""
    return tuple(setting for setting in declared if setting.section == section)
