"""Bad input through the `lcrag` script in its own process: one line on stderr, exit code 2, no traceback. These never
reach a model (the same in this process, over every kind of bad input: tests/unit/test_cli.py)."""

import subprocess
import sys

import pytest


def lcrag(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "lcrag.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text("Some text. " * 50)
    return path


def test_usage_errors_exit_2(doc):
    result = lcrag("ask", str(doc))  # missing QUESTION
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_unreachable_server_is_one_line(doc):
    result = lcrag("ask", str(doc), "q", "--strategy", "closed-book", "--no-cache",
                   "--llm", "openai:m@http://127.0.0.1:9/v1")
    assert result.returncode == 2
    assert "failed after" in result.stderr and "Traceback" not in result.stderr
