"""How the command line finds its subcommands: each is declared by name, module and help, and its module (with what
that imports) is imported only when the subcommand runs or its own ``--help`` is asked; ``lcrag --help`` lists them
from their declarations and imports none."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from lcrag.cli.coercion import prefer_typed_values

# Every Typer of the command line: plain help (no rich boxes), no shell-completion options, and errors left to
# lcrag.cli's own one-line messages.
TYPER_SETTINGS: dict[str, Any] = {"add_completion": False, "pretty_exceptions_enable": False, "rich_markup_mode": None}


def command_group(help: str) -> typer.Typer:
    """A group of subcommands (``lcrag corpus``, ``lcrag route``...): shown without a command, its help."""
    return typer.Typer(no_args_is_help=True, help=help, **TYPER_SETTINGS)


@dataclass(frozen=True)
class Subcommand:
    """A subcommand as ``lcrag --help`` lists it: its name, the module defining it, the name there of its function
    (one command) or of its :func:`command_group`, and its help (the first paragraph of the command's own)."""

    name: str
    module: str
    attribute: str
    help: str

    def load(self) -> TyperCommand | TyperGroup:
        """The command, its module imported now."""
        defined = getattr(importlib.import_module(self.module), self.attribute)
        if not isinstance(defined, typer.Typer):  # a function: the one command of its own Typer
            single = typer.Typer(**TYPER_SETTINGS)
            single.command(self.name)(defined)
            defined = single
        command = typer.main.get_command(defined)
        command.name = self.name
        return with_typed_values(command)

    def short_help(self, limit: int) -> str:
        """The help as a list of commands shows it, shortened to ``limit`` characters as click shortens it."""
        return TyperCommand(name=self.name, help=self.help).get_short_help_str(limit)


def with_typed_values(command):
    """``command`` with its parameters' values coerced by :mod:`lcrag.cli.coercion`, its subcommands' too."""
    prefer_typed_values(own_params(command))
    for subcommand in getattr(command, "commands", {}).values():
        with_typed_values(subcommand)
    return command


def own_params(command) -> list:
    """The command's parameters and its --help option (made on first use and kept: made now, with the default
    context's help option names, as click would make it)."""
    help_option = command.get_help_option(command.context_class(command))
    return [*command.params, *([help_option] if help_option is not None else [])]


class LoadedOnUse(Mapping):
    """Subcommands by name; a subcommand's command is made (its module imported) when it is first looked up."""

    def __init__(self, declared: tuple[Subcommand, ...]):
        self._declared = {subcommand.name: subcommand for subcommand in declared}
        self._loaded: dict[str, Any] = {}

    def __getitem__(self, name: str):
        if name not in self._loaded:
            self._loaded[name] = self._declared[name].load()
        return self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._declared)

    def __len__(self) -> int:
        return len(self._declared)


class LazyGroup(TyperGroup):
    """A Typer group whose subcommands are the class's ``subcommands``, each loaded on use (:class:`LoadedOnUse`):
    looking one up (to run it, or for its help) imports its module; listing them imports none."""

    subcommands: tuple[Subcommand, ...] = ()

    def __init__(self, **settings: Any):
        super().__init__(**settings)
        self.commands = LoadedOnUse(self.subcommands)
        prefer_typed_values(own_params(self))

    def format_commands(self, ctx, formatter) -> None:
        limit = formatter.width - 6 - max(len(subcommand.name) for subcommand in self.subcommands)
        with formatter.section("Commands"):
            formatter.write_dl([(subcommand.name, subcommand.short_help(limit)) for subcommand in self.subcommands])
