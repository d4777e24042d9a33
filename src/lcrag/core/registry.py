"""Registries: every part (strategy, retriever, reader, embedder, chunker, loader, dataset format, metric) registers
itself where it is defined, with its name, a one-line help and its options.

The CLI's choices and ``--help`` text, the settings' validation and the run files all read the registries, so no list
of names exists anywhere else: adding a part is one new file. Built-in parts are found by importing the modules of
their package (``builtins``); third-party parts come from entry points (``lcrag.strategies``, ``lcrag.retrievers``,
...), listed by name without being imported and loaded only when asked for, so start-up never pays for a plugin's
dependencies. A plugin that fails to load is reported in one line naming it, and lcrag keeps working.

    @RETRIEVERS.register("bm25", help="chunks by BM25 (tantivy)")
    class BM25Retriever: ...
"""

from __future__ import annotations

import functools
import importlib
import logging
import math
import pkgutil
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import Any, TypeVar

from lcrag.core.errors import OptionError

log = logging.getLogger("lcrag")

T = TypeVar("T")


@dataclass(frozen=True)
class Option:
    """One typed option of a part: default, valid range or choices, and help (the CLI and config files use them).

    A number option declares both bounds (a registry refuses one that does not, naming the part and the option): the
    bound is what caps the work a request can ask for, so it is held where the option is declared, before any work,
    for every front end alike. NaN and infinities are refused whatever the bounds."""

    name: str
    type: type = int
    default: Any = None
    help: str = ""
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] | None = None

    def check(self, value: Any, owner: str = "") -> Any:
        """``value`` if valid, else an :class:`OptionError` naming the option and its valid range."""
        where = f"{owner} option {self.name}" if owner else self.name
        if value is None:
            return value
        if self.choices is not None:
            if not isinstance(value, str) or value not in self.choices:
                raise OptionError(f"{where} must be one of {', '.join(self.choices)}; got {_shown(value)}")
            return value
        if self.type is str and not isinstance(value, str):
            raise OptionError(f"{where} must be text, got {_shown(value)}")
        if self.type in (int, float) and (isinstance(value, bool) or not isinstance(value, (int, float))
                                          or (self.type is int and not isinstance(value, int))
                                          or not math.isfinite(value)):
            raise OptionError(f"{where} must be a {'whole ' if self.type is int else ''}number{self._range()}, "
                              f"got {_shown(value)}")
        if self.type is bool and not isinstance(value, bool):
            raise OptionError(f"{where} must be true or false, got {_shown(value)}")
        if self.min is not None and value < self.min:
            raise OptionError(f"{where} must be ≥ {self.min:g}, got {_shown(value)}")
        if self.max is not None and value > self.max:
            raise OptionError(f"{where} must be ≤ {self.max:g}, got {_shown(value)}")
        return value

    @property
    def unbounded(self) -> bool:
        """A number option without both bounds: what a registry refuses."""
        return self.type in (int, float) and self.choices is None and (self.min is None or self.max is None)

    def _range(self) -> str:
        return f" from {self.min:g} to {self.max:g}" if self.min is not None and self.max is not None else ""


def _shown(value: Any, limit: int = 40) -> str:
    """``value`` as a message shows it: its repr, cut (a hostile value may be a megabyte long)."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text):,} characters)"


@dataclass(frozen=True)
class Part:
    """A registered part: what it is called, what it does, how to make it, what it takes."""

    kind: str
    name: str
    help: str
    factory: Callable[..., Any]
    options: tuple[Option, ...] = ()
    meta: dict[str, Any] = field(default_factory=dict, compare=False)

    def option(self, name: str) -> Option | None:
        return next((o for o in self.options if o.name == name), None)

    def check_options(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` with every unknown or out-of-range option refused (defaults filled in)."""
        known = {o.name for o in self.options}
        unknown = sorted(set(values) - known)
        if unknown:
            raise OptionError(f"{self.kind} {self.name!r} has no option {', '.join(unknown)}"
                              + (f"; it takes {', '.join(sorted(known))}" if known else ""))
        return {o.name: o.check(values.get(o.name, o.default), f"{self.kind} {self.name!r}") for o in self.options}

    def create(self, *args: Any, **kwargs: Any) -> Any:
        return self.factory(*args, **kwargs)

    def spec(self, given: Mapping[str, Any] = {}) -> PartSpec:  # noqa: B006 - read, never changed
        """This part with the options it declares taken from ``given`` (others ignored), checked, defaults filled:
        a frozen, hashable choice that equals another exactly when the part they make behaves the same."""
        chosen = {o.name: given[o.name] for o in self.options if given.get(o.name) is not None}
        return PartSpec(self.kind, self.name, tuple(sorted(self.check_options(chosen).items())))


