"""One configuration, split by concern (as ColBERT's): small frozen dataclasses, each validated once when built.

The Python API (:class:`lcrag.pipeline.pipeline.Settings` is their flat view and validates through them), the CLI, run files
(YAML or TOML, ``lcrag ask|eval --config FILE``) and the service share them, so every front end refuses the same
values with the same reason. A run file has one table per concern (``reader``, ``embedder``, ``chunking``,
``retrieval``, ``strategy``, ``cache``, ``eval``) holding the fields of that concern's class; an invalid file is
refused in one line, ``FILE: section.key: reason``. :meth:`Config.to_dict` (no API key, URLs redacted) is what a run
or an index stores about the configuration that built it.
"""

from __future__ import annotations

import tomllib
import types
import typing
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from lcrag.documents.files import check_regular_file, decode_text, read_regular_file
from lcrag.chunking.spec import FALLBACK_CHUNKING, parse_chunking
from lcrag.core.errors import LcragError, OptionError
from lcrag.core.options import (EvalOptions, SettingError, at_least, at_most, declared_value, in_range, longrag_choices,
                                one_of)
from lcrag.core.question_settings import declared_fields, in_section
from lcrag.readers import parse_reader_spec
from lcrag.core.http_client import DEFAULT_TIMEOUT, split_base_urls
from lcrag.readers.pool import DEFAULT_BACKOFF, DEFAULT_MAX_BACKOFF
from lcrag.core.redaction import redact_spec, redact_url
from lcrag.core.registry import READERS, RETRIEVERS, STRATEGIES, check_part_options
from lcrag.retrieval.embedders import parse_embedder_spec
from lcrag.strategies import PromptSet, needs_corpus


# The largest reader window and answer, in tokens (16M: beyond any model's; a value past it is a typo or an attack,
# which an embedded reader would otherwise try to allocate).
MAX_WINDOW_TOKENS = 1 << 24


class ConfigFileError(OptionError):
    """A run file that cannot be used: ``FILE: section.key: reason`` (one line)."""


@contextmanager
def _about(setting: str) -> Iterator[None]:
    """Tags an error from a check with the setting it is about, so that a run file can say ``section.key``; the
    message stays the check's own, which the CLI and the Python API show as it is."""
    try:
        yield
    except LcragError as exc:
        if not hasattr(exc, "setting"):
            exc.setting = setting  # type: ignore[attr-defined]
        raise


def _check_declared(section: object, name: str) -> None:
    """Each per-question setting the section ``name`` holds within its declared bounds or choices (one line naming
    it); the section checks what the declaration cannot say (registry names, settings that go together)."""
    for setting in in_section(name):
        declared_value(setting, getattr(section, setting.name))


