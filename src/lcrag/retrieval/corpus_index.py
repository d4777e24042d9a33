"""The corpus index, by its former name: it now lives in :mod:`lcrag.retrieval.corpus`, split by concern."""

from lcrag.retrieval import corpus as _corpus
from lcrag.retrieval.corpus import *  # noqa: F403  (the old import path keeps working)

__all__ = _corpus.__all__
