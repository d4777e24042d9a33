"""The command-line flags of the declared per-question settings (:mod:`lcrag.core.question_settings`): a question
command (``ask``, ``eval``, ``chat``) gets a flag for each declared setting it does not spell out itself, so a setting declared
once is a flag of every question command. A command spells one out where its form differs (``eval``'s
comma-separated ``-k`` of a matrix) or its meaning (``--router``: a file on the command line, a name the server
offers over HTTP)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterable
from typing import Annotated, Any, Optional

import typer

from lcrag.cli.flags import READER_FLAGS
from lcrag.core.options import declared_value, longrag_choices
from lcrag.core.question_settings import ALL_PARTS, QUESTION_SETTINGS, QuestionSetting
from lcrag.core.registry import CHUNKERS, RETRIEVERS, STRATEGIES


def _listed(lists: str) -> str:
    """The names a flag's help lists, each with its help where a registry has one (a plugin's included)."""
    if lists == "units":
        return ", ".join(longrag_choices("unit"))
    return {"strategies": STRATEGIES, "retrievers": RETRIEVERS, "chunkers": CHUNKERS}[lists].describe()


def flag_option(setting: QuestionSetting) -> Any:
    """``Annotated[type, typer.Option(...)]`` of one declared setting: its flag, help, choices and bounds."""
    help_text = setting.help if setting.parts != ALL_PARTS else setting.help[:1].upper() + setting.help[1:]
    if setting.choices:
        help_text += f" ({', '.join(setting.choices)})"
    if setting.lists:
        help_text += f"; one of: {_listed(setting.lists)}"
    if setting.parts != ALL_PARTS:
        help_text = f"{', '.join(setting.parts)}: {help_text}"
    kind = Optional[setting.kind] if setting.nullable else setting.kind

    def checked(value: Any) -> Any:
        return declared_value(setting, value)

    # Checked by the declaration, as the settings check it: the same one-line message, naming the flag (exit 2).
    return Annotated[kind, typer.Option(*setting.flags, help=help_text + ".", callback=checked)]


def question_flags(command_name: str, declared: Iterable[QuestionSetting] = QUESTION_SETTINGS,
                   without: Iterable[str] = ()) -> Callable[[Callable], Callable]:
    """A decorator: the command ``lcrag COMMAND_NAME`` takes, after its own parameters, a flag for each declared
    setting it is declared for and the reader flags (:data:`lcrag.cli.flags.READER_FLAGS`), each unless it takes it
    already (or names it in ``without``: one it sets another way). Their values reach it only through
    ``ctx.params`` (the configuration is built from those by :func:`lcrag.cli.flags.config_from_flags`), never as
    arguments."""
    def add_flags(command: Callable) -> Callable:
        signature = inspect.signature(command, eval_str=True)  # the typer annotations as objects: kept as given
        taken = set(signature.parameters) | set(without)
        reader = [(name, option, default) for name, option, default in READER_FLAGS if name not in taken]
        taken |= {name for name, _, _ in READER_FLAGS}  # --router: a file on the command line, as a reader flag
        added = [(s.name, flag_option(s), s.default) for s in declared
                 if command_name in s.commands and s.name not in taken] + reader
        parameters = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=option, default=default)
                      for name, option, default in added]

        @functools.wraps(command)
        def run(*args: Any, **kwargs: Any) -> Any:
            for name, _, _ in added:
                kwargs.pop(name, None)
            return command(*args, **kwargs)

        run.__signature__ = signature.replace(parameters=[*signature.parameters.values(), *parameters])
        run.__annotations__ = {**command.__annotations__, **{p.name: p.annotation for p in parameters}}
        return run
    return add_flags