@dataclass(frozen=True)
@declared_fields("reader")  # max_tokens: how long one answer may be
class ReaderConfig:
    """The answering reader (LLM) and how it is reached."""

    llm: str = "smollm2"
    # The reader's server; several separated by commas (in a run file, a list too) are a pool serving one model.
    base_url: str | None = field(default=None, metadata={"joined": ","})
    api_key: str | None = field(default=None, repr=False)  # never shown or stored: reprs end up in logs
    context_window: int | None = None
    tokenizer: str | None = None  # tokenizer.json for servers without /tokenize
    threads: int | None = None
    # Seconds one HTTP call to a reader or embedder server may take, retries included (a silent server fails then).
    timeout: float = DEFAULT_TIMEOUT
    # A pool of servers: seconds a failing one is skipped at first, doubled at each failure in a row up to the max.
    backoff: float = DEFAULT_BACKOFF
    max_backoff: float = DEFAULT_MAX_BACKOFF
    # Calls one OpenAI-compatible server is sent at once (None: 4); set it to what the server runs together
    # (llama.cpp's --parallel, more for vLLM): it is how many questions the service answers at once per server.
    server_slots: int | None = None

    def __post_init__(self) -> None:
        at_least("context_window", self.context_window, 1, optional=True)
        at_least("server_slots", self.server_slots, 1, optional=True)
        at_least("threads", self.threads, 1, optional=True)
        if isinstance(self.timeout, bool) or not isinstance(self.timeout, (int, float)) or not 0 < self.timeout < 1e9:
            raise SettingError("timeout", f"must be a number of seconds above 0 and below 1e9, got {self.timeout!r}")
        _check_declared(self, "reader")
        at_most("context_window", self.context_window, MAX_WINDOW_TOKENS, optional=True)
        if self.context_window is not None and self.context_window <= self.max_tokens:
            # The answer is generated inside the window, after the prompt.
            raise SettingError("context_window", f"must be above max_tokens ({self.max_tokens}), "
                                                 f"got {self.context_window}")
        # Names are checked without loading anything: a typo fails now, not after an hour of indexing.
        with _about("llm"):
            parse_reader_spec(self.llm)
        self._check_servers()
        if self.tokenizer:
            with _about("tokenizer"):
                check_regular_file(Path(self.tokenizer))

    def _check_servers(self) -> None:
        """The base URLs (each one, when several make a pool) and how long a failing server of a pool is skipped."""
        if self.base_url is not None:
            if not isinstance(self.base_url, str):
                raise SettingError("base_url", f"must be a URL, or several separated by commas, got {self.base_url!r}")
            with _about("base_url"):
                split_base_urls(self.base_url)
        for name, most in (("backoff", 3600), ("max_backoff", 86400)):
            if getattr(self, name) is None:
                raise SettingError(name, "must be a number of seconds, got None")
            in_range(name, getattr(self, name), 0.01, most)
        if self.max_backoff < self.backoff:
            raise SettingError("max_backoff", f"must be at least the back-off it starts from ({self.backoff:g}), "
                                              f"got {self.max_backoff:g}")

    def reader_endpoint(self) -> dict[str, Any]:
        """How a reader of these settings is reached, as :func:`lcrag.readers.make_reader` takes it: the server or
        pool of servers, the key, threads, the deadline, how long a pool skips a failing server and how many calls
        each server is sent at once."""
        return {"base_url": self.base_url, "api_key": self.api_key, "threads": self.threads, "timeout": self.timeout,
                "backoff": self.backoff, "max_backoff": self.max_backoff, "server_slots": self.server_slots}

    def to_dict(self) -> dict:
        values = _plain(self)
        del values["api_key"]
        return {**values, "llm": redact_spec(self.llm), "base_url": redact_url(self.base_url)}


@dataclass(frozen=True)
class EmbedderConfig:
    embedder: str = "minilm"

    def __post_init__(self) -> None:
        with _about("embedder"):
            parse_embedder_spec(self.embedder)

    def to_dict(self) -> dict:
        return {"embedder": redact_spec(self.embedder)}


@dataclass(frozen=True)
@declared_fields("chunking")  # chunking: words:300 | tokens:128 | sentence-splitter:600:100; None: the strategy's own
class ChunkingConfig:
    def __post_init__(self) -> None:
        _check_declared(self, "chunking")
        if self.chunking is not None:
            parse_chunking(self.chunking)

    def to_dict(self) -> dict:
        return _plain(self)


@dataclass(frozen=True)
@declared_fields("retrieval")  # retriever, k, budget, order, window, tree_navigation, unit
class RetrievalConfig:
    # Who writes RAPTOR and tree-index summaries; None: the answering reader. As in the RAPTOR paper (one summarizer,
    # many readers), a tree built once serves readers of any size.
    summary_llm: str | None = field(default=None, metadata={"per_question": False})  # the pipeline's second reader

    def __post_init__(self) -> None:
        _check_declared(self, "retrieval")
        one_of("retriever", self.retriever, RETRIEVERS.names())
        if self.unit is not None:
            from lcrag.chunking.units import UNIT_KINDS  # only when given: the CLI starts without it

            one_of("unit", self.unit, UNIT_KINDS)
        if self.summary_llm is not None:
            with _about("summary_llm"):
                parse_reader_spec(self.summary_llm)

    def to_dict(self) -> dict:
        return {**_plain(self), "summary_llm": redact_spec(self.summary_llm)}


