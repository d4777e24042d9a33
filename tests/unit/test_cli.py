"""Bad input: one line on stderr, exit code 2, no traceback. These never reach a model."""

import json
import os
import random
from pathlib import Path

import pytest
from cli_runs import run_main


@pytest.fixture
def doc(tmp_path):
    path = tmp_path / "doc.txt"
    path.write_text("Some text. " * 50)
    return path


@pytest.fixture
def bad_files(tmp_path):
    """Every kind of bad file the cases below name, by short name."""
    files = {name: tmp_path / name for name in (
        "empty.txt", "binary.txt", "bad.jsonl", "noise.txt", "fifo.txt", "no_docs", "bad_prompts.json", "corpus.jsonl")}
    files["empty.txt"].write_text("")
    files["binary.txt"].write_bytes(b"\x00\x01\x02binary")
    files["bad.jsonl"].write_text("{oops\n")
    files["noise.txt"].write_bytes(bytes(random.Random(0).randint(0x80, 0xFF) for _ in range(24_756)))
    os.mkfifo(files["fifo.txt"])
    files["no_docs"].mkdir()
    (files["no_docs"] / "image.png").write_bytes(b"\x89PNG")
    files["bad_prompts.json"].write_text(json.dumps({"lc": "no placeholders"}))
    files["corpus.jsonl"].write_text(json.dumps({"id": "1", "title": "T", "text": "Some text."}) + "\n")
    files["missing.txt"] = tmp_path / "missing.txt"
    files["missing.gguf"] = tmp_path / "missing.gguf"
    files["zero"] = Path("/dev/zero")
    for name, content in {"nested": {"lc": "{context:{question}} {question}"}, "huge": {"lc": "{context:>999999999} {question}"},
                          "not_str": {"lc": 5}, "unknown": {"sytem": "x"}}.items():
        files[f"prompts_{name}"] = tmp_path / f"prompts_{name}.json"
        files[f"prompts_{name}"].write_text(json.dumps(content))
    files["prompts_invalid"] = tmp_path / "prompts_invalid.json"
    files["prompts_invalid"].write_text("{oops")
    return files


DOC = "{doc}"  # replaced by a good document
OFFLINE = ["--llm", "openai:m@http://127.0.0.1:9"]  # a reader that is never reached: these fail before any call

