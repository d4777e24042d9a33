"""What hostile files and clients cost a real `lcrag serve` and `lcrag mcp` (issues 25 and 34): time, resident memory
and a new client's latency meanwhile, reported beside the bound the issue set, without a verdict. This was
benchmarks/audit_service.py, a pass/fail suite; its cases that assert behaviour are tests now (below).

    flock /tmp/lcrag-bench.lock python benchmarks/bench_service_limits.py --out benchmarks/results/service_limits.md
    python benchmarks/bench_service_limits.py --cases 34.4,34.9     # only these cases (and only the servers they use)

Where the audit's other cases went (issue 45, item 7). Tested already (tests/integration/service/ is "i/s"):
  25.1 stored XSS: i/s/test_service.py::test_uploaded_files_are_served_inert_and_the_page_runs_only_its_own_script
  25.2 server paths as router: i/s/test_service.py::test_a_request_names_a_router_never_a_server_path
  25.3 cross-site writes, DNS rebinding: i/s/test_service.py::test_cross_site_writes_and_foreign_host_names_are_refused
  25.4 stale answers after delete: i/s/test_service_collections.py::test_indexing_that_ends_after_a_delete_never_
       answers_for_the_new_collection and ::test_a_collection_created_again_is_another_collection
  25.6 nested JSONL: i/s/test_service_collections.py::test_a_jsonl_nested_too_deep_is_an_error_naming_it_and_a_good_
       file_recovers
  25.7 upload without Content-Length: i/s/test_service.py::test_a_chunked_upload_is_stopped_at_the_limit_as_it_streams
  25.8 200 MB JSON body: i/s/test_service.py::test_a_json_body_over_the_limit_is_413_and_never_echoed
  25.9 metrics labels: i/s/test_service.py::test_refused_requests_are_labelled_by_route_never_by_raw_path
  25.10 queue and upload: i/s/test_service.py::test_the_queue_refuses_with_429_and_uploads_never_wait_behind_it
  25.12 colliding and long names: i/s/test_service_collections.py::test_names_keep_their_letters_and_never_overwrite,
       ::test_a_name_too_long_to_store_is_refused_with_a_400
  25.13 upload leftovers: i/s/test_service_collections.py::test_uploads_cut_short_by_a_crash_are_removed_at_start_up
  25.14 cost caps: i/s/test_service.py::test_operator_limits_cap_what_one_request_costs
  25.15 wrong shapes: i/s/test_service.py::test_bodies_of_the_wrong_shape_are_4xx_never_500
  25.16 server paths in answers: i/s/test_service_collections.py::test_status_and_errors_name_files_by_their_uploaded_
       names_only (and every storage-failure test's answers without paths)
  25.17 small things: i/s/test_service.py::test_openai_content_parts_a_lowercase_bearer_and_long_file_names,
       ::test_the_api_key_is_required_when_set
  34.5 a collection in error, the queue while indexing: tests/system/documents/test_parse_service.py::test_a_collection_
       in_error_answers_its_error_at_once_never_parsing_again, ::test_the_queue_is_checked_before_waiting_for_indexing
  34.10 an MCP client that leaves: i/s/test_hostile_mcp.py::test_a_question_whose_mcp_client_left_is_cancelled,
       i/s/test_service.py::test_a_question_whose_client_left_while_queued_is_never_generated
  34.11 the reindex race: i/s/test_hostile_collections.py::test_concurrent_reindexes_never_join_a_thread_not_yet_started
  34.12 summarising retrievers: i/s/test_retriever_limits.py (issue 43: the summaries are the indexing's, not billed to
       a question; search refuses them)
  34.13 lone surrogates: i/s/test_hostile_connections.py::test_a_lone_surrogate_is_a_400_naming_the_field,
       i/s/test_hostile_mcp.py::test_mcp_over_http_has_the_header_timeout_json_413_and_surrogate_errors
  34.14 declared bodies over the limits: i/s/test_hostile_connections.py::test_a_declared_body_over_its_limit_is_a_json_
       413_naming_the_flag (and the MCP test above)
  34.16 storage failures: i/s/test_hostile_collections.py::test_storage_failures_are_json_without_paths_and_delete_
       takes_the_collection_away, ::test_an_unwritable_collections_directory_is_a_json_500_without_paths,
       tests/system/service/test_storage_failures.py::test_a_real_full_disk_under_lcrag_serve
  34.names: i/s/test_hostile_collections.py::test_symbolic_links_planted_in_the_collections_directory_are_never_
       followed, ::test_look_alike_names_are_refused_and_names_in_one_script_kept,
       ::test_a_file_is_found_by_any_normal_form_of_its_name
Moved to tests/system/test_service_audit.py: 34.15 (DELETE when half an upload's body is in; the other half of the case,
while the file is placed, is i/s/test_hostile_collections.py::test_a_collection_deleted_while_an_upload_is_placed_is_a_
json_404) and 34.17 (a non-ASCII --api-key, flag or LCRAG_SERVE_API_KEY, serve and mcp; the Latin-1 header is
i/s/test_hostile_connections.py::test_a_non_ascii_api_key_is_refused_at_start_and_an_ascii_one_matches_its_bytes).
Measured by benchmarks/bench_connections.py: 34.7 (21,000 slow connections) and 34.8 (10,000 idle MCP sessions).

Measured here (what the service does with each is asserted by the test named):
  25.5 memory per upload (behaviour: i/s/test_service_collections.py::test_a_reindex_releases_the_previous_index_and_a_
       delete_releases_all); 25.11 a DOCX bomb's time and memory (tests/unit/documents/test_zip_bombs.py); 34.1-34.4
       amplifying files within 5 s and 100 MB while /healthz answers (tests/system/documents/test_parse_sandbox.py::
       test_each_amplifying_file_is_read_or_refused_as_it_should_be_within_100_mb, test_parse_service.py::test_a_
       hostile_file_is_refused_naming_its_limit_while_the_service_answers); 34.6 MCP resources/read of hostile PDFs
       (test_parse_service.py::test_an_mcp_resource_read_parses_off_the_event_loop_through_the_cache); 34.9 the memory
       of unread MCP resource reads (i/s/test_hostile_mcp.py::test_a_resource_over_max_resource_mb_is_refused_and_one_
       under_is_read).

Servers are started as subprocesses of the installed `lcrag` on free loopback ports, each when a case first needs it,
each with its own temporary --cache-dir: A, `lcrag serve --max-upload-mb 4`; C, `lcrag serve` with its default flags;
M, `lcrag mcp --transport http`, over collections planted in its cache before it starts. Their reader is the tests'
stand-in (tests/reader_servers.py) run by this script (`--llm openai:audit --base-url ...`). Every hostile file is made
by this script (issue 34's by the builders of tests/hostile_documents.py), none is committed. A case that breaks is
reported as not measured, and the others go on. Every process the script starts is in a process group of its own and
is stopped however it ends (benchmarks/common.py's Processes).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import json
import os
import re
import resource
import shlex
import socket
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from common import Processes, free_port, log, machine, md_table, stop_group

LCRAG = str(Path(sys.executable).with_name("lcrag"))
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from reader_servers import Stub, _Handler, closest_line  # noqa: E402  (the tests' stand-in reader: one copy of it)
MANUAL = ("Crane manual.\nThe reset code of the crane is 7781.\nThe hoist limit of the crane is 12 tonnes.\n"
          "Inspect the wire rope of the crane every week.\n")
QUESTION = "What is the reset code of the crane?"


# -- the servers under audit --------------------------------------------------------------------------------------
@dataclass
class Server:
    url: str
    cache: Path
    process: subprocess.Popen
    headers: dict
    log_file: Path | None = None
    seen: list[str] = field(default_factory=list)  # every answer's text, searched for server paths (item 25.16)
    processes: Processes | None = None  # what started it, and stops it

    def rss_mb(self, field: str = "VmRSS") -> float:
        for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
        return 0.0

    def peak_since(self):
        """A function giving how far resident memory rose above now, at its peak, since this call (Linux's
        clear_refs resets the peak; where it cannot, the peak of the process's life is the bound)."""
        now = self.rss_mb()
        try:
            Path(f"/proc/{self.process.pid}/clear_refs").write_text("5")
        except OSError:
            pass
        return lambda: self.rss_mb("VmHWM") - now

    def log_text(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file else ""

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    def request(self, method: str, path: str, **kw) -> httpx.Response:
        reply = httpx.request(method, self.url + path, headers=self.headers | kw.pop("headers", {}),
                              timeout=kw.pop("timeout", 60), **kw)
        self.seen.append(reply.text[:100_000])
        return reply

    def get(self, path: str, **kw) -> httpx.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw) -> httpx.Response:
        return self.request("POST", path, **kw)

    def delete(self, path: str) -> httpx.Response:
        return self.request("DELETE", path)

    def stop(self) -> None:
        """The server, and every process under it, stopped (SIGTERM, then SIGKILL to its process group)."""
        if self.processes is not None:
            self.processes.stop(self.process)
        else:
            stop_group(self.process)


def start_server(processes: Processes, work: Path, reader_url: str, name: str, extra: list[str], headers: dict,
                 before=None, command: str = "serve") -> Server:
    """`lcrag serve` (or `lcrag mcp --transport http`) with its own cache directory under ``work``, started through
    ``processes`` (stopped with it, whatever happens); ``before(cache)`` prepares that directory first. One that
    exits, or does not answer within 120 s, is stopped and a RuntimeError with the end of its log."""
    cache = work / name
    cache.mkdir()
    if before:
        before(cache)
    port = free_port()
    transport = ["--transport", "http"] if command == "mcp" else []
    args = [LCRAG, command, *transport, "--port", str(port), "--cache-dir", str(cache), "--llm", "openai:audit",
            "--base-url", reader_url, "--context-window", "8192", *extra]
    log(f"server {name}: {shlex.join(args[1:])}")
    log_file = work / f"{name}.log"
    with log_file.open("w") as err:
        process = processes.popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err)
    server = Server(f"http://127.0.0.1:{port}", cache, process, headers, log_file, processes=processes)
    ready = "/mcp" if command == "mcp" else "/healthz"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if httpx.get(server.url + ready, timeout=2).status_code == 200 or command == "mcp":
                return server
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    server.stop()
    raise RuntimeError(f"server {name} did not start (exit {process.returncode}): "
                       f"{' '.join(log_file.read_text(errors='replace').split())[-300:]}")