@dataclass(frozen=True)
@declared_fields("strategy")  # strategy, and Self-Route's routing and a conversation's: lcrag.core.question_settings
class StrategyConfig:
    prompts: PromptSet = field(default_factory=PromptSet)
    # The JSON file the prompts came from, if any: a run file names the file, and to_dict() gives the name back.
    prompts_file: Path | None = field(default=None, metadata={"in_file": False})

    def __post_init__(self) -> None:
        _check_declared(self, "strategy")
        one_of("strategy", self.strategy, STRATEGIES.names())  # one that cannot read the source is refused then
        self._check_share()
        if self.router is not None:
            from lcrag.strategies.routing.learned import Router

            Router.load(self.router)  # a file that is not a router: one line now, before any model loads
        if not isinstance(self.prompts, PromptSet):
            raise SettingError("prompts", f"must be a PromptSet, got {type(self.prompts).__name__}")

    def _check_share(self) -> None:
        for name in ("lc_share", "lc_cost_share"):
            if getattr(self, name) is not None and self.router is None:
                raise SettingError(name, "needs a router (--router lara, or a file from `lcrag route fit`)")
        chosen = [n for n in ("route_threshold", "lc_share", "lc_cost_share") if getattr(self, n) is not None]
        if self.router is not None and len(chosen) > 1:
            raise SettingError(chosen[1], "cannot be set with {other} as well: each sets where the router goes to "
                                          "LC, choose one", other=chosen[0])

    def to_dict(self) -> dict:
        if self.prompts_file is not None:
            prompts: object = str(self.prompts_file)
        else:
            prompts = asdict(self.prompts) if self.prompts != PromptSet() else None
        return {"strategy": self.strategy, "prompts": prompts}


@dataclass(frozen=True)
class CacheConfig:
    cache: bool = True  # the completion cache
    cache_dir: Path | None = None  # None: LCRAG_CACHE_DIR or the user cache directory

    def to_dict(self) -> dict:
        return _plain(self)


@dataclass(frozen=True)
class PartOptions:
    """Options that strategies and retrievers declare (:attr:`lcrag.core.registry.Part.options`), set by name: cascade's
    ``widen``, a plugin's own. A run file's ``options`` table, ``--option NAME=VALUE`` and the service's ``options``
    field all land here; each name must be some strategy's or retriever's option and its value valid for the parts
    that declare it. The chosen parts check again when they are made (an option neither takes is refused)."""

    options: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.options, Mapping):
            raise SettingError("options", f"must be a table of NAME = VALUE, got {self.options!r}")
        if not self.options:
            return
        parts = [*STRATEGIES.parts(), *RETRIEVERS.parts()]
        # A retriever's option may be set here too (window, tree_navigation: plain retriever options, their settings
        # are aliases); a routing setting may not: its own field is checked its own way (a router by name).
        retrievers = {o.name for p in parts if p.kind == RETRIEVERS.kind for o in p.options}
        for name in self.options:
            if name in _SECTION_OF and name not in retrievers:
                raise SettingError("options", f"{name} has a setting of its own: set {name}")
        known = sorted({o.name for p in parts for o in p.options} - (set(_SECTION_OF) - retrievers))
        for name in self.options:
            if not any(p.option(name) for p in parts):
                raise SettingError("options", f"{name!r} is no strategy's or retriever's option; they are "
                                              f"{', '.join(known) or 'none'}")
        check_part_options(self.options, parts)

    def to_dict(self) -> dict:
        return dict(self.options)