@dataclass(frozen=True)
class PartSpec:
    """A part chosen with its options (:meth:`Part.spec`): what a cache of built parts is keyed on. A strategy's
    spec is a ``StrategySpec``, a retriever's a ``RetrieverSpec``: the same class, told apart by ``kind``."""

    kind: str
    name: str
    options: tuple[tuple[str, Any], ...] = ()

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.options)


def check_part_options(values: Mapping[str, Any], parts: Iterable[Part]) -> None:
    """Options set by name (``widen=2``), each taken by at least one of ``parts`` and valid for every one of them that
    declares it; else an :class:`OptionError` saying which parts take which options."""
    parts = list(parts)
    for name, value in values.items():
        if value is not None and not isinstance(value, (str, int, float, bool)):
            raise OptionError(f"option {name} must be a string, number or true/false, got {type(value).__name__}")
        takers = [p for p in parts if p.option(name) is not None]
        if not takers:
            offered = sorted({f"{o.name} ({p.kind} {p.name})" for p in parts for o in p.options})
            raise OptionError(f"no {' or '.join(dict.fromkeys(f'{p.kind} {p.name!r}' for p in parts))} takes an option "
                              f"{name!r}" + (f"; the options are {', '.join(offered)}" if offered else ""))
        for part in takers:
            part.option(name).check(value, f"{part.kind} {part.name!r}")


