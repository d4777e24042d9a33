"""Options flow from the part (issue 26): a strategy defined in one module, with its own prompt and option, has that
option set from the CLI (`--option`), a run file (`options` table) and the HTTP API (`options`), each checked by the
part; cascade's `widen` is settable the same way. Nothing else lists the option."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
import textwrap

import httpx
import pytest

from lcrag.pipeline.config import Config
from lcrag.core.errors import OptionError
from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.core.registry import STRATEGIES


# The whole strategy: its prompt, its option, its contract. Registering it is importing it.
MAP_REDUCE = '''
from lcrag.core.registry import STRATEGIES, Option
from lcrag.strategies.base import Strategy, Timer, call_reader
from lcrag.core.types import Answer

NOTES = "Note what this part says about the question.\\n\\n{context}\\n\\nQuestion: {question}\\nNotes:"


@STRATEGIES.register("map-reduce", help="the document read in PIECES parts, then answered from the notes",
                     options=(Option("pieces", int, 2, "parts the document is read in", min=1, max=16),))
class MapReduce(Strategy):
    name = route = "map-reduce"

    def __init__(self, pieces=2):
        self.pieces = pieces

    def run(self, ctx, question):
        timer, text = Timer(), ctx.document.text
        size = -(-len(text) // self.pieces)
        notes, calls = [], []
        for i in range(self.pieces):
            messages = ctx.prompts.messages(NOTES, question, context=text[i * size:(i + 1) * size])
            note, call = call_reader(ctx, f"map-{i}", messages, timer)
            notes.append(note)
            calls.append(call)
        messages = ctx.prompts.messages(ctx.prompts.rag, question, context="\\n".join(notes))
        answer, call = call_reader(ctx, "reduce", messages, timer)
        return Answer(answer, question, self.name, route=self.route, calls=calls + [call], timings=timer.timings)
'''


@pytest.fixture
def map_reduce(tmp_path, monkeypatch):
    (tmp_path / "map_reduce.py").write_text(MAP_REDUCE)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("map_reduce")
    yield tmp_path
    STRATEGIES.remove("map-reduce")
    sys.modules.pop("map_reduce", None)


@pytest.fixture
def manual(tmp_path):
    path = tmp_path / "manual.txt"
    path.write_text("The crane manual. " * 30 + "The reset code of the crane is 7781. " + "Keep the rope oiled. " * 30)
    return path


def lcrag(module_dir, *args):
    """The real CLI (lcrag.cli.main) in a process that imported the strategy's module first."""
    code = "import sys, map_reduce; from lcrag.cli import main; sys.argv[0] = 'lcrag'; main()"
    return subprocess.run([sys.executable, "-c", code, *map(str, args)], capture_output=True, text=True,
                          timeout=300, cwd=module_dir, env={"PYTHONPATH": str(module_dir), "PATH": "/usr/bin:/bin"})


def stages(answer: dict) -> list[str]:
    return [call["stage"] for call in answer["calls"]]


def test_an_option_of_a_strategy_from_one_module_is_set_by_cli_flag_and_run_file(map_reduce, manual, tmp_path):
    ask = ["ask", manual, "What is the reset code?", "-s", "map-reduce", "--max-tokens", "4", "--json",
           "--cache-dir", tmp_path / "cache"]
    flagged = lcrag(map_reduce, *ask, "--option", "pieces=3")
    assert flagged.returncode == 0, flagged.stderr
    assert stages(json.loads(flagged.stdout)) == ["map-0", "map-1", "map-2", "reduce"]  # a real reader, 4 calls

    run_file = tmp_path / "run.toml"
    run_file.write_text("[options]\npieces = 1\n")
    filed = lcrag(map_reduce, *ask, "--config", run_file)
    assert filed.returncode == 0, filed.stderr
    assert stages(json.loads(filed.stdout)) == ["map-0", "reduce"]

    for bad, said in (("pieces=0", "strategy 'map-reduce' option pieces must be ≥ 1, got 0"),
                      ("piece=2", "'piece' is no strategy's or retriever's option"),
                      ("pieces", "--option must be NAME=VALUE")):
        refused = lcrag(map_reduce, *ask, "--option", bad)
        assert refused.returncode == 2 and said in refused.stderr and len(refused.stderr.splitlines()) == 1, bad