def upload(server: Server, collection: str, name: str, data: bytes, **kw) -> httpx.Response:
    return server.post(f"/v1/collections/{collection}/files", files={"file": (name, data)}, **kw)


def wait_state(server: Server, collection: str, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = server.get(f"/v1/collections/{collection}").json()["status"]
        if status["state"] != "indexing":
            return status
        time.sleep(0.1)
    return status


def ask(server: Server, collection: str, question: str = QUESTION, **options) -> httpx.Response:
    timeout = options.pop("timeout", 60)
    return server.post("/v1/ask", json={"collection": collection, "question": question} | options, timeout=timeout)


def collection(server: Server, name: str, files: dict[str, bytes] | None = None) -> dict:
    server.post("/v1/collections", json={"name": name})
    for filename, data in (files or {}).items():
        upload(server, name, filename, data)
    return wait_state(server, name)


def message(reply: httpx.Response) -> str:
    try:
        return str(reply.json()["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return reply.text[:120]


@dataclass
class Case:
    number: str
    name: str
    bound: str
    measured: str


CASES = []


def case(number: str, name: str, bound: str):
    """Registers a measuring function (it returns what it measured); ``bound`` is what the issue asked, shown beside
    the numbers for reading them, not judged."""
    def register(fn):
        CASES.append((number, name, bound, fn))
        return fn
    return register


@dataclass
class Audit:
    """What the cases share: the reader, the work directory, the options, the processes started, and the servers A,
    C and M (:data:`FLAGS`), each started when a case first asks for it (a case run alone starts only its own)."""

    reader: AuditReader
    reader_url: str
    work: Path
    options: argparse.Namespace
    processes: Processes
    started: dict[str, Server] = field(default_factory=dict)
    failed: dict[str, str] = field(default_factory=dict)  # a server that did not start: why (its cases fail at once)
    others: list[Server] = field(default_factory=list)  # servers a case started (their answers are searched too)

    @property
    def a(self) -> Server:  # lcrag serve, loopback, no key, --max-upload-mb 4
        return self.server("a", FLAGS["A"][1:], {}, before=leave_upload_leftover)

    @property
    def c(self) -> Server:  # lcrag serve with its default flags
        return self.server("c", FLAGS["C"][1:], {})

    @property
    def m(self) -> Server:  # lcrag mcp --transport http with its default flags, over planted collections
        return self.server("m", FLAGS["M"][3:], {}, command="mcp",
                           before=lambda cache: plant_mcp_collections(cache, mcp_files(self.work)))

    def server(self, name: str, extra: list[str], headers: dict, **kw) -> Server:
        if name in self.failed:
            raise RuntimeError(self.failed[name])
        if name not in self.started:
            try:
                self.started[name] = self.start_server(name, extra, headers, **kw)
            except RuntimeError as exc:
                self.failed[name] = str(exc)
                raise
        return self.started[name]

    def start_server(self, name: str, extra: list[str], headers: dict, **kw) -> Server:
        return start_server(self.processes, self.work, self.reader_url, name, extra, headers, **kw)

    @property
    def servers(self) -> list[Server]:
        return [*self.started.values(), *self.others]


def timed(fn, *args, **kw):
    started = time.monotonic()
    result = fn(*args, **kw)
    return result, time.monotonic() - started


# == issue 25 =====================================================================================================
# -- results that never mix, resources that never leak -------------------------------------------------------------


def big_text(megabytes: float, seed: int) -> bytes:
    words = ["river", "stone", "field", "cloud", "lamp", "crane", "rope", "hoist", "gear", "valve"]
    line = " ".join(f"{words[(i * 7 + seed) % 10]}{i % 997}" for i in range(40)) + ".\n"
    return (MANUAL + line * int(megabytes * (1 << 20) / len(line))).encode()


@case("25.5", "memory per upload (24 × create, upload 2 MB, ask, delete)",
      "no growth with uploads: resident memory over the last 12 cycles up by less than 24 MB (was +26–32 MB per upload)")
def memory_per_upload(t: Audit):
    rss = []
    for i in range(24):
        collection(t.a, f"mem{i}", {"big.txt": big_text(2, i)})
        ask(t.a, f"mem{i}")
        t.a.delete(f"/v1/collections/mem{i}")
        rss.append(t.a.rss_mb())
    late = rss[-1] - rss[11]
    return (f"RSS after cycles 1, 6, 12, 18, 24: {', '.join(f'{rss[i]:.0f}' for i in (0, 5, 11, 17, 23))} MB "
            f"({late:+.0f} MB over the last 12)")


def docx_bomb(expanded_mb: int) -> bytes:
    """A valid DOCX whose body is ``expanded_mb`` MB of XML that compresses to a few hundred KB."""
    paragraph = b"<w:p><w:r><w:t>bomb</w:t></w:r></w:p>" * 1000
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("[Content_Types].xml", '<?xml version="1.0"?><Types xmlns="http://schemas.openxmlformats.org/'
                   'package/2006/content-types"><Default Extension="rels" ContentType="application/vnd.openxml'
                   'formats-package.relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
                   '<Override PartName="/word/document.xml" ContentType="application/vnd.openxmlformats-'
                   'officedocument.wordprocessingml.document.main+xml"/></Types>')
        z.writestr("_rels/.rels", '<?xml version="1.0"?><Relationships xmlns="http://schemas.openxmlformats.org/'
                   'package/2006/relationships"><Relationship Id="rId1" Type="http://schemas.openxmlformats.org/'
                   'officeDocument/2006/relationships/officeDocument" Target="word/document.xml"/></Relationships>')
        with z.open("word/document.xml", "w", force_zip64=True) as body:
            body.write(b'<?xml version="1.0"?><w:document xmlns:w="http://schemas.openxmlformats.org/'
                       b'wordprocessingml/2006/main"><w:body>')
            for _ in range(expanded_mb * (1 << 20) // len(paragraph)):
                body.write(paragraph)
            body.write(b"</w:body></w:document>")
    return buffer.getvalue()


@case("25.11", "a DOCX bomb (100 MB of XML in a small zip)",
      "refused within 10 s with the file and the limit named; peak resident memory up by less than 200 MB")
def decompression_bomb(t: Audit):
    bomb = docx_bomb(100)
    peak = t.a.peak_since()
    status, seconds = timed(collection, t.a, "bomb", {"bomb.docx": bomb})
    grew = peak()
    said = status.get("error") or "; ".join(status.get("skipped") or [])
    got = f"{len(bomb) >> 10} KB file: {status['state']} in {seconds:.1f} s ({said[:110]!r}); peak RSS {grew:+.0f} MB"
    return got


def leave_upload_leftover(cache: Path) -> None:
    """What kill -9 during an upload's final copy leaves: a hidden temporary file beside the collection's files."""
    files = cache / "collections" / "left" / "files"
    files.mkdir(parents=True)
    (files / "manual.txt").write_text(MANUAL, encoding="utf-8")
    (files / ".upload-k2j4x9").write_bytes(b"\0" * (8 << 20))


# == issue 34: what a small file, a connection or a session may cost ===============================================
WITHIN_S = 5.0  # an amplification file answered or refused within this (issue 34's "done when")
EXTRA_MB = 100.0  # ... with at most this much more memory
PROBE_MS = 100.0  # ... while /healthz (or an MCP client's tools/list) answers within this


def hostile_documents():
    """The builders of issue 34's files (tests/hostile_documents.py): each writes its file, small, from nothing; none
    is committed."""
    path = REPO / "tests" / "hostile_documents.py"
    if str(REPO / "tests") not in sys.path:
        sys.path.insert(0, str(REPO / "tests"))  # its PDF writer is the tests' own (document_fixtures)
    spec = importlib.util.spec_from_file_location("hostile_documents", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def descendants(pid: int) -> list[int]:
    """``pid`` and every process under it (lcrag's parse fork server and its parsing processes)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                todo += [int(c) for c in Path(f"/proc/{current}/task/{task}/children").read_text().split()]
        except OSError:
            pass
    return found


def tree_mb(pid: int) -> float:
    """The proportional set size (PSS: shared pages split between their holders, so the fork server's pages are not
    counted again in each parsing process) of ``pid`` and its descendants, MB."""
    total = 0
    for process in descendants(pid):
        try:
            with open(f"/proc/{process}/smaps_rollup") as rollup:
                total += next(int(line.split()[1]) for line in rollup if line.startswith("Pss:"))
        except (OSError, StopIteration):
            pass
    return total / 1024


def healthz(server: Server):
    """A probe: a new client's GET /healthz on a connection of its own."""
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"

    def probe() -> None:
        with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
            sock.sendall(request)
            got = sock.recv(4096)
        if not got.startswith(b"HTTP/1.1 200 "):
            raise OSError(f"answered {got[:40]!r}")
    return probe


class Meanwhile:
    """What a server went through while a block ran: a probe (a new client's /healthz, by default) every 50 ms and its
    latencies; the server's resident memory at its peak (VmHWM, reset on entry) and the peak PSS of the server with
    the processes under it (its parsing processes, sampled every 0.1 s), each above what it was on entry."""

    def __init__(self, server: Server, probe=None):
        self.server, self.probe = server, probe or healthz(server)
        self.latencies: list[float] = []
        self.failures: list[str] = []

    def __enter__(self) -> "Meanwhile":
        self.peak = self.server.peak_since()
        self.tree_before = self.tree_peak = tree_mb(self.server.process.pid)
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self._probing), threading.Thread(target=self._sampling)]
        for thread in self.threads:
            thread.start()
        return self

    def _probing(self) -> None:
        while not self.stop.is_set():
            started = time.perf_counter()
            try:
                self.probe()
                self.latencies.append(time.perf_counter() - started)
            except Exception as exc:  # noqa: BLE001 - any failure of the probe is what is counted
                self.failures.append(f"{type(exc).__name__}: {str(exc)[:60]}")
            self.stop.wait(0.05)

    def _sampling(self) -> None:
        while not self.stop.is_set():
            self.tree_peak = max(self.tree_peak, tree_mb(self.server.process.pid))
            self.stop.wait(0.1)

    def __exit__(self, *exc) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join()
        self.rss_grew = self.peak()
        self.tree_grew = self.tree_peak - self.tree_before

    @property
    def slowest_ms(self) -> float:
        return max(self.latencies, default=float("nan")) * 1000

    def summary(self, probe: str = "/healthz") -> str:
        failed = f", {len(self.failures)} failed ({self.failures[0]})" if self.failures else ""
        return (f"{probe} max {self.slowest_ms:.0f} ms over {len(self.latencies)}{failed}; RSS {self.rss_grew:+.0f} MB "
                f"(with its parsers {self.tree_grew:+.0f} MB)")


# -- the MCP client and the reader's slow answers ------------------------------------------------------------------
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
HELLO = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "audit", "version": "0"}}}