@dataclass(frozen=True)
class EvalConfig(EvalOptions):
    """What only ``lcrag eval`` reads: the dataset, the run directory and the matrix of runs (its k values, budgets,
    limit and concurrency are :class:`~lcrag.core.options.EvalOptions`', checked there)."""

    dataset: Path | None = None
    out: Path | None = None
    format: str | None = None  # None: from the dataset's path
    strategies: tuple[str, ...] = ("lc", "rag", "self-route")
    retrievers: tuple[str, ...] = ("bm25",)
    filter_closed_book: bool = False
    drop_closed_book: bool = False
    skip_bad: bool = False
    corpus: Path | None = None
    units: tuple[str, ...] = ("grouped",)

    def __post_init__(self) -> None:
        super().__post_init__()
        with _about("strategies"):
            for name in self.strategies:
                STRATEGIES.check(name)
        with _about("retrievers"):
            check_eval_retrievers(self.strategies, self.retrievers)
        with _about("units"):
            units = longrag_choices("unit")  # the corpus units (UNIT_KINDS), as the longrag strategy registered them
            for name in self.units:
                if name not in units:
                    raise OptionError(f"unknown unit {name!r}; choose one of {', '.join(units)}")

    def to_dict(self) -> dict:
        return _plain(self)


def check_eval_retrievers(strategies: tuple[str, ...], retrievers: tuple[str, ...]) -> None:
    """Each retriever of an eval matrix, checked against the retrievers' registry; when a corpus-backed strategy
    (LongRAG) is in the matrix, against the corpus index's scorers instead, which it retrieves with."""
    corpus_backed = [name for name in strategies if needs_corpus(name)]
    if corpus_backed:
        scorers = longrag_choices("scorer")  # SCORERS, as the longrag strategy registered them
        for name in retrievers:
            if name not in scorers:
                raise OptionError(f"unknown retriever {name!r}; choose one of {', '.join(scorers)} (the corpus "
                                  f"index's scorers, as {corpus_backed[0]} reads a corpus)")
        return
    for name in retrievers:
        RETRIEVERS.check(name)


SECTIONS: dict[str, type] = {
    "reader": ReaderConfig, "embedder": EmbedderConfig, "chunking": ChunkingConfig, "retrieval": RetrievalConfig,
    "strategy": StrategyConfig, "options": PartOptions, "cache": CacheConfig, "eval": EvalConfig,
}
# The sections a Pipeline reads (Settings is their flat view); field names are unique across all sections.
SETTINGS_SECTIONS = ("strategy", "retrieval", "chunking", "reader", "embedder", "cache", "options")
# A section whose keys are free (checked by the parts), written in a run file as its values themselves.
_FREE_SECTIONS = {"options": "options"}
_SECTION_OF = {f.name: name for name, cls in SECTIONS.items() for f in fields(cls)}
CONFIG_FIELDS = frozenset(_SECTION_OF)  # every field's name (the CLI's parameters with these names override them)
# The sections whose fields say how one question is answered; a field's metadata ``per_question`` says otherwise.
QUESTION_SECTIONS = ("strategy", "retrieval", "chunking", "options")
# The settings one question may choose (lcrag.pipeline.specs resolves them); the others (reader, embedder, caches) are the
# pipeline's own, shared by every question it answers. Adding a field to a question's section adds it here.
PER_QUESTION = tuple(f.name for name in SETTINGS_SECTIONS for f in fields(SECTIONS[name])
                     if f.metadata.get("per_question", name in QUESTION_SECTIONS) and f.metadata.get("in_file", True))


def _plain(section: object) -> dict:
    """A section's fields as JSON values (paths as strings, tuples as lists)."""
    def plain(value: object) -> object:
        if isinstance(value, Path):
            return str(value)
        return list(value) if isinstance(value, tuple) else value
    return {f.name: plain(getattr(section, f.name)) for f in fields(section) if f.metadata.get("in_file", True)}


def _file_keys(cls: type) -> list[str]:
    return [f.name for f in fields(cls) if f.metadata.get("in_file", True)]


