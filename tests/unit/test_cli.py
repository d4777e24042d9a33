"""Bad input: one line on stderr, exit code 2, no traceback. These never reach a model."""

import json
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


@pytest.mark.parametrize(
    "make_args, message",
    [
        (lambda t, d: ["ask", str(t / "missing.txt"), "q"], "does not exist"),
        (lambda t, d: ["ask", str(t / "empty.txt"), "q"], "is empty"),
        (lambda t, d: ["ask", str(t / "binary.txt"), "q"], "binary"),
        (lambda t, d: ["ask", str(t / "bad.jsonl"), "q"], "bad.jsonl:1: invalid JSON"),
        (lambda t, d: ["ask", str(d), "q", "--strategy", "magic"], "unknown strategy"),
        (lambda t, d: ["ask", str(d), "q", "--retriever", "grep"], "unknown retriever"),
        (lambda t, d: ["ask", str(d), "q", "--order", "random"], "unknown order"),
        (lambda t, d: ["ask", str(d), "q", "--llm", str(t / "nope.gguf")], "does not exist"),
        (lambda t, d: ["ask", str(d), "q", "--llm", "mystery"], "unknown reader"),
        (lambda t, d: ["ask", str(d), "q", "--prompts", str(t / "bad_prompts.json")], "placeholders"),
        (lambda t, d: ["ask", str(d), "   ", "--strategy", "closed-book", "--llm", "openai:m@http://127.0.0.1:9"], "question is empty"),
        (lambda t, d: ["index", str(d), "--chunking", "words:many"], "bad chunking"),
        (lambda t, d: ["index", str(d), "--chunking", "pages:3"], "unknown chunk unit"),
        (lambda t, d: ["ask", str(d), "q", "-r", "tree", "--tree-navigation", "guess"], "unknown tree navigation"),
        (lambda t, d: ["ask", str(d), "q", "-s", "rag", "-r", "tree", "--llm", "openai:m@http://127.0.0.1:9",
                       "--summary-llm", str(t / "nope.gguf"), "--cache-dir", str(t / "c")], "does not exist"),
        (lambda t, d: ["passkey", str(t / "pk"), "--depths", "0.5,1.5"], "between 0 and 1"),
        (lambda t, d: ["passkey", str(t / "pk"), "--variants", "needle"], "unknown variant"),
        (lambda t, d: ["passkey", str(t / "pk"), "--lengths", "10", "--tokenizer", "words"], "at least 64 tokens"),
        (lambda t, d: ["analyze", "failures", str(t)], "not a run directory"),
        (lambda t, d: ["analyze", "questions", str(t)], "not a run directory"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, doc, make_args, message):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "binary.txt").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "bad.jsonl").write_text("{oops\n")
    (tmp_path / "bad_prompts.json").write_text(json.dumps({"lc": "no placeholders"}))
    result = lcrag(*make_args(tmp_path, doc))
    assert result.returncode == 2, result.stderr
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_usage_errors_exit_2(doc):
    result = lcrag("ask", str(doc))  # missing QUESTION
    assert result.returncode == 2
    assert "Traceback" not in result.stderr


def test_unreachable_server_is_one_line(doc):
    result = lcrag("ask", str(doc), "q", "--strategy", "closed-book", "--no-cache",
                   "--llm", "openai:m@http://127.0.0.1:9/v1")
    assert result.returncode == 2
    assert "failed after" in result.stderr and "Traceback" not in result.stderr