def rpc_result(response: httpx.Response) -> dict:
    """The JSON-RPC message of a response (plain JSON, or the data line of the SSE stream)."""
    text = response.text
    if "data:" in text:
        text = next(line[5:] for line in text.splitlines() if line.startswith("data:"))
    return json.loads(text)


class Mcp:
    """A plain JSON-RPC client of `lcrag mcp`'s streamable HTTP endpoint, as a hostile client would be."""

    def __init__(self, server: Server):
        self.server, self.url, self.headers, self.ids = server, server.url + "/mcp", dict(ACCEPT), 1
        self.http = httpx.Client(timeout=60)  # one connection, kept alive, as an MCP client holds it

    def open(self) -> "Mcp":
        opened = self.http.post(self.url, json=HELLO, headers=ACCEPT, timeout=30)
        if opened.status_code != 200:
            raise RuntimeError(f"initialize: {opened.status_code} {opened.text[:100]}")
        self.headers |= {"Mcp-Session-Id": opened.headers["mcp-session-id"], "Mcp-Protocol-Version": "2025-06-18"}
        self.http.post(self.url, json={"jsonrpc": "2.0", "method": "notifications/initialized"},
                       headers=self.headers, timeout=30)
        return self

    def body(self, method: str, params: dict) -> bytes:
        self.ids += 1
        # ASCII JSON: a lone surrogate goes as its escape, as a client's JSON library sends it
        return json.dumps({"jsonrpc": "2.0", "id": self.ids, "method": method, "params": params}).encode()

    def rpc(self, method: str, params: dict | None = None, timeout: float = 60) -> dict:
        reply = self.http.post(self.url, content=self.body(method, params or {}), headers=self.headers,
                               timeout=timeout)
        self.server.seen.append(reply.text[:100_000])
        return rpc_result(reply)

    def tool(self, name: str, arguments: dict, timeout: float = 60) -> dict:
        return self.rpc("tools/call", {"name": name, "arguments": arguments}, timeout)["result"]

    def read(self, collection: str, file: str, timeout: float = 60) -> dict:
        return self.rpc("resources/read", {"uri": f"lcrag://collections/{collection}/files/{file}"}, timeout)

    def close(self) -> None:
        try:
            self.http.delete(self.url, headers=self.headers, timeout=30)
        finally:
            self.http.close()


