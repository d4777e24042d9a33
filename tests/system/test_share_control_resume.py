"""A run killed at every point of a routed eval and resumed (issue 44): 18 killed runs, each resumed, a ledger file
written (fsync'ed) per question; the resume logic's quick cases are tests/unit/test_share_control.py's."""

from __future__ import annotations

import pytest
from share_control_runs import eval_session, ledger_file, resume_questions
from share_control_runs import small_window  # noqa: F401 - a fixture


@pytest.mark.slow  # a ledger file written (fsync'ed) per question, for 18 killed runs
def test_a_run_killed_anywhere_and_resumed_routes_and_counts_as_an_unbroken_one(tmp_path, small_window):
    """Issue 44: a question counted but never answered (no row) is asked again by the resume; once more than a
    window of questions had followed it, its route was forgotten and it was counted a second time (988 vs 987) and
    every later route could differ. Killed at every point (before a question; between its route and its row),
    resumed, the routes and the ledger file equal the unbroken run's."""
    questions = resume_questions(120)
    unbroken: dict = {}
    assert eval_session(tmp_path / "unbroken", questions, unbroken)
    expected = ledger_file(tmp_path / "unbroken")
    assert len(unbroken) == 116 and expected["questions"] == 120  # the unanswered four counted, once
    assert len(expected["pinned"]) == 4 and len(expected["routed"]) == small_window
    # around the unanswered questions (2, 5, 41, 77), and more than a window after them
    for i in (0, 2, 3, 5, 41, 42, 70, 77, 110):
        for moment in ("before", "routed"):
            directory, rows = tmp_path / f"killed-{i}-{moment}", {}
            assert not eval_session(directory, questions, rows, kill=(i, moment))
            assert eval_session(directory, questions, rows)
            assert rows == unbroken, (i, moment)
            assert ledger_file(directory) == expected, (i, moment)