BAD_INPUTS = [
    # documents (defects 1 and 2)
    (["ask", "{missing.txt}", "q"], "does not exist"),
    (["ask", "{empty.txt}", "q"], "is empty"),
    (["ask", "{binary.txt}", "q"], "binary"),
    (["ask", "{noise.txt}", "q"], "noise.txt is not text in UTF-8 or Windows-1252/Latin-1"),
    (["ask", "{fifo.txt}", "q"], "fifo.txt is not a regular file"),
    (["ask", "{zero}", "q"], "/dev/zero is not a regular file"),
    (["ask", "{no_docs}", "q"], "holds no .txt, .jsonl, .md, .pdf, .docx, .html or .epub files"),
    (["ask", "{bad.jsonl}", "q"], "bad.jsonl:1: invalid JSON"),
    (["index", "{fifo.txt}"], "not a regular file"),
    (["index", "{noise.txt}"], "is not text"),
    (["--max-file-mb", "0.00001", "ask", DOC, "q"], "over the 10 bytes limit (raise it with --max-file-mb"),
    (["corpus", "build", "{fifo.txt}", "--out", "{no_docs}/idx"], "fifo.txt is not a regular file"),
    # option values (defect 2b): every numeric option of every command
    (["--max-file-mb", "0", "ask", DOC, "q"], "--max-file-mb must be > 0, got 0"),
    (["ask", DOC, "q", "--chunking", "words:0"], "--chunking must be UNIT:SIZE"),
    (["ask", DOC, "q", "--max-tokens", "0"], "--max-tokens must be ≥ 1, got 0"),
    (["ask", DOC, "q", "--max-tokens", "-1"], "--max-tokens must be ≥ 1, got -1"),
    (["ask", DOC, "q", "--context-window", "0"], "--context-window must be ≥ 1, got 0"),
    (["ask", DOC, "q", "--context-window", "-1"], "--context-window must be ≥ 1, got -1"),
    (["ask", DOC, "q", "--context-window", "64"], "--context-window must be above max_tokens (64), got 64"),
    (["ask", DOC, "q", "--window", "-1"], "--window must be ≥ 0, got -1"),
    (["ask", DOC, "q", "--threads", "0"], "--threads must be ≥ 1, got 0"),
    (["ask", DOC, "q", "-k", "0"], "-k must be ≥ 1, got 0"),
    (["ask", DOC, "q", "--budget", "0"], "--budget must be ≥ 1, got 0"),
    (["ask", DOC, "q", "-k", "abc"], "Invalid value"),  # typer's own type check
    (["ask", DOC, "q", "--strategy", "magic"], "--strategy must be one of closed-book, lc"),
    (["ask", DOC, "q", "--retriever", "grep"], "--retriever must be one of bm25"),
    (["ask", DOC, "q", "--order", "random"], "--order must be one of score, document; got 'random'"),
    (["ask", DOC, "q", "-r", "tree", "--tree-navigation", "guess"], "--tree-navigation must be one of embedding, llm"),
    (["index", DOC, "--chunking", "words:0"], "--chunking must be UNIT:SIZE"),
    (["index", DOC, "--chunking", "words:many"], "got 'words:many'"),
    (["index", DOC, "--chunking", "pages:3"], "UNIT one of words, tokens, sentences"),
    (["index", DOC, "--retriever", "grep"], "unknown retriever"),
    (["demo", "--words", "0"], "--words must be ≥ 1, got 0"),
    (["ask", DOC, "q", "--router", "lara", "--lc-share", "0.3", "--lc-cost-share", "0.3"],
     "--lc-cost-share cannot be set with --lc-share as well"),
    (["ask", DOC, "q", "--option", "declines_to_lc=true"], "declines_to_lc needs a router"),
    (["demo", "--retriever", "grep"], "--retriever must be one of"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "--budget", "0"], "--budget must be ≥ 1, got 0"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "-k", "0"], "-k must be ≥ 1, got 0"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "-k", ","], "--k is empty"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "--limit", "0"], "--limit must be ≥ 1, got 0"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "--concurrency", "0"], "--concurrency must be ≥ 1, got 0"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "--concurrency", "-1"], "--concurrency must be ≥ 1, got -1"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "--context-window", "0"], "--context-window must be ≥ 1"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "--threads", "0"], "--threads must be ≥ 1"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "--window", "-1"], "--window must be ≥ 0"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "--chunking", "words:0"], "--chunking must be"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "--strategies", "magic"], "unknown strategy"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "--unit", "pages"], "unknown unit 'pages'; choose one of"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "--strategies", "longrag", "--retriever", "hybrid"],
     "unknown retriever 'hybrid'; choose one of dense, bm25"),
    (["passkey", "{no_docs}/pk", "--depths", "0.5,1.5"], "between 0 and 1"),
    (["passkey", "{no_docs}/pk", "--variants", "needle"], "unknown variant"),
    (["passkey", "{no_docs}/pk", "--lengths", "10", "--tokenizer", "words"], "at least 64 tokens"),
    (["corpus", "build", "{corpus.jsonl}", "--out", "{no_docs}/idx", "--piece-words", "0"], "--piece-words must be ≥ 1"),
    (["corpus", "build", "{corpus.jsonl}", "--out", "{no_docs}/idx", "--group-tokens", "-1"], "--group-tokens must be ≥ 1"),
    (["corpus", "build", "{corpus.jsonl}", "--out", "{no_docs}/idx", "--batch", "0"], "--batch must be ≥ 1, got 0"),
    (["index", DOC, "--config", "{missing.txt}"], "missing.txt"),
    (["analyze", "questions", "{no_docs}", "--top", "0"], "--top must be ≥ 1, got 0"),
    (["analyze", "failures", "{no_docs}"], "not a run directory"),
    # prompts files (defect 3)
    (["ask", DOC, "q", "--prompts", "{bad_prompts.json}"], "placeholders"),
    (["ask", DOC, "q", "--prompts", "{prompts_nested}"], "without a format spec or conversion"),
    (["ask", DOC, "q", "--prompts", "{prompts_huge}"], "found {context:>999999999}"),
    (["ask", DOC, "q", "--prompts", "{prompts_not_str}"], "prompt 'lc' must be a string, not int"),
    (["ask", DOC, "q", "--prompts", "{prompts_unknown}"], "unknown key(s) 'sytem'"),
    (["ask", DOC, "q", "--prompts", "{prompts_invalid}"], "prompts_invalid.json: invalid JSON ("),
    (["ask", DOC, "q", "--prompts", "{fifo.txt}"], "fifo.txt is not a regular file"),
    # readers and questions
    (["ask", DOC, "q", "--llm", "{missing.gguf}"], "does not exist"),
    (["ask", DOC, "q", "--llm", "mystery"], "unknown reader"),
    (["ask", DOC, "   ", "--strategy", "closed-book", *OFFLINE], "question is empty"),
    (["ask", DOC, "q", "-s", "rag", "-r", "tree", *OFFLINE, "--summary-llm", "{missing.gguf}", "--cache-dir", "{no_docs}/c"],
     "does not exist"),
    # names checked before anything loads, even when the answer would come from the cache (found by the audit)
    (["ask", DOC, "q", "--embedder", "bogus"], "unknown embedder 'bogus'"),
    (["index", DOC, "--llm", "bogus"], "unknown reader 'bogus'"),
    (["ask", DOC, "q", "--tokenizer", "{no_docs}/missing.json"], "missing.json does not exist"),
    (["ask", DOC, "q", "--base-url", "http://[::1"], "bad base URL"),
    (["ask", DOC, "q", "--base-url", "ftp://host/v1"], "bad base URL 'ftp://host/v1'"),
    (["ask", DOC, "q", "--llm", "openai:m@http://user:secret@host:99999/v1"], "bad base URL 'http://***@host:99999/v1'"),
    # a pool of reader servers: a malformed URL among several, and its limits
    (["ask", DOC, "q", "--base-url", "http://127.0.0.1:9/v1", "--base-url", "htp://host/v1"], "bad base URL 'htp://host/v1'"),
    (["ask", DOC, "q", "--base-url", "http://127.0.0.1:9/v1,http://u:secret@[::1"], "bad base URL '<unparseable URL>'"),
    (["ask", DOC, "q", "--base-url", "http://127.0.0.1:9/v1,,http://127.0.0.1:10/v1"], "an empty entry between commas"),
    (["serve", "--base-url", "http://127.0.0.1:9/v1", "--base-url", "localhost:8000"], "bad base URL 'localhost:8000'"),
    (["mcp", "--base-url", "http://127.0.0.1:9/v1", "--base-url", "nope"], "bad base URL 'nope'"),
    (["ask", DOC, "q", "--backoff", "0"], "--backoff must be a number from 0.01 to 3600, got 0.0"),
    (["eval", "--dataset", DOC, "--out", "{no_docs}/run", "--backoff", "9", "--max-backoff", "3"],
     "--max-backoff must be at least the back-off it starts from (9)"),
    (["passkey", DOC, "--lengths", "100"], "is a file"),
    # a cache directory that cannot be one is refused before anything is computed
    (["ask", DOC, "q", "--cache-dir", "{empty.txt}", *OFFLINE], "is a file, not a directory: give the cache directory"),
    (["ask", DOC, "q", "--cache-dir", "{empty.txt}/under", *OFFLINE], "cannot create the cache directory"),
    (["serve", "--cache-dir", "{empty.txt}"], "is a file, not a directory: give the cache directory"),
    (["mcp", "--cache-dir", "{empty.txt}"], "is a file, not a directory: give the cache directory"),
    # usage errors are one line too, not typer's framed box
    (["ask", DOC, "q", "-k", "abc"], "Invalid value for '-k'"),
    (["--max-file-mb", "abc", "ask", DOC, "q"], "Invalid value for '--max-file-mb'"),
    (["ask", DOC, "q", "--no-such-option"], "No such option: --no-such-option"),
    (["no-such-command"], "No such command 'no-such-command'"),
    (["demo", "--words", "abc"], "Invalid value for '--words'"),
]


