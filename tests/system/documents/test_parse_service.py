"""The service parses uploaded files in its sandbox, once (issue 34, items 5 and 6), over real HTTP on loopback
(uvicorn) with a scripted reader: a collection in error answers its error at once, never parsing again; the 429
check comes before any parsing or waiting for indexing; a hostile file is refused naming its limit while /healthz
goes on answering; parses survive a restart; MCP resource reads parse off the event loop, through the same cache."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from document_fixtures import crane_manual
from service_fixtures import running, wait_ready

from lcrag.documents.limits import ParseLimits
from lcrag.pipeline.pipeline import Pipeline, Settings
from lcrag.service.answering import Answering
from lcrag.service.http.app import create_app
from lcrag.service.limits import Limits

from hostile_documents import form_bomb_pdf


def engine(tmp_path, reader, **options) -> Answering:
    settings = Settings(cache=False, cache_dir=tmp_path / "cache", chunking="words:20", k=2, strategy="rag")
    pipeline = Pipeline(settings, reader=reader, memory_bytes=64 << 20)
    return Answering(settings, tmp_path / "collections", pipeline=pipeline, price_as="gpt-4o-mini", **options)


def serve(answering: Answering):
    return running(create_app(answering, None, Limits(max_upload_bytes=64 << 20)))


def upload(url, collection, path):
    with open(path, "rb") as f:
        return httpx.post(f"{url}/v1/collections/{collection}/files", files={"file": (path.name, f)}, timeout=60)


def ask(url, collection, timeout=30.0):
    return httpx.post(f"{url}/v1/ask", json={"collection": collection, "question": "Crane reset code?"},
                      timeout=timeout)


def bad_jsonl(tmp_path, records=150_000):
    """12 MB of good records and a broken last one: a second of parsing, then refused (so the collection is in
    error); 5281a3b parsed it again for every question."""
    path = tmp_path / "upload" / "records.jsonl"
    path.parent.mkdir(exist_ok=True)
    lines = [json.dumps({"text": f"record {i} about the harbour crane, its valves, pumps and gauges"})
             for i in range(records)]
    path.write_text("\n".join(lines) + "\n{broken\n", encoding="utf-8")
    return path


# -- item 5: an error collection, and the queue before any work ---------------------------------------------------
def test_a_collection_in_error_answers_its_error_at_once_never_parsing_again(tmp_path, scripted_reader):
    answering = engine(tmp_path, scripted_reader(lambda m: "7781"))
    with serve(answering) as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        upload(url, "ops", bad_jsonl(tmp_path))
        status = wait_ready(url, "ops", timeout=60)
        assert status["state"] == "error" and "records.jsonl:150001: invalid JSON" in status["error"]
        parses = answering.parser.parses
        with ThreadPoolExecutor(12) as pool:
            replies = list(pool.map(lambda _: ask(url, "ops"), range(12)))
        assert [r.status_code for r in replies] == [400] * 12
        assert all(r.json()["error"]["message"] == status["error"] for r in replies)
        assert answering.parser.parses == parses  # 5281a3b: 12 parses of a second each, in parallel
        httpx.post(f"{url}/v1/collections", json={"name": "good"})
        upload(url, "good", crane_manual(tmp_path))
        assert wait_ready(url, "good", timeout=60)["state"] == "ready"
        assert ask(url, "good").json()["text"] == "7781"


def test_the_queue_is_checked_before_waiting_for_indexing(tmp_path, scripted_reader):
    answering = engine(tmp_path, scripted_reader(lambda m: "7781"), max_waiting=1)
    entered, release = threading.Event(), threading.Event()
    build = answering.base.index

    def held_index(*args, **options):  # the collection stays "indexing" until released
        entered.set()
        release.wait(60)
        return build(*args, **options)

    answering.base.index = held_index
    with serve(answering) as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        upload(url, "ops", crane_manual(tmp_path))
        assert entered.wait(30)
        first = ThreadPoolExecutor(1).submit(ask, url, "ops", 60)  # takes the one place in the queue, and waits
        time.sleep(0.5)
        second = ask(url, "ops", timeout=30)  # 5281a3b: waited for the indexing too, before any 429
        assert second.status_code == 429 and not release.is_set()  # refused while the indexing was still held
        release.set()
        assert first.result(60).json()["text"] == "7781"


def test_parses_are_kept_across_a_restart(tmp_path, scripted_reader):
    answering = engine(tmp_path, scripted_reader(lambda m: "7781"))
    with serve(answering) as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        upload(url, "ops", crane_manual(tmp_path))
        assert wait_ready(url, "ops", timeout=60)["state"] == "ready" and answering.parser.parses == 1
    answering.close()
    restarted = engine(tmp_path, scripted_reader(lambda m: "7781"))  # the service started again: nothing kept
    with serve(restarted) as url:
        assert ask(url, "ops").json()["text"] == "7781" and restarted.parser.parses == 0


def test_a_hostile_file_is_refused_naming_its_limit_while_the_service_answers(tmp_path, scripted_reader):
    answering = engine(tmp_path, scripted_reader(lambda m: "7781"), parse_limits=ParseLimits(seconds=3, memory_mb=8192))
    bomb = form_bomb_pdf(tmp_path / "forms.pdf", fan_out=100, depth=3)  # 87 s and 14 GB in process
    with serve(answering) as url:
        httpx.post(f"{url}/v1/collections", json={"name": "ops"})
        upload(url, "ops", crane_manual(tmp_path))
        assert wait_ready(url, "ops", timeout=60)["state"] == "ready"
        upload(url, "ops", bomb)
        answered_while_indexing = 0  # how fast is measured by benchmarks/bench_service_limits.py, not a test
        while httpx.get(f"{url}/v1/collections/ops").json()["status"]["state"] == "indexing":
            assert httpx.get(f"{url}/healthz").status_code == 200
            answered_while_indexing += httpx.get(f"{url}/v1/collections/ops").json()["status"]["state"] == "indexing"
            time.sleep(0.05)
        status = wait_ready(url, "ops", timeout=30)
        assert status["state"] == "ready" and answered_while_indexing >= 1  # not frozen behind the parse
        assert status["skipped"] == ["forms.pdf: reading it takes more than the 3 s one file may take "
                                     "(--max-parse-seconds); the file was refused"]
        assert ask(url, "ops").json()["text"] == "7781"  # the collection goes on with its other files


# -- item 6: MCP resource reads ------------------------------------------------------------------------------------
def test_an_mcp_resource_read_parses_off_the_event_loop_through_the_cache(tmp_path, scripted_reader):
    pytest.importorskip("mcp")
    from lcrag.service.mcp.tools import LcragMCP

    answering = engine(tmp_path, scripted_reader(lambda m: "7781"), parse_limits=ParseLimits(seconds=2, memory_mb=8192))
    answering.collections.create("ops")
    manual = crane_manual(tmp_path)
    answering.collections.add_file("ops", manual.name, iter([manual.read_bytes()]), 1 << 30)
    answering.collections.wait("ops")
    bomb = form_bomb_pdf(tmp_path / "forms.pdf", fan_out=100, depth=3)
    answering.collections.add_file("ops", bomb.name, iter([bomb.read_bytes()]), 1 << 30)
    answering.collections.wait("ops")
    parses = answering.parser.parses
    assert parses == 2
    server = LcragMCP(answering)

    async def read_while_ticking(uri: str):
        gaps, done = [], asyncio.Event()

        async def tick():
            while not done.is_set():
                at = time.monotonic()
                await asyncio.sleep(0.01)
                gaps.append(time.monotonic() - at)

        ticker = asyncio.create_task(tick())
        try:
            return await server.read_resource(uri), gaps
        except Exception as exc:  # noqa: BLE001 - the refusal, as the SDK wraps it
            return exc, gaps
        finally:
            done.set()
            await ticker

    contents, _ = asyncio.run(read_while_ticking("lcrag://collections/ops/files/crane.pdf"))
    assert "7781" in list(contents)[0].content and answering.parser.parses == parses  # indexing's parse, reused
    refused, gaps = asyncio.run(read_while_ticking("lcrag://collections/ops/files/forms.pdf"))
    assert "--max-parse-seconds" in str(refused) and answering.parser.parses == parses
    answering.parser._recent.clear()  # a deadline's refusal is kept in memory only: this read parses again
    refused, gaps = asyncio.run(read_while_ticking("lcrag://collections/ops/files/forms.pdf"))
    assert "--max-parse-seconds" in str(refused) and answering.parser.parses == parses + 1
    # The loop ticked on while the parse ran to its deadline (5281a3b stopped it for the whole parse: one tick, after)
    assert len(gaps) > 2