class AuditReader(Stub):
    """The tests' stand-in reader (answering with the context line closest to the question), keeping the end of every
    prompt it gets; a question that says SLOWLY is generated slowly (:class:`AuditReaderHandler`)."""

    def __init__(self):
        self.prompts: list[str] = []
        self.slow: list[dict] = []
        self.slow_seconds = 6.0
        super().__init__(answer=closest_line)

    def start(self) -> None:
        super().start()
        self._server.RequestHandlerClass = AuditReaderHandler


class AuditReaderHandler(_Handler):
    """A question that says SLOWLY is generated slowly, a word every 0.25 s for the reader's ``slow_seconds``, until
    lcrag stops reading it; every other question as the stand-in answers it."""

    def _complete(self, body: dict) -> None:
        prompt = body["messages"][-1]["content"]
        with self.stub.lock:
            self.stub.prompts.append(prompt[-2000:])
        if "SLOWLY" not in prompt:
            return super()._complete(body)
        record = {"question": prompt.rsplit("SLOWLY", 1)[1][:60], "seconds": 0.0, "stopped": False}
        self.stub.slow.append(record)
        started = time.monotonic()
        try:
            self._answer_slowly(body.get("stream"), started)
        except (BrokenPipeError, ConnectionResetError):
            record["stopped"] = True
        record["seconds"] = time.monotonic() - started

    def _answer_slowly(self, stream: bool, started: float) -> None:
        usage = {"prompt_tokens": 1, "completion_tokens": 1}
        if stream:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
        while time.monotonic() - started < self.stub.slow_seconds:
            if stream:
                self._chunk(b'data: {"choices": [{"delta": {"content": " slowly"}}]}\n\n')
            time.sleep(0.25)
        if not stream:
            return self._json({"choices": [{"message": {"content": "slowly"}}], "usage": usage})
        self._chunk(f"data: {json.dumps({'choices': [], 'usage': usage})}\n\n".encode())
        self._chunk(b"data: [DONE]\n\n")
        self._chunk(b"")


