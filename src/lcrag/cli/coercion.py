"""Parameter values that already have their type skip typer's coercion.

Typer (from 0.2x) coerces every parameter's value through a pydantic TypeAdapter, its default included, and builds
the adapter even for a value of None: running `lcrag ask` built some 40 adapters and imported pydantic, about 0.1 s
of a cached ask, more than reading its index. A value that is already of its parameter's type (a default, a string
for a string option, a plain number within its bounds, a path) is returned here as typer's coercion would return it;
any other value (a choice, a number out of its bounds, a custom parser...) goes to typer's own coercion, built when
first needed, so its errors read as before. With a typer that has no such coercion, nothing is changed."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, get_args, get_origin

WHOLE_NUMBER = re.compile(r"[+-]?\d+")
DECIMAL_NUMBER = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
NOT_READY = object()  # a value this module leaves to typer's coercion


def prefer_typed_values(params: list) -> None:
    """Gives each typer parameter in ``params`` a :class:`TypedValuesFirst` coercion (in place of the one typer
    builds on first use); the parameters of a typer without ``get_runtime_param`` are left alone."""
    for param in params:
        if hasattr(param, "get_runtime_param") and getattr(param, "_runtime_param", NOT_READY) is None:
            param._runtime_param = TypedValuesFirst(param)


class TypedValuesFirst:
    """One parameter's coercion (typer's ``RuntimeParam.coerce``): a value ready in its type is returned as it is,
    or as typer would convert it; others go to typer's own coercion of the parameter."""

    def __init__(self, param):
        self.param = param
        self.typer_coercion = None

    def coerce(self, value: Any, param, ctx) -> Any:
        if value is None:  # as typer: no value, or none of a repeated option
            return () if param.multiple or param.nargs == -1 else None
        ready = self.ready(value, param, ctx)
        if ready is not NOT_READY:
            return ready
        if self.typer_coercion is None:
            from typer._coercion import build_runtime_param

            self.typer_coercion = build_runtime_param(self.param.type_descriptor)
        return self.typer_coercion.coerce(value, param=param, ctx=ctx)

    def ready(self, value: Any, param, ctx) -> Any:
        """The coerced value, or NOT_READY when typer's coercion must make it."""
        descriptor = self.param.type_descriptor
        info = descriptor.parameter_info
        if info.parser is not None or getattr(info, "click_type", None) is not None or descriptor.file_annotation:
            return NOT_READY
        annotation = descriptor.annotation
        if get_origin(annotation) is not list:
            return ready_item(annotation, info, value, param, ctx)
        if not isinstance(value, (list, tuple)):
            return NOT_READY
        (item_type,) = get_args(annotation)
        items = [ready_item(item_type, info, item, param, ctx) for item in value]
        return NOT_READY if any(item is NOT_READY for item in items) else items


def ready_item(annotation: Any, info, value: Any, param, ctx) -> Any:
    """One value of type ``annotation`` as typer's coercion gives it, or NOT_READY."""
    if annotation is str or annotation is bool:
        return value if type(value) is annotation else NOT_READY
    if annotation is int or annotation is float:
        return number_within(annotation, info, value)
    if isinstance(annotation, type) and issubclass(annotation, Path) and info.path_type is None:
        if isinstance(value, str):
            value = annotation(value)  # what typer's pydantic adapter makes of a string
        if not isinstance(value, annotation):
            return NOT_READY
        from typer._param_types import coerce_cli_path

        return coerce_cli_path(value, info, path_type=annotation, param=param, ctx=ctx)  # typer's checks of a path
    return NOT_READY


def number_within(kind: type, info, value: Any) -> Any:
    """``value`` as an int or float within the parameter's bounds, or NOT_READY (typer then converts it, clamps it
    or says why it is refused)."""
    if isinstance(value, str):
        pattern = WHOLE_NUMBER if kind is int else DECIMAL_NUMBER
        value = kind(value) if pattern.fullmatch(value) else NOT_READY
    elif type(value) is int or (kind is float and type(value) is float):
        value = kind(value)
    else:
        value = NOT_READY
    if value is NOT_READY:
        return NOT_READY
    below = info.min is not None and value < info.min
    above = info.max is not None and value > info.max
    return NOT_READY if below or above else value