class Registry:
    """The parts of one kind. ``builtins`` are packages whose modules are imported on first use (they register
    themselves); ``group`` is the entry-point group third-party packages add parts to."""

    def __init__(self, kind: str, group: str, builtins: Iterable[str] = (),
                 contract: Callable[[Part], str | None] | None = None):
        """``contract``: what a part of this kind must be, checked when it registers (the reason it is not)."""
        self.kind = kind
        self._contract = contract
        self.group = group
        self._builtin_packages = tuple(builtins)
        self._parts: dict[str, Part] = {}
        self._builtins_loaded = False
        self._failed: set[str] = set()
        self._lock = threading.RLock()

    # -- registration -------------------------------------------------------------------------------------------
    def register(self, name: str, help: str, options: Iterable[Option] = (), **meta: Any) -> Callable[[T], T]:
        """Decorator: register a class or factory function under ``name``; returns it unchanged."""

        def add(factory: T) -> T:
            self.add(Part(self.kind, name, help, factory, tuple(options), dict(meta)))
            return factory

        return add

    def add(self, part: Part) -> None:
        broken = unbounded_options(part) or (self._contract(part) if self._contract else None)
        if broken:
            qual = getattr(part.factory, "__module__", "?")
            raise OptionError(f"{self.kind} {part.name!r} ({qual}) does not follow the {self.kind} contract: {broken}")
        with self._lock:
            existing = self._parts.get(part.name)
            if existing is not None and existing.factory is not part.factory:
                qual = getattr(existing.factory, "__module__", "?")
                raise OptionError(f"{self.kind} {part.name!r} is registered twice (first by {qual})")
            self._parts[part.name] = part

    def remove(self, name: str) -> None:
        """Forget a part (tests that add a temporary one clean up with this)."""
        with self._lock:
            self._parts.pop(name, None)

    # -- lookup -------------------------------------------------------------------------------------------------
    def names(self) -> tuple[str, ...]:
        """Every part's name, built-ins first in registration order, then plugins (not imported to list them)."""
        self._load_builtins()
        plugins = [ep.name for ep in self._entry_points() if ep.name not in self._parts and ep.name not in self._failed]
        return tuple(self._parts) + tuple(sorted(set(plugins)))

    def names_except(self, **meta: Any) -> tuple[str, ...]:
        """:meth:`names` without the parts whose meta has all these values (e.g. ``reads=("corpus",)``). Plugins not yet
        imported are listed: their meta is unknown until they are used, and listing must not import them."""
        names = self.names()
        return tuple(n for n in names
                     if n not in self._parts or any(self._parts[n].meta.get(k) != v for k, v in meta.items()))

    def get(self, name: str) -> Part:
        """The part called ``name`` (a plugin is imported now); unknown names get the list of valid ones."""
        self._load_builtins()
        if name not in self._parts:
            self._load_plugin(name)
        part = self._parts.get(name)
        if part is None:
            raise OptionError(f"unknown {self.kind} {name!r}; choose one of {', '.join(self.names())}")
        return part

    def check(self, name: str) -> str:
        self.get(name)
        return name

    def __contains__(self, name: object) -> bool:
        try:
            self.get(str(name))
        except OptionError:
            return False
        return True

    def describe(self, names: Iterable[str] | None = None) -> str:
        """``name: help`` for each part (or each of ``names``), for ``--help`` texts; a plugin not yet imported gets
        the package it comes from instead of its help, so that listing it never imports it."""
        origins = {ep.name: getattr(getattr(ep, "dist", None), "name", None) for ep in self._entry_points()}
        return "; ".join(f"{n}: {self._parts[n].help}" if n in self._parts
                         else f"{n}: plugin from {origins[n]}" if origins.get(n) else n
                         for n in (self.names() if names is None else names))

    def parts(self) -> list[Part]:
        """Every part, plugins imported (for lookups by something other than the name, e.g. a loader's suffix)."""
        return [self.get(n) for n in self.names()]

    # -- specs (``prefix:rest``, an alias, or ``PATH.suffix``: readers, embedders) --------------------------------
    def match_spec(self, spec: str) -> tuple[Part, str | None] | None:
        """The part a spec names and the spec's rest (``None`` for an alias), or ``None``. Parts are tried in
        order (the ``default`` part first, then as registered), each by its meta ``aliases``, ``prefixes`` (default:
        its name) and ``suffixes``; a plugin is imported only when the spec's prefix is its name."""
        for part in self._default_first():
            matched, rest = spec_rest(part, spec)
            if matched:
                return part, rest
        prefix, colon, _ = spec.partition(":")
        if colon and prefix not in self._parts and prefix in {ep.name for ep in self._entry_points()}:
            part = self.get(prefix)
            matched, rest = spec_rest(part, spec)
            return (part, rest) if matched else None
        return None

    def spec_forms(self) -> str:
        """How specs are written, from each part's meta ``forms``, for messages: ``a, b or c``."""
        forms = [f for p in self._default_first() for f in p.meta.get("forms", (f"{p.name}:…",))]
        forms += [f"{n}:…" for n in self.names() if n not in self._parts]
        return spoken_list(forms)

    def _default_first(self) -> list[Part]:
        """The loaded parts, the one whose meta says ``default=True`` first (import order must not decide)."""
        self._load_builtins()
        return sorted(self._parts.values(), key=lambda part: not part.meta.get("default"))

    # -- loading ------------------------------------------------------------------------------------------------
    def _load_builtins(self) -> None:
        if self._builtins_loaded:
            return
        with self._lock:
            if self._builtins_loaded:
                return
            for package in self._builtin_packages:
                module = importlib.import_module(package)
                for info in pkgutil.iter_modules(getattr(module, "__path__", [])):
                    if not info.name.startswith("_"):
                        importlib.import_module(f"{package}.{info.name}")
            self._builtins_loaded = True

    def _entry_points(self) -> list:
        return list(group_entry_points(self.group))

    def _load_plugin(self, name: str) -> None:
        for ep in self._entry_points():
            if ep.name != name or name in self._failed:
                continue
            try:
                loaded = ep.load()  # importing the module registers the part; an object may also be given
            except Exception as exc:  # noqa: BLE001 - any error in third-party code: report it, keep working
                self._plugin_failed(ep, f"{type(exc).__name__}: {exc}")
                return
            if name not in self._parts and callable(loaded):
                help_text = (getattr(loaded, "__doc__", "") or "").strip().splitlines()[:1]
                self.add(Part(self.kind, name, help_text[0] if help_text else "", loaded,
                              tuple(getattr(loaded, "options", ()))))
            if name not in self._parts:  # imported, but registered something else (or nothing) under this name
                self._plugin_failed(ep, f"it registered no {self.kind} named {name!r}")
            return

    def _plugin_failed(self, ep: Any, reason: str) -> None:
        """Report a plugin that cannot be used in one line naming it (its package, entry point and reason), and
        forget its name so that it is neither listed nor tried again."""
        self._failed.add(ep.name)
        reason = " ".join(reason.split())  # one line, whatever the exception's message holds
        package = f" from {ep.dist.name}" if getattr(ep, "dist", None) is not None else ""
        log.warning("plugin %s%s (%s = %s) failed to load: %s", ep.name, package, self.group, ep.value, reason)


