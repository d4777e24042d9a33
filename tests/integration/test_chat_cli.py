"""`lcrag chat` in its own process with the bundled reader: questions piped in a line each, answered over one
pipeline with the conversation so far."""

import json
import subprocess
import sys

from lcrag.documents.synthetic import needle_document


def test_a_piped_conversation_is_answered_a_line_at_a_time_with_its_history(tmp_path):
    document, facts = needle_document(1500, seed=5)
    path = tmp_path / "doc.txt"
    path.write_text(document.text)
    fact = facts[0]
    questions = f"{fact.question}\n\n   \nAnd what else does the text say about it?\n"
    result = subprocess.run([sys.executable, "-m", "lcrag.cli", "chat", str(path), "-s", "rag", "--json",
                             "--condense", "join", "--cache-dir", str(tmp_path / "cache")],
                            input=questions, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    answers = [json.loads(line) for line in result.stdout.splitlines()]
    assert [a["question"] for a in answers] == [fact.question, "And what else does the text say about it?"]
    assert answers[0]["conversation"] is None  # nothing asked before: as asked
    follow_up = answers[1]["conversation"]
    assert follow_up["method"] == "joined" and fact.question in follow_up["retrieval_query"]
    assert answers[1]["sources"], "a follow-up's answer cites where it read"


def test_a_question_that_fails_is_one_line_and_the_conversation_goes_on(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text("The lighthouse keeper is named Orla Vance. " * 40)
    too_long = "why " * 200_000  # past the reader's window as a question alone
    result = subprocess.run([sys.executable, "-m", "lcrag.cli", "chat", str(path), "-s", "closed-book", "--json",
                             "--cache-dir", str(tmp_path / "cache")],
                            input=f"{too_long}\nWho keeps the lighthouse?\n", capture_output=True, text=True,
                            timeout=900)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("error: ") and len(result.stderr.strip().splitlines()) == 1  # one line
    assert [json.loads(line)["question"] for line in result.stdout.splitlines()] == ["Who keeps the lighthouse?"]
