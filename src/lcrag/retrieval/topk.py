"""The one top-k over a score vector, shared by document (dense) and corpus (MaxP) retrieval.

Both rank the same way: best score first, equal scores by position, so a run gives the same order every time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from lcrag.core.lazy import lazy_module

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")


def top_k(scores: np.ndarray, k: int, drop_nonfinite: bool = False) -> list[int]:
    """Positions of the ``k`` best ``scores``, best first, ties by position.

    ``argpartition`` keeps this O(n) in the number of scores (a corpus has millions of units); only the k
    selected are sorted. With ``drop_nonfinite`` the selected positions whose score is not finite are left out
    afterwards (so fewer than k may come back): corpus search never reports a NaN or infinite score as a hit,
    while document dense retrieval returns every selected chunk; the flag keeps each caller's ranking as it was.
    """
    k = min(k, len(scores))
    top = np.argpartition(-scores, k - 1)[:k] if k < len(scores) else np.arange(len(scores))
    order = sorted(top.tolist(), key=lambda i: (-float(scores[i]), i))
    if drop_nonfinite:
        return [i for i in order if np.isfinite(scores[i])]
    return order
