"""Where corpus embedding runs: in this process, or on a Ray cluster (``pip install -e '.[ray]' in lcrag's checkout``).

Both map the same text batches to vectors in the same order, so a Ray build writes the same embedding matrix as a
local one (tested). Ray holds one embedder per actor; the driver streams batches to them with a bounded number in
flight, so memory on the driver stays at a few batches whatever the corpus size.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from collections.abc import Iterator

from lcrag.core.errors import InputError
from lcrag.core.lazy import lazy_module
from lcrag.retrieval.dense import EmbedBatches, local_batches
from lcrag.retrieval.embedders import make_embedder

if TYPE_CHECKING:
    import numpy as np
else:  # imported on first use (see lcrag.core.lazy)
    np = lazy_module("numpy")

EXECUTORS = ("local", "ray")


class _EmbedActor:
    def __init__(self, spec: str, threads: int | None):
        from lcrag.retrieval.embedders import OnnxMiniLMEmbedder, parse_embedder_spec

        # The bundled ONNX embedder takes a thread count: one actor per CPU, one thread each, is the fastest split.
        bundled = parse_embedder_spec(spec)[0] == "minilm"
        self.embedder = OnnxMiniLMEmbedder(threads=threads) if bundled else make_embedder(spec)

    def embed(self, texts: list[str]) -> np.ndarray:
        return self.embedder.embed(texts)


def ray_batches(spec: str, actors: int | None = None, address: str | None = None,
                threads_per_actor: int = 1) -> EmbedBatches:
    """Embed text batches on Ray actors (``address`` of a running cluster, or a local one started here)."""
    try:
        import ray
    except ImportError:
        raise InputError("--executor ray needs Ray: pip install -e '.[ray]' in lcrag's checkout") from None
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
    n_actors = actors or max(1, int(ray.available_resources().get("CPU", 1)) // threads_per_actor)
    actor_cls = ray.remote(num_cpus=threads_per_actor)(_EmbedActor)
    pool = [actor_cls.remote(spec, threads_per_actor) for _ in range(n_actors)]

    def run(batches: Iterator[list[str]]) -> Iterator[np.ndarray]:
        in_flight: list = []  # futures in submission order; results are yielded in that order
        next_actor = 0
        for texts in batches:
            in_flight.append(pool[next_actor % n_actors].embed.remote(texts))
            next_actor += 1
            if len(in_flight) >= 2 * n_actors:
                yield ray.get(in_flight.pop(0))
        while in_flight:
            yield ray.get(in_flight.pop(0))

    return run


def make_batches(executor: str, spec: str, embedder=None, ray_address: str | None = None) -> EmbedBatches:
    if executor == "local":
        return local_batches(embedder if embedder is not None else make_embedder(spec))
    if executor == "ray":
        return ray_batches(spec, address=ray_address)
    raise InputError(f"unknown executor {executor!r}; choose one of {', '.join(EXECUTORS)}")