@dataclass(frozen=True)
class Config:
    """Every concern's configuration; ``Config()`` is the defaults."""

    reader: ReaderConfig = field(default_factory=ReaderConfig)
    embedder: EmbedderConfig = field(default_factory=EmbedderConfig)
    chunking: ChunkingConfig = field(default_factory=ChunkingConfig)
    retrieval: RetrievalConfig = field(default_factory=RetrievalConfig)
    strategy: StrategyConfig = field(default_factory=StrategyConfig)
    options: PartOptions = field(default_factory=PartOptions)
    cache: CacheConfig = field(default_factory=CacheConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)

    @classmethod
    def from_file(cls, path: str | Path) -> Config:
        """A YAML (``.yaml``/``.yml``) or TOML (``.toml``) run file; invalid -> ``FILE: section.key: reason``."""
        data = read_run_file(Path(path))
        _check_paths(data, str(path))
        return cls.from_dict(data, source=str(path))

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], source: str = "config") -> Config:
        """A config from ``{section: {key: value}}`` (what :meth:`to_dict` gives and run files hold)."""
        if not isinstance(data, Mapping):
            raise ConfigFileError(f"{source}: must be a table of sections ({', '.join(SECTIONS)}), "
                                  f"got {type(data).__name__}")
        unknown = [name for name in data if name not in SECTIONS]
        if unknown:
            raise ConfigFileError(f"{source}: {unknown[0]}: unknown section; the sections are {', '.join(SECTIONS)}")
        sections = {}
        for name, values in data.items():
            if values is None:  # an empty section in YAML
                continue
            if not isinstance(values, Mapping):
                raise ConfigFileError(f"{source}: {name}: must be a table of keys, got {values!r}")
            if name in _FREE_SECTIONS:
                sections[name] = {_FREE_SECTIONS[name]: dict(values)}
                continue
            for key in values:
                if key not in _file_keys(SECTIONS[name]):
                    raise ConfigFileError(f"{source}: {name}.{key}: unknown key; the keys are "
                                          f"{', '.join(_file_keys(SECTIONS[name]))}")
            sections[name] = values
        return cls()._with(sections, source)

    def merged(self, overrides: Mapping[str, Any]) -> Config:
        """This config with some fields replaced, named flat (``k``, ``llm``: names are unique across sections) and
        checked as a file's values are; flags given on the command line come in here. An invalid value raises the
        settings' own error (``k must be ≥ 1, got 0``), which the CLI words as a flag."""
        by_section: dict[str, dict[str, Any]] = {}
        for key, value in overrides.items():
            if key not in _SECTION_OF:
                raise OptionError(f"unknown setting {key!r}; the settings are {', '.join(_SECTION_OF)}")
            by_section.setdefault(_SECTION_OF[key], {})[key] = value
        return self._with(by_section, None)

    def _with(self, by_section: Mapping[str, Mapping[str, Any]], source: str | None) -> Config:
        changed = {}
        for name, values in by_section.items():
            current = getattr(self, name)
            kwargs: dict[str, Any] = {}
            for key, value in values.items():
                with _in_file(source, f"{name}.{key}"):
                    kwargs.update(_typed(type(current), key, value))
            with _in_file(source, name):
                changed[name] = replace(current, **kwargs)
        return replace(self, **changed)

    def to_dict(self) -> dict:
        """``{section: {key: value}}`` as JSON values, for manifests: no API key, credentials in URLs redacted."""
        return {name: getattr(self, name).to_dict() for name in SECTIONS}

    def settings(self) -> Settings:
        """The flat :class:`Settings` a :class:`~lcrag.pipeline.pipeline.Pipeline` takes."""
        return Settings(**{f.name: getattr(getattr(self, name), f.name)
                           for name in SETTINGS_SECTIONS for f in fields(SECTIONS[name]) if _in_settings(f)})

    @classmethod
    def from_settings(cls, settings: Settings, eval: EvalConfig | None = None) -> Config:
        return cls(**settings_sections(settings), eval=eval or EvalConfig())


def settings_sections(settings: object) -> dict[str, object]:
    """Each settings concern built (and so checked) from a flat object with their fields, e.g. a Settings."""
    return {name: SECTIONS[name](**{f.name: getattr(settings, f.name) for f in fields(SECTIONS[name])
                                    if hasattr(settings, f.name)})
            for name in SETTINGS_SECTIONS}