def test_an_option_of_a_strategy_from_one_module_is_set_by_the_http_api(map_reduce, tmp_path, scripted_reader):
    from service_fixtures import running, wait_ready

    from lcrag.service.answering import Answering
    from lcrag.service.http.app import create_app

    reader = scripted_reader(lambda messages: "7781")
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", strategy="map-reduce")
    answering = Answering(settings, tmp_path / "collections", pipeline=Pipeline(settings, reader=reader))
    with running(create_app(answering)) as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        httpx.post(f"{url}/v1/collections/ops/files", files={"file": ("a.txt", b"The reset code is 7781.")})
        wait_ready(url, "ops")
        body = {"collection": "ops", "question": "Code?"}
        answer = httpx.post(f"{url}/v1/ask", json=body | {"options": {"pieces": 4}}, timeout=60).json()
        assert stages(answer) == ["map-0", "map-1", "map-2", "map-3", "reduce"]
        assert stages(httpx.post(f"{url}/v1/ask", json=body, timeout=60).json()) == ["map-0", "map-1", "reduce"]
        for options, said in (({"pieces": 0}, "must be ≥ 1"), ({"widen": 3}, "no strategy 'map-reduce'"),
                              ({"pieces": [1]}, "options")):
            reply = httpx.post(f"{url}/v1/ask", json=body | {"options": options}, timeout=60)
            assert reply.status_code in (400, 422) and said in reply.json()["error"]["message"], options


def test_cascade_widen_is_settable_and_checked_everywhere(tmp_path, scripted_reader):
    text = " ".join(f"Fact {i}: the code of door {i} is {1000 + i}." for i in range(40))
    reader = scripted_reader(lambda messages: "unanswerable")
    settings = Settings(strategy="cascade", k=2, chunking="words:8", cache=False, cache_dir=tmp_path,
                        options={"widen": 4})
    answer = Pipeline(settings, reader=reader).ask(_document(text), "What is the code of door 7?")
    wide = reader.calls[1][-1]["content"]
    assert answer.calls[1].stage == "route-wide" and wide.count("[Chunk") == 8  # k × widen

    config = Config.from_dict({"strategy": {"strategy": "cascade"}, "options": {"widen": 5}})
    assert config.settings().options == {"widen": 5} and config.to_dict()["options"] == {"widen": 5}
    with pytest.raises(OptionError, match="widen must be ≥ 2, got 1"):
        Settings(strategy="cascade", options={"widen": 1})
    with pytest.raises(OptionError, match="route_threshold has a setting of its own: set route_threshold"):
        Settings(options={"route_threshold": 0.5})
    with pytest.raises(OptionError, match="no strategy 'rag' or retriever 'bm25' takes an option 'widen'"):
        Pipeline(Settings(strategy="rag", options={"widen": 3}), reader=reader).strategy("rag")


def _document(text: str):
    from lcrag.core.types import Document

    return Document(text=text, source="doors.txt")


def test_a_run_file_options_table_is_refused_in_one_line_naming_it(tmp_path):
    run_file = tmp_path / "run.yaml"
    run_file.write_text(textwrap.dedent("""\
        strategy: {strategy: cascade}
        options: {widen: zero}
    """))
    with pytest.raises(OptionError, match=r"run\.yaml: options.*widen must be a whole number"):
        Config.from_file(run_file)


# A retriever and its per-question option, in one module: nothing else names the option (issue 33).
FIRST_CHUNKS = '''
from lcrag.core.registry import RETRIEVERS, Option
from lcrag.core.types import ScoredChunk


@RETRIEVERS.register("first-chunks", help="the document's first DEPTH chunks",
                     options=(Option("depth", int, 1, "chunks returned", min=1, max=50),))
def first_chunks(index, depth=1):
    class First:
        name = "first-chunks"

        def run(self, query, k=None):
            return [ScoredChunk(c, 1.0) for c in index.chunks[:depth]]

    return First()
'''


@pytest.fixture
def first_chunks(tmp_path, monkeypatch):
    from lcrag.core.registry import RETRIEVERS

    (tmp_path / "first_chunks.py").write_text(FIRST_CHUNKS)
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.import_module("first_chunks")
    yield tmp_path
    RETRIEVERS.remove("first-chunks")
    sys.modules.pop("first_chunks", None)


def test_a_retriever_option_from_one_module_is_each_requests_own_over_http(first_chunks, tmp_path, scripted_reader):
    """Clients of one server asking with depth 2, 5 and none read 2, 5 and 1 chunks, in any order: the first
    client's options never fix the retriever for the others (as they did on 5281a3b)."""
    from service_fixtures import running, wait_ready

    from lcrag.service.answering import Answering
    from lcrag.service.http.app import create_app

    settings = Settings(cache=False, cache_dir=tmp_path / "cache", strategy="rag", retriever="first-chunks", k=20,
                        chunking="words:5")
    answering = Answering(settings, tmp_path / "collections",
                          pipeline=Pipeline(settings, reader=scripted_reader(lambda m: "7781")))
    with running(create_app(answering)) as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        httpx.post(f"{url}/v1/collections/ops/files",
                   files={"file": ("a.txt", b"The reset code is 7781. " * 30)})
        wait_ready(url, "ops")
        body = {"collection": "ops", "question": "Code?"}
        read = [len(httpx.post(f"{url}/v1/ask", json=body | ({"options": {"depth": d}} if d else {}),
                               timeout=60).json()["chunks"]) for d in (2, 5, None, 2)]
        assert read == [2, 5, 1, 2]