@pytest.mark.parametrize("args, message", BAD_INPUTS, ids=[" ".join(a) for a, _ in BAD_INPUTS])
def test_bad_input_is_one_line_exit_2(doc, bad_files, monkeypatch, capsys, args, message):
    names = {"{doc}": doc} | {f"{{{name}}}": path for name, path in bad_files.items()}
    args = [a.replace(a[:a.index("}") + 1], str(names[a[:a.index("}") + 1]])) if a.startswith("{") else a for a in args]
    code, err = run_main(args, monkeypatch, capsys)
    assert code == 2, err
    assert message in err
    assert "Traceback" not in err and "secret" not in err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize("text, encoding", [("Größe, café, naïve. " * 20, "latin-1"), ("Hello wörld ✓ " * 20, "utf-16")])
def test_legacy_and_utf16_documents_are_indexed(tmp_path, monkeypatch, capsys, text, encoding):
    path = tmp_path / "doc.txt"
    path.write_bytes(text.encode(encoding))
    code, err = run_main(["index", path, "--chunking", "words:5", "--retriever", "bm25", "--cache-dir", tmp_path / "c"],
                         monkeypatch, capsys)
    assert code == 0, err
    assert "Traceback" not in err


@pytest.mark.parametrize("args, message", [
    (["analyze", "failures", "{run}"], "manifest.json:1: not valid JSON"),
    (["analyze", "questions", "{run}"], "manifest.json:1: not valid JSON"),
    (["analyze", "failures", "{good}", "--llm", "bogus"], "unknown reader 'bogus'"),
    (["analyze", "failures", "{good}", "--dataset", "{good}/missing.jsonl"], "missing.jsonl does not exist"),
    (["analyze", "questions", "{good}", "--rag-config", "rag|bm25|k99"], "--rag-config 'rag|bm25|k99' is not in these runs"),
])
def test_analyze_refuses_damaged_runs_and_bad_options(tmp_path, monkeypatch, capsys, args, message):
    """Found by the hardening audit (tests/system/test_hardening.py): a damaged manifest was a traceback, bad names were accepted."""
    run, good = tmp_path / "run", tmp_path / "good"
    for d in (run, good):
        d.mkdir()
    (run / "manifest.json").write_text("{oops")
    (run / "rows.jsonl").write_text("")
    (good / "manifest.json").write_text('{"reader": "smollm2", "dataset": "x.jsonl"}')
    row = {"item_id": "q1", "config": "rag|bm25|k5", "strategy": "rag", "route": "rag", "dataset": "d"}
    (good / "rows.jsonl").write_text(json.dumps(row) + "\n")
    args = [a.replace("{run}", str(run)).replace("{good}", str(good)) for a in args]
    code, err = run_main(args, monkeypatch, capsys)
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1, err


