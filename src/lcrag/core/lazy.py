"""Modules imported on first use, so that importing every part (the registries do, for ``lcrag --help``) stays cheap.

numpy and httpx take ~0.1 s each to import; a command that never touches an array or the network must not pay it.
"""

from __future__ import annotations

import importlib
import types


class _LazyModule(types.ModuleType):
    """Stands for a module until an attribute is read; then imports it (under the import lock, so two threads
    import it once) and takes over its namespace, so later reads cost a plain attribute lookup."""

    def __getattr__(self, attribute: str):
        module = importlib.import_module(self.__name__)
        self.__dict__.update(module.__dict__)
        return getattr(module, attribute)


def lazy_module(name: str) -> types.ModuleType:
    """``name``, imported when first used. Not placed in ``sys.modules``: other importers get the real module."""
    return _LazyModule(name)
