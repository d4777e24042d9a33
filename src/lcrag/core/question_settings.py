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

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

ALL_PARTS = ("every strategy",)


@dataclass(frozen=True)
class QuestionSetting:
    """One setting a question may choose.

    ``kind``: int, float, bool or str; ``low``/``high``: a number's bounds (None: open); ``choices``: a string's
    values when fixed here (a registry's names are checked by the settings instead: a plugin adds to them);
    ``nullable``: None means "the part's own default"; ``offered``: a client of the service (HTTP, MCP) may set it;
    ``identity_key``: the eval run identity's key that already records it (None: recorded under its own name when
    not at its default); ``on_cli``: a flag of ``lcrag ask`` and ``eval``; ``parts``: the strategies or retrievers
    that read it, for help texts."""

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
    on_cli: bool = True  # a flag of the question commands (a conversation's settings are not: none asks one)
    parts: tuple[str, ...] = ALL_PARTS

    @property
    def flag(self) -> str:
        """Its command-line flag."""
        return "-k" if self.name == "k" else "--" + self.name.replace("_", "-")


QUESTION_SETTINGS: tuple[QuestionSetting, ...] = (
    QuestionSetting("strategy", str, "self-route", "the strategy answering (lcrag strategies lists them)",
                    identity_key="configs"),
    QuestionSetting("retriever", str, "bm25", "the retriever of the RAG step", identity_key="configs"),
    QuestionSetting("k", int, 5, "chunks to retrieve", low=1, high=1000, identity_key="configs"),
    QuestionSetting("budget", int, None, "retrieved-token budget instead of k", low=1, high=100_000_000,
                    nullable=True, identity_key="configs"),
    QuestionSetting("order", str, None, "score or document (default: the strategy's own)", nullable=True,
                    choices=("score", "document"), identity_key="order"),
    QuestionSetting("chunking", str, None, "UNIT:SIZE[:OVERLAP] (default: the strategy's own)", nullable=True,
                    offered=False, identity_key="chunking"),
    QuestionSetting("max_tokens", int, 64, "the answer's length limit in tokens (served: up to the server's "
                    "--max-tokens)", low=1,
                    high=1 << 24, identity_key="max_tokens"),
    QuestionSetting("window", int, 3, "sentences either side of a hit", low=0, high=64, offered=False,
                    identity_key="retriever_options", parts=("sentence-window",)),
    QuestionSetting("tree_navigation", str, "embedding", "how the tree is walked", choices=("embedding", "llm"),
                    offered=False, identity_key="retriever_options", parts=("tree",)),
    QuestionSetting("unit", str, None, "over a corpus index: the units retrieved", nullable=True, offered=False,
                    identity_key="corpus_unit", parts=("longrag",)),
    QuestionSetting("route_threshold", float, None, "go to LC when P(unanswerable) >= this", low=0, high=1,
                    nullable=True, identity_key="route_threshold", parts=("self-route", "cascade")),
    QuestionSetting("router", str, None, "a router the server offers (GET /v1/routers), never a path",
                    nullable=True, max_length=64, identity_key="router_sha256", parts=("self-route",)),
    QuestionSetting("lc_share", float, None, "with a router: the share of questions held going to LC", low=0,
                    high=1, nullable=True, identity_key="lc_share", parts=("self-route",)),
    QuestionSetting("lc_cost_share", float, None, "with a router: LC's share of prompt tokens held", low=0, high=1,
                    nullable=True, identity_key="lc_cost_share", parts=("self-route",)),
    QuestionSetting("cache_aware", bool, False, "a document LC has read goes straight to LC while cheaper",
                    identity_key="cache_aware", parts=("self-route",)),
    QuestionSetting("condense", str, "auto", "how a follow-up is made to stand alone: the reader's rewrite, "
                    "joined turns, or auto", choices=("auto", "reader", "join"), on_cli=False),
    QuestionSetting("history_turns", int, 6, "the latest messages read to make a follow-up stand alone", low=0,
                    high=10_000, offered=False, on_cli=False),
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
