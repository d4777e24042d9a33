"""Hardening (issue 14), as a new user would meet it: every bad input to every command is one line on stderr with exit
2 (never a traceback, a hang or an echoed password), a damaged derived file answers as a clean cache did, and
concurrent runs on one index, run directory or completion cache neither crash nor disagree. The cases and their
judging are tests/hardening_cases.py; each command runs as a process of the installed `lcrag`, the damaged caches
and the concurrent runs on the bundled models."""

from __future__ import annotations

import pytest
from hardening_cases import audit_concurrency, audit_damage, audit_inputs, item

# Cases lcrag gets wrong today, each waiting for a fix in src/ (the test is marked xfail while one of them alone is
# not clean; a case fixed needs no change here).
KNOWN_NOT_CLEAN: dict[str, str] = {}


@pytest.mark.parametrize("part", [audit_inputs, audit_damage, audit_concurrency],
                         ids=["bad-inputs", "damaged-derived-files", "concurrent-runs"])
def test_every_case_is_clean(tmp_path, part):
    cases, notes = part(tmp_path)
    assert cases, f"no case ran: {notes}"  # a setup that failed (the clean reference ask) is said here
    not_clean = [case for case in cases if case.verdict != "clean"]
    unexpected = "\n".join(item(case, tmp_path) for case in not_clean if case.name not in KNOWN_NOT_CLEAN)
    assert unexpected == "", notes
    if not_clean:
        pytest.xfail("; ".join(KNOWN_NOT_CLEAN[case.name] for case in not_clean))