def start_reader() -> tuple[AuditReader, str]:
    reader = AuditReader()
    return reader, reader.url


def plant_mcp_collections(cache: Path, files: dict[str, dict[str, bytes]]) -> None:
    """Collections put in `lcrag mcp`'s cache before it starts (MCP has no upload): ``{collection: {file: data}}``."""
    for name, contents in files.items():
        directory = cache / "collections" / name / "files"
        directory.mkdir(parents=True)
        for filename, data in contents.items():
            (directory / filename).write_bytes(data)


def mcp_files(work: Path) -> dict[str, dict[str, bytes]]:
    """M's collections: the crane manual; a 10,000-page PDF tree of 5.9 KB and a 1,000,000-page one (item 6); a
    40 MB text and a 7 MB one (item 9)."""
    hostile = hostile_documents()
    made = work / "mcp-files"
    made.mkdir()
    line = "The wire rope of the crane is inspected every week and the hoist is tested every month.\n"
    return {"ops": {"manual.txt": MANUAL.encode()},
            "pages": {"pages.pdf": hostile.page_tree_pdf(made / "pages.pdf", fan_out=100).read_bytes()},
            "tree": {"tree.pdf": hostile.page_tree_pdf(made / "tree.pdf").read_bytes()},
            "big": {"big.txt": (line * (40_000_000 // len(line))).encode(),
                    "seven.txt": (line * (7_000_000 // len(line))).encode()}}


# -- items 1-4: a small file that asks for unbounded work -----------------------------------------------------------
AMPLIFIED = (f"each file (beside the crane manual, a collection of its own) answered or refused in ≤ {WITHIN_S:.0f} s "
             f"with ≤ {EXTRA_MB:.0f} MB more RSS (the server's, and with its parsing processes), /healthz < "
             f"{PROBE_MS:.0f} ms meanwhile; the collection still answers (7781)")


def hostile_upload(server: Server, label: str, filename: str, data: bytes) -> str:
    """Upload one amplification file beside the crane manual, in a collection of its own, and measure until it is
    indexed: how long, whether it was read or refused, what the server went through meanwhile; then ask."""
    name = "h-" + re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")
    collection(server, name, {"manual.txt": MANUAL.encode()})
    with Meanwhile(server) as meanwhile:
        started = time.monotonic()
        sent = upload(server, name, filename, data)
        status = wait_state(server, name, timeout=600)
        took = time.monotonic() - started
    answered = ask(server, name)
    server.delete(f"/v1/collections/{name}")
    refusal = next((line for line in status.get("skipped") or [] if line.startswith(filename)), None)
    outcome = f"refused ({refusal[len(filename) + 2:][:90]!r})" if refusal else "read"
    text = answered.json().get("text") if answered.status_code == 200 else message(answered)[:60]
    return (f"{label} ({len(data) / 1024:,.1f} KB): upload {sent.status_code}, {outcome} in {took:.1f} s, "
            f"{status['state']}; {meanwhile.summary()}; ask {answered.status_code} {text!r}")


def hostile_files(t: Audit, files: list[tuple[str, str, object]]) -> str:
    """Each (label, file name, builder(path) -> path) made, uploaded to C and measured."""
    made = t.work / "hostile"
    made.mkdir(exist_ok=True)
    rows = [hostile_upload(t.c, label, filename, build(made / filename).read_bytes())
            for label, filename, build in files]
    return " · ".join(rows)


@case("34.1", "DOCX table spans: a cell with gridSpan 300,000,000; a cell merged down 10,000 rows (vMerge)",
      AMPLIFIED + "; each cell read once")
def docx_spans(t: Audit):
    h = hostile_documents()
    return hostile_files(t, [("gridSpan 300M", "span.docx", lambda p: h.spanned_docx(p, span=300_000_000)),
                             ("vMerge 10,000 rows", "merged.docx", lambda p: h.merged_docx(p, rows=10_000))])


@case("34.2", "PDF page trees: one page listed 1000 × 1000 times (1,000,000 pages), the same of blank pages, "
      "a 10,000-page one", AMPLIFIED)
def pdf_page_tree(t: Audit):
    h = hostile_documents()
    return hostile_files(t, [("1,000,000 pages", "tree.pdf", h.page_tree_pdf),
                             ("1,000,000 blank pages", "blank.pdf", h.blank_page_tree_pdf),
                             ("10,000 pages", "pages.pdf", lambda p: h.page_tree_pdf(p, fan_out=100))])


@case("34.3", "EPUB spines: one 900 KB chapter listed 300 and 5,000 times, and 300 times under 300 manifest names",
      AMPLIFIED + "; a repeated chapter read once")
def epub_spine(t: Audit):
    h = hostile_documents()
    return hostile_files(t, [("spine × 300", "spine.epub", lambda p: h.spine_epub(p, repeats=300)),
                             ("spine × 5,000", "spine5000.epub", lambda p: h.spine_epub(p, repeats=5000)),
                             ("300 aliases", "aliases.epub", lambda p: h.spine_epub(p, repeats=300, aliases=300))])


@case("34.4", "Markdown emphasis: '*a_' repeated, 4.5 MB and 12 MB", AMPLIFIED)
def markdown_emphasis(t: Audit):
    h = hostile_documents()
    return hostile_files(t, [("4.5 MB", "emphasis.md", h.emphasis_markdown),
                             ("12 MB", "emphasis12.md", lambda p: h.emphasis_markdown(p, repeats=4_000_000))])


# -- item 6: MCP resources/read of a hostile PDF, while another client lists tools --------------------------------
@case("34.6", "MCP resources/read of a 10,000-page PDF (3 KB) and a 1,000,000-page one, while another "
      "client calls tools/list", f"each read answered or refused in ≤ {WITHIN_S:.0f} s with ≤ {EXTRA_MB:.0f} MB "
      f"more RSS, tools/list < {PROBE_MS:.0f} ms meanwhile; read again: from the parse cache (< 0.5 s)")
def mcp_resource_parse(t: Audit):
    lister = Mcp(t.m).open()
    reader = Mcp(t.m).open()

    def tools_listed() -> None:
        if len(lister.rpc("tools/list", timeout=5)["result"]["tools"]) != 3:
            raise RuntimeError("tools/list without the 3 tools")

    rows = []
    try:
        for name, file in (("pages", "pages.pdf"), ("tree", "tree.pdf")):
            with Meanwhile(t.m, tools_listed) as meanwhile:
                first, took = timed(reader.read, name, file)
            again, again_s = timed(reader.read, name, file)
            said = (first.get("error") or {}).get("message") or \
                f"{len(first['result']['contents'][0]['text']):,} characters"
            rows.append(f"{file}: {said[:110]!r} in {took:.2f} s ({meanwhile.summary('tools/list')}); again in "
                        f"{again_s:.2f} s")
    finally:
        lister.close()
        reader.close()
    return " · ".join(rows)


# -- item 9: MCP resources materialised and buffered ---------------------------------------------------------------
def unread_reads(t: Audit, file: str, count: int = 20) -> tuple[float, float]:
    """``count`` clients each asking for ``file`` of M's "big" collection and never reading the answer: M's peak
    RSS growth while they hold their connections, and its growth once they closed them (before their sessions
    end)."""
    before = t.m.rss_mb()
    peak = t.m.peak_since()
    clients, sockets = [], []
    for _ in range(count):
        client = Mcp(t.m).open()
        body = client.body("resources/read", {"uri": f"lcrag://collections/big/files/{file}"})
        head = (f"POST /mcp HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {len(body)}\r\n"
                + "".join(f"{k}: {v}\r\n" for k, v in client.headers.items()) + "\r\n").encode()
        sock = socket.create_connection(("127.0.0.1", t.m.port))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.sendall(head + body)
        clients.append(client)
        sockets.append(sock)
    time.sleep(5)
    grew = peak()
    for sock in sockets:
        sock.close()
    time.sleep(3)
    kept = t.m.rss_mb() - before
    for client in clients:
        client.close()
    return grew, kept


@case("34.9", "MCP resources: 20 reads of a 40 MB text by clients that never read the answer; then 20 of a 7 MB "
      "one (under the cap) the same way, measured only", "the 40 MB one refused naming --max-resource-mb in a short "
      "error, RSS growth ≤ 100 MB while they wait and after; the 7 MB one read whole by a client that reads")
def mcp_resource_size(t: Audit):
    grew, kept = unread_reads(t, "big.txt")
    under, under_kept = unread_reads(t, "seven.txt")
    reader = Mcp(t.m).open()
    try:
        refused, refused_s = timed(reader.read, "big", "big.txt")
        seven = reader.read("big", "seven.txt")
    finally:
        reader.close()
    said = (refused.get("error") or {}).get("message", "")
    text = seven.get("result", {}).get("contents", [{}])[0].get("text", "")
    got = (f"40 MB × 20 unread: RSS peak {grew:+.0f} MB, {kept:+.0f} MB after they closed; read: {said[:100]!r} "
           f"({len(json.dumps(refused))} bytes, {refused_s:.2f} s) · 7 MB × 20 unread: peak "
           f"{under:+.0f} MB, {under_kept:+.0f} MB after they closed; read: {len(text):,} characters")
    return got


# -- running the audit --------------------------------------------------------------------------------------------
def order(number: str) -> tuple[int, int]:
    issue, item = number.split(".")
    return int(issue), int(item) if item.isdigit() else 99


def run_cases(audit: Audit, only: set[str] | None) -> list[Case]:
    results = []
    for number, name, bound, fn in CASES:
        if only and number not in only:
            continue
        log(f"case {number}: {name}")
        started = time.monotonic()
        try:
            measured = fn(audit)
        except Exception as exc:  # noqa: BLE001 - a case that crashes is reported with what broke, the others go on
            measured = f"not measured: {type(exc).__name__}: {str(exc)[:150]}"
        log(f"  {time.monotonic() - started:.0f} s: {measured}")
        results.append(Case(number, name, bound, measured))
    return sorted(results, key=lambda c: order(c.number))


def table(results: list[Case]) -> str:
    rows = [[c.number.split(".", 1)[1], c.name, c.bound, c.measured.replace("|", "\\|").replace(" · ", "<br>")]
            for c in results]
    return md_table(["#", "case", "the issue's bound (not judged)", "measured"], rows)


def render(results: list[Case], command: str, seconds: float, flags: dict[str, list[str]]) -> str:
    by_issue = {issue: [c for c in results if c.number.startswith(issue + ".")] for issue in ("25", "34")}
    out = [
        "# What hostile files and clients cost the service (issues 25 and 34)", "",
        f"Command: `{command}`  ", f"Machine: {machine()}; `ulimit -n` {resource.getrlimit(resource.RLIMIT_NOFILE)}  ",
        f"Commit: {git_rev()}; {seconds:.0f} s.", "",
        "Real servers on loopback, each with its own temporary cache directory: "
        + "; ".join(f"{name} `lcrag {' '.join(args)}`" for name, args in flags.items())
        + ". Their reader is an OpenAI-compatible stand-in run by the "
        "script (the last word of the context line closest to the question, after a delay the audit sets, or slowly "
        "streamed for a question that says SLOWLY): this is about the service, not answers. Every hostile file "
        "is made by the script (issue 34's by tests/hostile_documents.py's builders); none is "
        "committed.", "",
        "For an amplification file (34.1-34.4, and 34.6 over MCP): the time from its upload until its collection is "
        "indexed (read or refused), the growth of resident memory, both the server's own (VmHWM) and the server's "
        "with its parsing processes (PSS, sampled), the latency of a new client's `/healthz` (MCP: `tools/list`) "
        "every 50 ms meanwhile, and whether the collection still answers. Whether each file is read or refused is "
        "asserted by tests/system/documents/test_parse_sandbox.py and test_parse_service.py.", ""]
    for issue, cases in by_issue.items():
        if cases:
            out += [f"## Issue {issue}", "", table(cases), ""]
    return "\n".join(out)


def git_rev() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=False).stdout.strip() or "unknown"
        dirty = subprocess.run(["git", "-C", str(REPO), "status", "--porcelain", "--untracked-files=no", "src"],
                               capture_output=True, text=True, timeout=10, check=False).stdout.strip()
        return rev + (" (src/ with uncommitted changes)" if dirty else "")
    except OSError:
        return "unknown"


FLAGS = {"A": ["serve", "--max-upload-mb", "4"],
         "C": ["serve"],
         "M": ["mcp", "--transport", "http", "--server-slots", "1"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--cases", "--only", dest="cases", type=case_numbers,
                        help="run only these cases, comma-separated (34.4,34.9): each starts only the servers it uses")
    args = parser.parse_args()
    started = time.monotonic()
    try:
        results = run_audit(args)
    except KeyboardInterrupt:
        log("interrupted: every process the audit started is stopped")
        sys.exit(130)
    command = shlex.join(["python", "benchmarks/bench_service_limits.py", *sys.argv[1:]])
    report = render(results, command, time.monotonic() - started, FLAGS)
    print(report)
    if args.out:
        args.out.write_text(report, encoding="utf-8")


def case_numbers(text: str) -> set[str]:
    known = {number for number, *_ in CASES}
    asked = {n.strip() for n in text.split(",") if n.strip()}
    if not asked or asked - known:
        raise argparse.ArgumentTypeError(f"no such case: {', '.join(sorted(asked - known)) or text!r} (the cases: "
                                         f"{', '.join(sorted(known, key=order))})")
    return asked


def run_audit(args: argparse.Namespace) -> list[Case]:
    """The cases run against servers started as they are needed; every process started (servers, their parsing
    processes) and the reader stopped on the way out, however it goes."""
    with contextlib.ExitStack() as stack:
        work = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lcrag-audit-", ignore_cleanup_errors=True)))
        reader, reader_url = start_reader()
        stack.callback(reader.kill)
        processes = stack.enter_context(Processes())  # left first: the servers stop before their reader and files
        return run_cases(Audit(reader, reader_url, work, args, processes), args.cases)


if __name__ == "__main__":
    main()
