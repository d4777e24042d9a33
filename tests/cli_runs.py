"""``lcrag ARGS`` run in the test's own process, as the ``lcrag`` script runs it, for the CLI tests of every tier."""

import signal
import sys

from lcrag.cli import main
from lcrag.documents.files import DEFAULT_MAX_FILE_MB


def run_main(args, monkeypatch, capsys) -> tuple[int, str]:
    """``lcrag ARGS`` in this process (as the ``lcrag`` script runs it): exit code and stderr.

    An alarm turns a hang (a FIFO read, say) into a failure instead of a stuck test run."""
    monkeypatch.setattr(sys, "argv", ["lcrag", *map(str, args)])
    # --max-file-mb sets this for the process; setenv (unlike delenv of an absent name) is undone after the test.
    monkeypatch.setenv("LCRAG_MAX_FILE_MB", str(DEFAULT_MAX_FILE_MB))

    def hang(signum, frame):
        raise TimeoutError(f"lcrag {' '.join(map(str, args))} hung")

    previous = signal.signal(signal.SIGALRM, hang)
    signal.alarm(60)
    try:
        main()
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    return code, capsys.readouterr().err