def _in_settings(f) -> bool:
    return f.metadata.get("in_file", True)


@dataclass(frozen=True)
class Settings(StrategyConfig, RetrievalConfig, ChunkingConfig, ReaderConfig, EmbedderConfig, CacheConfig,
               PartOptions):
    """What a Pipeline answers with: every field of the strategy, retrieval, chunking, reader, embedder, cache and
    options sections, flat (``Settings(strategy='rag', k=3)``), checked by those sections. Its fields are the
    sections' own, inherited (ColBERT's way: one config made of per-concern parts), so they are written once and
    type checkers and IDEs see them all."""

    def __post_init__(self) -> None:
        """Every value is checked once, before any model loads, by the section that owns it: the CLI, the Python
        API, ``replace()`` and run files all pass through them, and the message gives the valid range. Names of
        readers, embedders and files are checked without loading anything."""
        settings_sections(self)

    def chunking_for(self, strategy: str) -> str:
        """The user's chunking, else the strategy's own (each paper's, e.g. OP-RAG's tokens:128), else words:300."""
        return self.chunking or STRATEGIES.get(strategy).meta.get("chunking", FALLBACK_CHUNKING)

    @property
    def separate_summary_llm(self) -> str | None:
        """``summary_llm`` when it names a model other than the answering reader's, else None."""
        return self.summary_llm if self.summary_llm not in (None, self.llm) else None

    def to_dict(self) -> dict:
        """``{section: {key: value}}`` of the sections it is made of (what :meth:`Config.to_dict` gives for them)."""
        return {name: section.to_dict() for name, section in settings_sections(self).items()}


@contextmanager
def _in_file(source: str | None, where: str) -> Iterator[None]:
    """A check's error, said as ``SOURCE: section.key: reason`` (unchanged when there is no source file)."""
    try:
        yield
    except ConfigFileError:
        raise
    except LcragError as exc:
        if source is None:
            raise
        setting = getattr(exc, "setting", None)
        section = where.partition(".")[0]
        key = f"{section}.{setting}" if setting and "." not in where else where
        problem = exc.problem if isinstance(exc, SettingError) else str(exc)
        raise ConfigFileError(f"{source}: {key}: {' '.join(problem.split())}") from None


# -- values: a file's (and the flags') value for a field, checked against the field's type ------------------------
_KIND_NAMES = {bool: "true or false", int: "a whole number", float: "a number", str: "a string", Path: "a path"}


def _typed(cls: type, key: str, value: Any) -> dict[str, Any]:
    """``{key: value}`` converted to the field's type (a path string to a Path, a list to a tuple); a prompts file
    is read here. Wrong type -> SettingError naming what it must be."""
    kind = typing.get_type_hints(cls)[key]
    if kind is PromptSet:
        return _prompts(value)
    optional = type(None) in typing.get_args(kind) and isinstance(kind, types.UnionType)
    joined = next((f.metadata.get("joined") for f in fields(cls) if f.name == key), None)
    if joined and isinstance(value, (list, tuple)) and value and all(isinstance(v, str) for v in value):
        value = joined.join(value)  # a list given for a field that holds its items joined (base_url's servers)
    if optional:
        kind = next(a for a in typing.get_args(kind) if a is not type(None))
        if value is None:
            return {key: None}
    if typing.get_origin(kind) is dict:
        if isinstance(value, Mapping):
            return {key: dict(value)}
        raise SettingError(key, f"must be a table of NAME = VALUE, got {value!r}")
    if typing.get_origin(kind) is tuple:
        item = typing.get_args(kind)[0]
        if isinstance(value, (list, tuple)) and all(_is(item, v) for v in value):
            return {key: tuple(item(v) for v in value)}
        raise SettingError(key, f"must be a list, each {_KIND_NAMES[item]}, got {value!r}")
    if not _is(kind, value):
        raise SettingError(key, f"must be {_KIND_NAMES[kind]}{' or null' if optional else ''}, got {value!r}")
    return {key: kind(value)}


