"""How a chunking is written: ``UNIT:SIZE`` or ``UNIT:SIZE:OVERLAP``, UNIT a registered chunk unit."""

from __future__ import annotations

from lcrag.core.options import SettingError
from lcrag.core.registry import CHUNKERS

# The chunking used when neither the user nor the strategy (its registered meta ``chunking``) names one.
FALLBACK_CHUNKING = "words:300"


def parse_chunking(spec: str) -> tuple[str, int | None, int | None]:
    """``(unit, size, overlap)`` of ``words:300``, ``tokens:128``, ``sentences:300`` or, for units that overlap
    their chunks, ``UNIT:SIZE:OVERLAP`` (``sentence-splitter:600:100``); a unit alone takes its default size, and
    no overlap its default overlap (None)."""
    unit, _, rest = spec.partition(":") if isinstance(spec, str) else ("", "", "")
    size, _, overlap = rest.partition(":")
    units = CHUNKERS.names()
    if unit not in units or (size and not (size.isdigit() and int(size) >= 1)) or (overlap and not overlap.isdigit()) \
            or (rest and not size):
        raise SettingError("chunking", f"must be UNIT:SIZE with UNIT one of {', '.join(units)} and SIZE ≥ 1 "
                                       f"(e.g. words:300, tokens:128), or UNIT:SIZE:OVERLAP (sentence-splitter:600:100), "
                                       f"got {spec!r}")
    declared = CHUNKERS.get(unit).option("size")
    if size and declared is not None and declared.max is not None and int(size) > declared.max:
        raise SettingError("chunking", f"SIZE must be ≤ {declared.max:,g} for {unit}, got {spec[:60]!r}")
    if overlap and "overlap" not in CHUNKERS.get(unit).meta:
        raise SettingError("chunking", f"{unit} chunks do not overlap: write {unit}:SIZE, not {spec!r}")
    shared = overlap or str(CHUNKERS.get(unit).meta.get("overlap", 0))
    if size and int(shared) >= int(size):
        raise SettingError("chunking", f"the overlap ({shared}{'' if overlap else ', the default'}) must be smaller "
                                       f"than the chunk size, got {spec!r}")
    return unit, int(size) if size else None, int(overlap) if overlap else None