def _help(*command: str) -> str:
    from typer.testing import CliRunner

    from lcrag.cli import app

    result = CliRunner().invoke(app, [*command, "--help"], env={"COLUMNS": "400", "TERMINAL_WIDTH": "400"})
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_help_lists_choices_from_where_they_are_defined():
    """No list of names in the CLI: corpus scorers, units, prompts, groupings, faiss kinds, executors come from
    their definitions (through longrag's registered options where it has them)."""
    from lcrag.chunking.units import GROUPINGS, UNIT_KINDS
    from lcrag.core.registry import spoken_list
    from lcrag.retrieval.corpus.settings import FAISS_KINDS, SCORERS
    from lcrag.retrieval.executors import EXECUTORS
    from lcrag.retrieval.tree_index import NAVIGATIONS

    corpus_build = _help("corpus", "build")
    assert f"--unit <str> {', '.join(UNIT_KINDS)}, or several" in corpus_build
    assert f"--grouping <str> {', '.join(GROUPINGS)} (auto:" in corpus_build
    assert f"faiss index: {spoken_list(FAISS_KINDS)}." in corpus_build and f"{spoken_list(EXECUTORS)} (ray:" in corpus_build
    evaluate = _help("eval")
    assert f"the corpus index's scorers, {', '.join(SCORERS)})" in evaluate
    assert f"comma-separated units, of {', '.join(UNIT_KINDS)}." in evaluate
    assert f"tree: how the tree is walked (llm: the reader picks the branch) ({', '.join(NAVIGATIONS)})." in evaluate
    assert "--config" in _help("index")


def test_demo_asks_every_document_strategy_in_registration_order(monkeypatch, capsys, tmp_path):
    """The demo's strategies are the registry's (those that answer over one document): the built-ins give the
    same rows in the same order as before, and a newly registered strategy is asked too."""
    from types import SimpleNamespace

    import lcrag.cli
    import lcrag.pipeline.pipeline
    from lcrag.core.registry import STRATEGIES

    asked = []

    class Pipeline:  # answers at once: no reader is loaded
        reader = None

        def __init__(self, settings, progress=None):
            pass

        def ask(self, document, question, strategy):
            asked.append(strategy)
            return SimpleNamespace(text="x", route=strategy, prompt_tokens=1, seconds=0.0)

        def close(self):
            pass

    monkeypatch.setattr(lcrag.pipeline.pipeline, "Pipeline", Pipeline)  # the CLI imports it when a command runs
    args = ["demo", "--words", "300", "--cache-dir", tmp_path]
    builtins = ["closed-book", "lc", "rag", "op-rag", "self-route", "cascade"]
    assert run_main(args, monkeypatch, capsys)[0] == 0
    assert asked[:6] == builtins and set(asked) == set(builtins)
    STRATEGIES.register("probe-strategy", help="a strategy registered by this test")(lambda: None)
    try:
        asked.clear()
        assert run_main(args, monkeypatch, capsys)[0] == 0
        assert asked[:7] == [*builtins, "probe-strategy"]
    finally:
        STRATEGIES.remove("probe-strategy")


@pytest.mark.parametrize("command", [("ask",), ("eval",), ("route", "eval")])
def test_router_help_names_every_shipped_router(command):
    from lcrag.strategies.routing.learned import BUNDLED

    text = _help(*command)
    assert all(f"`{name}`" in text for name in BUNDLED), text