def unbounded_options(part: Part) -> str | None:
    """Why ``part`` may not be registered for its number options (one without a minimum and a maximum), or None."""
    unbounded = [o.name for o in part.options if o.unbounded]
    if not unbounded:
        return None
    return (f"its number option{'s' if len(unbounded) > 1 else ''} {', '.join(unbounded)} must declare min= and max= "
            "(the bound caps the work one request can ask for)")


def group_entry_points(group: str) -> tuple:
    """The installed entry points of ``group``. Every installed package is scanned once per process (a scan costs
    ~5 ms, and ``--help`` lists every registry); ``installed_entry_points.cache_clear()`` after installing one."""
    return tuple(installed_entry_points().select(group=group))


@functools.cache
def installed_entry_points():
    return entry_points()


def spec_rest(part: Part, spec: str) -> tuple[bool, str | None]:
    """Whether ``part`` reads ``spec``, and the rest: ``None`` for one of its ``aliases``, what follows
    ``prefix:`` for one of its ``prefixes``, the whole spec for one of its ``suffixes``."""
    if spec in part.meta.get("aliases", ()):
        return True, None
    for prefix in part.meta.get("prefixes", (part.name,)):
        if spec.startswith(f"{prefix}:"):
            return True, spec[len(prefix) + 1 :]
    if spec.endswith(tuple(part.meta.get("suffixes", ()))):
        return True, spec
    return False, None


def spoken_list(items: Iterable[str]) -> str:
    """``a, b or c``."""
    items = list(items)
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} or {items[-1]}"


# The registries, one per kind of part. Each names the package whose modules define its built-in parts (imported on
# first use; keep heavy imports inside functions there) and the entry-point group plugins use.
def _loader_contract(part: Part) -> str | None:
    """A loader is called with the file's path and the limits reading it must keep (``ParseLimits``: the largest file,
    its text): it takes both, as it must read within what it is given."""
    import inspect

    try:
        parameters = list(inspect.signature(part.factory).parameters.values())
    except (TypeError, ValueError):
        return None  # a callable lcrag cannot inspect: checked when it is called
    positional = [p for p in parameters if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) < 2 and not any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return "it must take (path, limits): the file and the ParseLimits to read it within"
    return None


def _strategy_contract(part: Part) -> str | None:
    """A strategy is made by ``create(**options)`` with no other argument, into an object that answers with
    ``run(ctx, question)``: a class needs that method, and no required argument its options do not give."""
    import inspect

    factory = part.factory
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):
        return None  # a callable lcrag cannot inspect: checked when it is made
    declared = {o.name for o in part.options}
    required = [p.name for p in signature.parameters.values() if p.default is inspect.Parameter.empty
                and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.name not in declared]
    if required:
        return f"it needs {', '.join(required)}, which no declared option gives (a strategy is made from its options)"
    if inspect.isclass(factory) and not callable(getattr(factory, "run", None)):
        return "it has no run(ctx, question)"
    return None


STRATEGIES = Registry("strategy", "lcrag.strategies", builtins=("lcrag.strategies", "lcrag.strategies.routing"), contract=_strategy_contract)
RETRIEVERS = Registry("retriever", "lcrag.retrievers", builtins=("lcrag.retrieval",))
READERS = Registry("reader", "lcrag.readers", builtins=("lcrag.readers",))
EMBEDDERS = Registry("embedder", "lcrag.embedders", builtins=("lcrag.retrieval",))
CHUNKERS = Registry("chunk unit", "lcrag.chunkers", builtins=("lcrag.chunking",))
LOADERS = Registry("loader", "lcrag.loaders", builtins=("lcrag.documents",), contract=_loader_contract)
# Formats and metrics name their own modules: importing all of lcrag.evaluation (runner, report) to list them would be
# slow and circular.
DATASET_FORMATS = Registry("dataset format", "lcrag.datasets", builtins=("lcrag.evaluation.datasets",))
METRICS = Registry("metric", "lcrag.metrics", builtins=("lcrag.evaluation.metrics",))
