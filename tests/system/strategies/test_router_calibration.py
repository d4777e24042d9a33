"""A router adapted to the reader in use from where its RAG and LC answers agree (issue 44, item 3): the agreement
reading, the shrinkage toward the router, the calibration kept per reader and router (concurrent writers, a damaged
file), and a router in use loading it."""

from __future__ import annotations

import multiprocessing

import pytest

from lcrag.strategies.routing.calibration import CalibrationStore, Label, RoutingCalibration


Q = "What is the population of Tallinn?"


def calibration(n: int, disagree: float, prior: dict | None = None) -> RoutingCalibration:
    labels = tuple(Label("what/answers", i < disagree * n) for i in range(n))
    return RoutingCalibration("reader", "digest", labels, {"what/answers": 0.5, "*": 0.5} if prior is None else prior)


def _add_labels(directory: str) -> None:
    store = CalibrationStore(directory)
    for i in range(20):
        store.add("reader", "digest", [Label("what/answers", bool(i % 2), "explore")], {})


def test_processes_adding_labels_at_once_keep_every_label(tmp_path):
    """Two processes adding labels to one reader's calibration as their traffic flows: each read-change-write is
    under the file lock, so none is lost."""
    context = multiprocessing.get_context("fork")
    workers = [context.Process(target=_add_labels, args=(str(tmp_path),)) for _ in range(2)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(120)
        assert w.exitcode == 0
    kept = CalibrationStore(tmp_path).load("reader", "digest")
    assert len(kept.labels) == 40 and kept.summary()["sources"] == {"explore": 40}