def _is(kind: type, value: Any) -> bool:
    if kind is bool or isinstance(value, bool):
        return kind is bool and isinstance(value, bool)
    if kind is float:
        return isinstance(value, (int, float))
    if kind is Path:
        return isinstance(value, (str, Path))
    return isinstance(value, kind)


def _prompts(value: Any) -> dict[str, Any]:
    if value is None:
        return {"prompts": PromptSet(), "prompts_file": None}
    if isinstance(value, (str, Path)):
        return {"prompts": PromptSet.from_file(value), "prompts_file": Path(value)}
    if isinstance(value, Mapping):
        return {"prompts": replace(PromptSet(), **value), "prompts_file": None}
    if isinstance(value, PromptSet):
        return {"prompts": value, "prompts_file": None}
    raise SettingError("prompts", f"must be the path of a prompts JSON file, got {value!r}")


# The paths a run file may name. Relative ones are relative to the current directory, as a flag's are (not to the
# file's directory); one that is missing is refused naming the file, the key and the absolute path looked for.
_INPUT_PATHS = (("eval", "dataset"), ("eval", "corpus"), ("strategy", "prompts"), ("reader", "tokenizer"))
_MODEL_SPECS = (("reader", "llm"), ("retrieval", "summary_llm"))  # a path when the spec names a local model file
_OUTPUT_DIRS = (("eval", "out"), ("cache", "cache_dir"))  # created when missing, so only a file there is refused


def _check_paths(data: Any, source: str) -> None:
    """Every path the file names that must exist, checked before anything else reads it."""
    def value(section: str, key: str) -> str | None:
        values = data.get(section) if isinstance(data, Mapping) else None
        found = values.get(key) if isinstance(values, Mapping) else None
        return found if isinstance(found, str) and found else None  # other types: _typed says what it must be

    for section, key in _INPUT_PATHS + _MODEL_SPECS:
        path = value(section, key)
        if path is not None and (section, key) in _MODEL_SPECS:
            path = _model_file(path)
        if path is not None and not _exists(path):
            raise ConfigFileError(f"{source}: {section}.{key}: {path} does not exist{_looked_for(path)}")
    for section, key in _OUTPUT_DIRS:
        path = value(section, key)
        if path is not None and _exists(path) and not Path(path).is_dir():
            raise ConfigFileError(f"{source}: {section}.{key}: {path} is a file, not a directory{_looked_for(path)}")


def _model_file(spec: str) -> str | None:
    """The local file a reader spec names (``PATH.gguf``, ``gguf:PATH``), or None (a bundled model, a server)."""
    match = READERS.match_spec(spec)
    if match is None or match[1] is None or "suffixes" not in match[0].meta:  # only file readers have suffixes
        return None
    return match[1]


def _exists(path: str) -> bool:
    try:
        return Path(path).exists()
    except (OSError, ValueError):  # a name too long, a NUL byte: the readers say what is wrong
        return True


def _looked_for(path: str) -> str:
    if Path(path).is_absolute():
        return ""
    return (f" (looked for {Path.cwd() / path}: relative paths in a run file are relative to the current directory, "
            f"not to the file's)")


def read_run_file(path: Path) -> Any:
    """The run file's data, parsed by its suffix; a syntax error is one line with its place in the file."""
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".toml"):
        raise ConfigFileError(f"{path}: a run file is .yaml, .yml or .toml, not {suffix or 'without a suffix'!r}")
    text = decode_text(path, read_regular_file(path))
    if suffix == ".toml":
        try:
            return tomllib.loads(text)
        except tomllib.TOMLDecodeError as exc:
            raise ConfigFileError(f"{path}: invalid TOML ({exc})") from None
    import yaml  # only run files need it

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f":{mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or type(exc).__name__
        raise ConfigFileError(f"{path}{where}: invalid YAML ({problem})") from None
    return {} if data is None else data
