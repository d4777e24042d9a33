"""Service audit (issues 25 and 34): the hostile-client findings replayed against real `lcrag serve` and `lcrag mcp`.

    python benchmarks/audit_service.py --out benchmarks/results/audit_service.md
    python benchmarks/audit_service.py --cases 34.4,34.9     # only these cases (and only the servers they use)

Real servers are started as subprocesses of the installed `lcrag` on free loopback ports, each when a case first
needs it, each with its own temporary --cache-dir: A, `lcrag serve` with a small --max-upload-mb (no key, loopback); B, with --api-key, a narrowed
--strategies and --retrievers; C, `lcrag serve` with its default flags (the files of issue 34); M, `lcrag mcp
--transport http` with its default flags, over collections planted in its cache before it starts; a few cases start
their own (34.12: serve and mcp offering tree). Items 34.7 and 34.8 (21,000 slow connections, 10,000 idle MCP
initializations) are measured by benchmarks/bench_connections.py. Their reader
is the tests' stand-in (tests/reader_servers.py) run by this script (`--llm openai:audit --base-url ...`): it streams its answer
(the last word of the context line closest to the question) after a delay the script sets, or, for a question that
says SLOWLY, a word every 0.25 s until lcrag stops reading, so questions can be made slow on purpose. The reader is a
stand-in: this audit is about the service (HTTP, MCP, limits, collections, memory), not answer quality.

Each case sends what a hostile or careless client sent and compares what came back with what the issue asks for;
the table shows case, expected, got. Every hostile file is made by this script (issue 34's by the builders of
tests/hostile_documents.py), none is committed. Exit status 1 when any case fails.

Every process the audit starts (the servers and their parsing processes) is in a
process group of its own and is stopped however the audit ends: a server that does not start (its cases fail, the
others go on), an exception, Ctrl-C (exit 130) or SIGTERM (exit 143) (benchmarks/common.py's Processes).
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
import unicodedata
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from common import Processes, free_port, log, machine, md_table, stop_group

LCRAG = str(Path(sys.executable).with_name("lcrag"))
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))
from reader_servers import Stub, _Handler, closest_line  # noqa: E402  (the tests' stand-in reader: one copy of it)
KEY = "audit-key-5b1e"
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
    expected: str
    got: str
    passed: bool


CASES = []


def case(number: str, name: str, expected: str):
    """Registers an audit function: it returns (got, passed)."""
    def register(fn):
        CASES.append((number, name, expected, fn))
        return fn
    return register


@dataclass
class Audit:
    """What the cases share: the reader, the work directory, the options, the processes started, and the servers A,
    B, C and M (:data:`FLAGS`), each started when a case first asks for it (a case run alone starts only its own)."""

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
    def b(self) -> Server:  # --api-key, --strategies rag, --retrievers bm25 dense
        return self.server("b", FLAGS["B"][1:], {"Authorization": f"Bearer {KEY}"})

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
# -- security -----------------------------------------------------------------------------------------------------
@case("25.1", "stored XSS: an uploaded HTML page", "a download (octet-stream, attachment, nosniff, sandbox CSP); the "
      "page's CSP allows only its own script")
def stored_xss(t: Audit):
    collection(t.a, "xss", {"page.html": b"<html><body><script>alert(document.domain)</script>Hi</body></html>"})
    r = t.a.get("/v1/collections/xss/files/page.html")
    csp = t.a.get("/").headers.get("content-security-policy", "")
    script_src = re.search(r"script-src ([^;]*)", csp)
    got = (f"{r.status_code} {r.headers.get('content-type')}, {r.headers.get('content-disposition', '')[:10]}, "
           f"nosniff={r.headers.get('x-content-type-options')}, file CSP {r.headers.get('content-security-policy')!r}, "
           f"page script-src {script_src.group(1) if script_src else None!r}")
    return got, (r.headers.get("content-type") == "application/octet-stream"
                 and r.headers.get("content-disposition", "").startswith("attachment")
                 and r.headers.get("x-content-type-options") == "nosniff"
                 and "sandbox" in r.headers.get("content-security-policy", "")
                 and script_src is not None and script_src.group(1).strip() == "'self'")


@case("25.2", "client-chosen server paths (router: a FIFO, /dev/zero, /etc/passwd, a missing file)",
      "400 at once for each, one message whether the path exists or not; /healthz answers meanwhile")
def server_paths(t: Audit):
    # Outside the servers' directory: the messages may quote what the client sent (case 16 looks for the servers').
    client_side = Path(tempfile.mkdtemp(prefix="lcrag-client-"))
    fifo = client_side / "fifo"
    os.mkfifo(fifo)
    collection(t.a, "paths", {"manual.txt": MANUAL.encode()})
    replies = []
    for path in (str(fifo), "/dev/zero", "/etc/passwd", str(client_side / "missing.json")):
        reply, seconds = timed(ask, t.a, "paths", router=path)
        replies.append((reply.status_code, seconds, message(reply).replace(path[:40], "PATH")))
    fifo.unlink()
    client_side.rmdir()
    health, seconds = timed(t.a.get, "/healthz")
    statuses = sorted({r[0] for r in replies})
    slowest = max(r[1] for r in replies)
    same = len({r[2] for r in replies}) == 1
    got = f"{statuses}, slowest {slowest:.2f} s, same message: {same}; /healthz {health.status_code} in {seconds:.2f} s"
    return got, statuses == [400] and slowest < 2 and same and health.status_code == 200


@case("25.3", "cross-site writes and DNS rebinding on the default server",
      "Origin evil + text/plain: 403 (no collection); cross-site upload 403; Host attacker.example 400; "
      "text/plain from a script 415")
def cross_site(t: Audit):
    evil = {"Origin": "https://evil.example", "Content-Type": "text/plain"}
    create = t.a.post("/v1/collections", content=b'{"name": "csrf"}', headers=evil)
    made = t.a.get("/v1/collections/csrf").status_code
    collection(t.a, "mine")
    up = upload(t.a, "mine", "x.txt", b"hello", headers={"Sec-Fetch-Site": "cross-site"})
    rebinding = t.a.get("/v1/collections", headers={"Host": "attacker.example"})
    plain = t.a.post("/v1/collections", content=b'{"name": "plain"}', headers={"Content-Type": "text/plain"})
    got = (f"create {create.status_code} (then GET {made}), upload {up.status_code}, Host {rebinding.status_code}, "
           f"text/plain {plain.status_code}")
    return got, (create.status_code, made, up.status_code, rebinding.status_code, plain.status_code) == \
        (403, 404, 403, 400, 415)


# -- results that never mix, resources that never leak -------------------------------------------------------------
@case("25.4", "stale answers after delete (3 runs)", "an empty re-created collection: 400, never the deleted "
      "document's answer; re-created with another document: that document's answer")
def stale_after_delete(t: Audit):
    got = []
    for run in range(3):
        collection(t.a, "stale", {"manual.txt": MANUAL.encode()})
        first = ask(t.a, "stale").json().get("text")
        t.a.delete("/v1/collections/stale")
        collection(t.a, "stale")
        empty = ask(t.a, "stale")
        collection(t.a, "stale", {"other.txt": MANUAL.replace("7781", f"51{run}0").encode()})
        again = ask(t.a, "stale").json().get("text")
        t.a.delete("/v1/collections/stale")
        got.append((first, empty.status_code, again))
    passed = all(g == ("7781", 400, f"51{i}0") for i, g in enumerate(got))
    return "; ".join(f"{a} / empty {s} / {b}" for a, s, b in got), passed


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
            f"({late:+.0f} MB over the last 12)"), late < 24


@case("25.6", "a JSONL nested 100,000 deep, then a good file",
      "state error naming the file; asking 400 (not 500); after a good file: ready, the bad one skipped, 200")
def nested_jsonl(t: Audit):
    bad = ('{"text": ' + "[" * 100_000 + "]" * 100_000 + "}\n").encode()
    first = collection(t.a, "deep", {"deep.jsonl": bad})
    asked = ask(t.a, "deep").status_code
    second = collection(t.a, "deep", {"manual.txt": MANUAL.encode()})
    answered = ask(t.a, "deep")
    got = (f"{first['state']} ({(first['error'] or '')[:50]!r}), ask {asked}; then {second['state']} "
           f"skipped {len(second['skipped'])}, ask {answered.status_code} {answered.json().get('text')!r}")
    return got, (first["state"] == "error" and "deep.jsonl" in (first["error"] or "") and asked == 400
                 and second["state"] == "ready" and len(second["skipped"]) == 1 and answered.status_code == 200)


def stream_body(server: Server, path: str, content_type: str, head: bytes, total: int,
                length: int | None = None) -> tuple[str, int]:
    """Send ``head`` then zeros up to ``total`` bytes over a raw connection (chunked, or with ``length`` declared),
    stopping when the server answers or closes; the status line it sent (or how it ended) and the bytes sent."""
    port = int(server.url.rsplit(":", 1)[1])
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    framing = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    sock.sendall(f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: {content_type}\r\n"
                 f"{framing}\r\n\r\n".encode())
    block, sent = b"0" * 65536, 0
    frame = (lambda d: d) if length is not None else (lambda d: b"%x\r\n%b\r\n" % (len(d), d))
    try:
        sock.sendall(frame(head))
        while sent < total and not _answered(sock):
            sock.sendall(frame(block))
            sent += len(block)
        sock.settimeout(30)
        reply = sock.recv(4096).decode("latin-1")
        return (reply.split("\r\n", 1)[0] or "closed"), sent
    except (BrokenPipeError, ConnectionResetError):
        return _last_words(sock), sent
    finally:
        sock.close()


def _last_words(sock: socket.socket) -> str:
    """The status line a server sent before closing a connection we were still writing to, if it can be read."""
    try:
        sock.settimeout(2)
        return sock.recv(4096).decode("latin-1").split("\r\n", 1)[0] or "connection closed by the server"
    except OSError:
        return "connection closed by the server"


def _answered(sock: socket.socket) -> bool:
    import select

    return bool(select.select([sock], [], [], 0)[0])


def stored_bytes(server: Server, name: str) -> int:
    directory = server.cache / "collections" / name
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) if directory.exists() else 0


@case("25.7", "a 150 MB upload without Content-Length at --max-upload-mb 4",
      "413 (or the connection closed) after about 4 MB sent; nothing kept on disk")
def chunked_upload(t: Audit):
    collection(t.a, "chunked")
    boundary = "auditboundary"
    head = (f"--{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"big.txt\"\r\n"
            "Content-Type: text/plain\r\n\r\n").encode()
    peak = t.a.peak_since()
    ended, sent = stream_body(t.a, "/v1/collections/chunked/files", f"multipart/form-data; boundary={boundary}",
                              head, 150 << 20)
    time.sleep(0.5)
    kept = stored_bytes(t.a, "chunked")
    got = f"{ended!r} after {sent / (1 << 20):.1f} MB sent; {kept} bytes on disk; peak RSS {peak():+.0f} MB"
    return got, (" 413 " in ended or "closed" in ended) and sent < (16 << 20) and kept < 1024


@case("25.8", "a 200 MB JSON body (declared, then chunked); a 200 KB bad value",
      "413 (or, chunked, the connection closed) after a few MB; an error quoting at most a short prefix")
def unbounded_body(t: Audit):
    peak = t.a.peak_since()
    declared, sent_declared = stream_body(t.a, "/v1/ask", "application/json", b'{"question": "', 200 << 20,
                                          length=200 << 20)
    chunked, sent_chunked = stream_body(t.a, "/v1/ask", "application/json", b'{"question": "', 200 << 20)
    grew = peak()
    bad = t.a.post("/v1/ask", json={"collection": "paths", "question": "q", "strategy": "x" * 200_000})
    got = (f"declared: {declared!r} after {sent_declared >> 20} MB; chunked: {chunked!r} after "
           f"{sent_chunked >> 20} MB; peak RSS {grew:+.0f} MB; bad value {bad.status_code} with a "
           f"{len(message(bad))}-character message")
    return got, (" 413 " in declared and (" 413 " in chunked or "closed" in chunked) and sent_declared < (16 << 20)
                 and sent_chunked < (16 << 20) and grew < 100 and 400 <= bad.status_code < 500
                 and len(message(bad)) < 300)


@case("25.9", "metrics labels: 3,000 requests without the key to random paths",
      "/metrics grows by less than 20 KB (labels are route templates)")
def metrics_labels(t: Audit):
    def size() -> int:
        return len(t.b.get("/metrics").content)

    before = size()
    with httpx.Client(base_url=t.b.url, timeout=30) as client:
        codes = {client.get(f"/v1/{os.urandom(6).hex()}/x{i}").status_code for i in range(3000)}
    after = size()
    return f"/metrics {before} → {after} bytes (answers {sorted(codes)})", after - before < 20_000


@case("25.10", "10 slow asks at once with --max-waiting 8, and a 37-byte upload meanwhile",
      "the asks beyond the queue get 429 with Retry-After at once, the rest 200; the upload answered within 1 s")
def overload(t: Audit):
    collection(t.a, "load", {"manual.txt": MANUAL.encode()})
    collection(t.a, "side")
    t.reader.delay = 1.0
    try:
        with ThreadPoolExecutor(10) as pool:
            # Distinct questions: an answer already given would come from the completion cache, not the reader.
            asks = [pool.submit(ask, t.a, "load", f"{QUESTION} (asked by client {i})") for i in range(10)]
            time.sleep(1.0)
            up, seconds = timed(upload, t.a, "side", "note.txt", b"The side note: the gate code is 4411.\n")
            replies = [a.result() for a in asks]
    finally:
        t.reader.delay = 0.0
    codes = sorted(r.status_code for r in replies)
    retry = all(r.headers.get("retry-after") for r in replies if r.status_code == 429)
    got = f"asks {codes}, Retry-After on each 429: {retry}; upload {up.status_code} in {seconds:.2f} s"
    return got, 429 in codes and set(codes) <= {200, 429} and retry and up.status_code == 201 and seconds < 1


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
    return got, (status["state"] == "error" and "bomb.docx" in said and "limit" in said and seconds < 10
                 and grew < 200)


@case("25.12", "names that collide: договор.txt, счёт.txt, another счёт.txt; over-long names",
      "letters kept, the second счёт.txt numbered (never overwritten); 300-character upload 400, "
      "200-letter download 404")
def colliding_names(t: Audit):
    collection(t.a, "names")
    stored = [upload(t.a, "names", name, text.encode()).json().get("name") for name, text in
              (("договор.txt", "Договор 1."), ("счёт.txt", "Счёт 1."), ("счёт.txt", "Счёт 2."))]
    files = [f["name"] for f in t.a.get("/v1/collections/names").json()["files"]]
    first = t.a.get("/v1/collections/names/files/счёт.txt").text
    long_up = upload(t.a, "names", "n" * 296 + ".txt", b"x").status_code
    long_down = t.a.get("/v1/collections/names/files/" + "ж" * 200 + ".txt").status_code
    got = (f"stored {stored}, listed {files}, счёт.txt holds {first!r}; long upload {long_up}, "
           f"long download {long_down}")
    return got, (stored == ["договор.txt", "счёт.txt", "счёт (2).txt"] and len(files) == 3 and first == "Счёт 1."
                 and long_up == 400 and long_down == 404)


def leave_upload_leftover(cache: Path) -> None:
    """What kill -9 during an upload's final copy leaves: a hidden temporary file beside the collection's files."""
    files = cache / "collections" / "left" / "files"
    files.mkdir(parents=True)
    (files / "manual.txt").write_text(MANUAL, encoding="utf-8")
    (files / ".upload-k2j4x9").write_bytes(b"\0" * (8 << 20))


@case("25.13", "an 8 MB .upload-* left by kill -9 before start-up", "removed at start-up; the collection's file kept")
def upload_leftovers(t: Audit):
    left = sorted(p.name for p in (t.a.cache / "collections" / "left" / "files").iterdir())
    listed = [f["name"] for f in t.a.get("/v1/collections/left").json()["files"]]
    return f"on disk {left}, listed {listed}", left == ["manual.txt"] and listed == ["manual.txt"]


@case("25.14", "per-request cost: max_tokens 100,000,000; a 20,000-character question; strategy lc where only rag "
      "is allowed", "400 at once naming --max-tokens, --max-question-chars, --strategies")
def cost_caps(t: Audit):
    collection(t.a, "paths", {"manual.txt": MANUAL.encode()})  # as case 2 made it (cases run alone too)
    chat = {"model": "lcrag/core/paths", "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 10**8}
    tokens, seconds = timed(t.a.post, "/v1/chat/completions", json=chat)
    long = ask(t.a, "paths", "why " * 5000)
    collection(t.b, "capped", {"manual.txt": MANUAL.encode()})
    lc = ask(t.b, "capped", strategy="lc")
    replies = [(tokens, "--max-tokens"), (long, "--max-question-chars"), (lc, "--strategies")]
    got = "; ".join(f"{r.status_code} {message(r)[:60]!r}" for r, _ in replies) + f" (first in {seconds:.2f} s)"
    return got, all(r.status_code == 400 and flag in message(r) for r, flag in replies) and seconds < 2


BAD_FIELDS = [  # name, the field as sent (raw JSON)
    ("k [1]", '"k": [1]'), ("k {}", '"k": {}'), ('strategy ["rag"]', '"strategy": ["rag"]'),
    ("router 123", '"router": 123'), ("k of 5,000 digits", '"k": ' + "9" * 5000),
    ("nested 50,000 deep", '"k": ' + "[" * 50_000 + "]" * 50_000), ('stream "false"', '"stream": "false"'),
]


def bad_requests(t: Audit) -> list[tuple[str, httpx.Response]]:
    collection(t.a, "paths", {"manual.txt": MANUAL.encode()})  # as case 2 made it (cases run alone too)
    replies = [(name, t.a.post("/v1/ask", content=f'{{"collection": "paths", "question": "q", {field}}}'.encode(),
                               headers={"Content-Type": "application/json"})) for name, field in BAD_FIELDS]
    chat = {"model": "lcrag/core/paths", "messages": [{"role": "user", "content": QUESTION}], "stream": True,
            "stream_options": "x"}
    replies.append(("stream_options \"x\"", t.a.post("/v1/chat/completions", json=chat)))
    replies.append(("300-char upload name", upload(t.a, "paths", "n" * 296 + ".txt", b"x")))
    replies.append(("300-char download name", t.a.get("/v1/collections/paths/files/" + "n" * 300)))
    replies.append(("200K-word question", ask(t.a, "paths", "word " * 200_000)))
    return replies


@case("25.15", "bodies of the wrong shape (k [1], {}, 5,000 digits, nested, stream_options, long names, "
      "a 200K-word question)", "each a 4xx with a short message, never 500, never the reader's address")
def wrong_shapes(t: Audit):
    replies = bad_requests(t)
    reader_port = str(t.reader.port)
    bad = [(n, r.status_code) for n, r in replies
           if not 400 <= r.status_code < 500 or reader_port in r.text or len(message(r)) > 300]
    codes = ", ".join(f"{n}: {r.status_code}" for n, r in replies)
    return (codes if not bad else f"FAILED {bad}; {codes}"), not bad


@case("25.16", "server paths in answers (every answer of this audit; an unreadable upload's status)",
      "no answer quotes the server's directories; files are named as uploaded")
def no_server_paths(t: Audit):
    collection(t.a, "quiet", {"manual.txt": MANUAL.encode(), "broken.pdf": b"%PDF-1.7 not really"})
    skipped = t.a.get("/v1/collections/quiet").json()["status"]["skipped"]
    root = str(t.work)
    seen = [text for server in t.servers for text in server.seen]
    leaks = [text[max(0, text.index(root) - 60):text.index(root) + 60] for text in seen if root in text]
    got = (f"skipped {skipped}; {len(seen)} answers searched, {len(leaks)} quote a server path"
           + (f", e.g. {leaks[0]!r}" if leaks else ""))
    return got, not leaks and len(skipped) == 1 and skipped[0].startswith("broken.pdf")


@case("25.17", "small things: a name with a trailing newline; OpenAI content parts; a lowercase bearer; a wrong key",
      "422/400; 200 with the answer; 200; 401")
def small_things(t: Audit):
    collection(t.a, "paths", {"manual.txt": MANUAL.encode()})  # as case 2 made it (cases run alone too)
    newline = t.a.post("/v1/collections", json={"name": "ops\n"}).status_code
    parts = {"model": "lcrag/core/paths", "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}]}
    chat = t.a.post("/v1/chat/completions", json=parts)
    text = chat.json()["choices"][0]["message"]["content"] if chat.status_code == 200 else message(chat)
    lower = httpx.get(t.b.url + "/v1/collections", headers={"authorization": f"bearer {KEY}"}, timeout=30)
    wrong = httpx.get(t.b.url + "/v1/collections", headers={"Authorization": "Bearer nope"}, timeout=30)
    got = (f"newline {newline}; parts {chat.status_code} {text!r}; bearer {lower.status_code}; "
           f"wrong key {wrong.status_code}")
    return got, newline in (400, 422) and text == "7781" and lower.status_code == 200 and wrong.status_code == 401


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


def tree_cpu(pid: int) -> float:
    """CPU seconds used by ``pid`` and its descendants, those ended and waited for included."""
    total = 0
    for process in descendants(pid):
        try:
            fields = Path(f"/proc/{process}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
    return total / os.sysconf("SC_CLK_TCK")


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

    def ok(self) -> bool:
        return (bool(self.latencies) and not self.failures and self.slowest_ms < PROBE_MS
                and self.rss_grew <= EXTRA_MB and self.tree_grew <= EXTRA_MB)

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


def tool_text(result: dict) -> str:
    return " ".join(part.get("text", "") for part in result.get("content", []))


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


def raw_exchange(server: Server, head: bytes, body: bytes = b"", then=None,
                 wait: float = 10.0) -> tuple[str, dict, str]:
    """Send ``head`` and ``body`` on a connection of its own (then call ``then(sock)``), read until the server closes
    it: the status line, the headers (lower-case names) and the body text it answered with."""
    with socket.create_connection(("127.0.0.1", server.port), timeout=wait) as sock:
        try:
            sock.sendall(head + body)
            if then is not None:
                then(sock)
        except (BrokenPipeError, ConnectionResetError):
            pass
        got = b""
        try:
            while chunk := sock.recv(65536):
                got += chunk
        except (ConnectionResetError, TimeoutError, socket.timeout):
            pass
    top, _, text = got.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:] if ": " in line)
    text = text.decode("utf-8", "replace")
    server.seen.append(text[:100_000])
    return lines[0], {k.lower(): v for k, v in headers.items()}, text


def json_error(headers: dict, text: str) -> str:
    """The message of a JSON error body, else "" (not JSON, or not an error)."""
    if not headers.get("content-type", "").startswith("application/json"):
        return ""
    try:
        return str(json.loads(text)["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return ""


# -- items 1-4: a small file that asks for unbounded work -----------------------------------------------------------
AMPLIFIED = (f"each file (beside the crane manual, a collection of its own) answered or refused in ≤ {WITHIN_S:.0f} s "
             f"with ≤ {EXTRA_MB:.0f} MB more RSS (the server's, and with its parsing processes), /healthz < "
             f"{PROBE_MS:.0f} ms meanwhile; the collection still answers (7781)")


def hostile_upload(server: Server, label: str, filename: str, data: bytes) -> tuple[str, bool]:
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
    passed = (sent.status_code == 201 and took <= WITHIN_S and meanwhile.ok() and status["state"] == "ready"
              and answered.status_code == 200 and text == "7781")
    got = (f"{label} ({len(data) / 1024:,.1f} KB): {outcome} in {took:.1f} s; {meanwhile.summary()}; "
           f"ask {answered.status_code} {text!r}")
    return got, passed


def hostile_files(t: Audit, files: list[tuple[str, str, object]]) -> tuple[str, bool]:
    """Each (label, file name, builder(path) -> path) made, uploaded to C and measured."""
    made = t.work / "hostile"
    made.mkdir(exist_ok=True)
    rows = [hostile_upload(t.c, label, filename, build(made / filename).read_bytes())
            for label, filename, build in files]
    return " · ".join(got for got, _ in rows), all(passed for _, passed in rows)


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


# -- item 5: a collection in error, and the queue before any work ----------------------------------------------------
def broken_jsonl(records: int) -> bytes:
    """Good records, then a broken last one: parsed whole (seconds), then refused, so its collection is in error."""
    lines = (json.dumps({"text": f"record {i} about the harbour crane, its valves, pumps and gauges"})
             for i in range(records))
    return ("\n".join(lines) + "\n{broken\n").encode()


def asks_at_once(server: Server, name: str, count: int, tag: str) -> list[tuple[int, float, str]]:
    def one(i: int):
        reply, seconds = timed(ask, server, name, f"{QUESTION} ({tag} {i})", timeout=300)
        return reply.status_code, seconds, message(reply) if reply.status_code != 200 else reply.json()["text"]

    with ThreadPoolExecutor(count) as pool:
        return list(pool.map(one, range(count)))


@case("34.5", "a collection in error asked 12 times at once; asked 12 times while still indexing "
      "(--max-waiting 8); a cached question on a healthy collection meanwhile",
      "while indexing: the asks beyond the queue 429 at once; in error: 12 × 400 with its error at once, nothing "
      "parsed again (server CPU < 1 s); the healthy question answered in < 3 s")
def error_collection(t: Audit):
    collection(t.c, "healthy", {"manual.txt": MANUAL.encode()})
    ask(t.c, "healthy")  # kept in the completion cache
    t.c.post("/v1/collections", json={"name": "broken"})
    data = broken_jsonl(450_000)
    upload(t.c, "broken", "records.jsonl", data)
    indexing = asks_at_once(t.c, "broken", 12, "indexing")
    status = wait_state(t.c, "broken", timeout=300)
    busy = [seconds for code, seconds, _ in indexing if code == 429]
    cpu = tree_cpu(t.c.process.pid)
    with ThreadPoolExecutor(1) as pool:
        healthy = pool.submit(timed, ask, t.c, "healthy")
        errors, seconds = timed(asks_at_once, t.c, "broken", 12, "error")
        cached, cached_s = healthy.result()
    cpu = tree_cpu(t.c.process.pid) - cpu
    same = all(code == 400 and text == status["error"] for code, _, text in errors)
    got = (f"{len(data) >> 20} MB JSONL: while indexing {sorted(c for c, _, _ in indexing)}, the 429s in at most "
           f"{max(busy, default=0):.2f} s; then {status['state']} ({(status['error'] or '')[:60]!r}); 12 asks: "
           f"{sorted({c for c, _, _ in errors})} with its error: {same}, all in {seconds:.2f} s, server CPU "
           f"{cpu:.2f} s; healthy cached question {cached.status_code} in {cached_s:.2f} s")
    return got, (len(busy) == 4 and max(busy) < 1 and status["state"] == "error" and same and seconds < 3
                 and cpu < 1 and cached.status_code == 200 and cached_s < 3)


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

    rows, passed = [], True
    try:
        for name, file in (("pages", "pages.pdf"), ("tree", "tree.pdf")):
            with Meanwhile(t.m, tools_listed) as meanwhile:
                first, took = timed(reader.read, name, file)
            again, again_s = timed(reader.read, name, file)
            said = (first.get("error") or {}).get("message") or \
                f"{len(first['result']['contents'][0]['text']):,} characters"
            rows.append(f"{file}: {said[:110]!r} in {took:.2f} s ({meanwhile.summary('tools/list')}); again in "
                        f"{again_s:.2f} s")
            passed &= took <= WITHIN_S and meanwhile.ok() and again_s < 0.5 and (again.get("error") == first.get(
                "error"))
    finally:
        lister.close()
        reader.close()
    return " · ".join(rows), passed


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
           f"({len(json.dumps(refused))} bytes, {refused_s:.2f} s) · 7 MB × 20 unread (not judged): peak "
           f"{under:+.0f} MB, {under_kept:+.0f} MB after they closed; read: {len(text):,} characters")
    return got, ("--max-resource-mb" in said and len(json.dumps(refused)) < 1000 and grew <= EXTRA_MB
                 and kept <= EXTRA_MB and len(text) > 6_000_000)


# -- item 10: an MCP client that leaves ----------------------------------------------------------------------------
def mcp_ask(client: Mcp, question: str, timeout: float):
    try:
        return client.tool("ask", {"question": question, "collection": "ops"}, timeout=timeout)
    except httpx.TimeoutException:
        return None


@case("34.10", "MCP over HTTP: a client leaves its question (queued behind another; then while it is generated "
      "for 20 s)", "the queued one never reaches the reader; the generated one stopped, and the next client's "
      "question answered in < 5 s (was 39 s behind a dropped 38 s one)")
def mcp_cancel(t: Audit):
    reader = t.reader
    first, second, third = Mcp(t.m).open(), Mcp(t.m).open(), Mcp(t.m).open()
    try:
        reader.slow_seconds = 6.0
        with ThreadPoolExecutor(1) as pool:
            holding = pool.submit(mcp_ask, first, "SLOWLY what is the reset code of the crane? (holder)", 60)
            deadline = time.monotonic() + 30
            while not reader.slow and time.monotonic() < deadline:
                time.sleep(0.05)
            left = mcp_ask(second, "Which rope is inspected every week? (queued, then gone)", 1.0)
            held = holding.result()
        time.sleep(1.5)
        reached = sum("(queued, then gone)" in p for p in reader.prompts)
        reader.slow_seconds, reader.slow[:] = 20.0, []
        dropped = mcp_ask(second, "SLOWLY which hoist limit holds? (generating, then gone)", 1.5)
        answered, seconds = timed(mcp_ask, third, "What is the hoist limit of the crane? (next client)", 60)
        time.sleep(0.5)
        stopped = reader.slow[0] if reader.slow else {}
    finally:
        reader.slow_seconds = 6.0
        for client in (first, second, third):
            client.close()
    got = (f"holder answered: {held is not None and not held.get('isError')}; the queued question left after 1 s "
           f"reached the reader {reached} times · the generated one left after 1.5 s: generation "
           f"{'stopped' if stopped.get('stopped') else 'NOT stopped'} after {stopped.get('seconds', 0):.1f} s; next "
           f"client answered {answered is not None and not answered.get('isError')} in {seconds:.1f} s")
    return got, (left is None and dropped is None and held is not None and reached == 0 and stopped.get("stopped")
                 and answered is not None and not answered.get("isError") and seconds < 5)


# -- item 11: the reindex race -------------------------------------------------------------------------------------
@case("34.11", "40 rounds × 4 concurrent small uploads to a new collection",
      "every collection ready with its 4 files; no RuntimeError or traceback in the server's log")
def reindex_race(t: Audit):
    log_before = len(t.a.log_text())
    codes, wrong = set(), []
    with ThreadPoolExecutor(4) as pool:
        for round_ in range(40):
            name = f"race{round_}"
            t.a.post("/v1/collections", json={"name": name})
            replies = list(pool.map(lambda i: upload(t.a, name, f"note{i}.txt", f"Note {i} of round {round_}: the "
                                                     f"valve code is {round_}{i}.\n".encode()), range(4)))
            codes |= {r.status_code for r in replies}
            status = wait_state(t.a, name, timeout=60)
            if (status["state"], status["files"], status["done"]) != ("ready", 4, 4):
                wrong.append(f"{name}: {status['state']} {status['done']}/{status['files']}")
            t.a.delete(f"/v1/collections/{name}")
    added = t.a.log_text()[log_before:]
    errors = len(re.findall(r"Traceback|RuntimeError|cannot join thread", added))
    got = f"uploads {sorted(codes)}; {40 - len(wrong)} of 40 ready with 4/4 {wrong[:3]}; {errors} errors in the log"
    return got, codes == {201} and not wrong and errors == 0


# -- item 12: model calls a client orders ---------------------------------------------------------------------------
VALVES = " ".join(f"Section {i}. The valve {i} opens at {10 + i} bar and closes at {5 + i} bar." for i in range(2000))


def prompt_tokens_counted(server: Server) -> float:
    found = re.search(r'^lcrag_tokens_total\{kind="prompt"\} (\S+)$', server.get("/metrics").text, re.M)
    return float(found.group(1)) if found else 0.0


@case("34.12", "retrievers that write summaries with the reader: tree over /v1/ask where the operator offers it "
      "(D: --retrievers bm25 --retrievers tree), raptor there, tree on B (--retrievers bm25 --retrievers dense) and "
      "on A (default); lcrag mcp offering tree: search with it, ask with it twice",
      "where offered, the summarising calls in the request's calls and prompt_tokens (index_cost included) and in "
      "/metrics, once; elsewhere a 400 naming --retrievers; MCP search refuses it (no model call), MCP ask's usage "
      "includes the summaries once")
def paid_retrievers(t: Audit):
    d = t.start_server("d", ["--retrievers", "bm25", "--retrievers", "tree"], {})
    t.others.append(d)
    try:
        collection(d, "valves", {"valves.txt": VALVES.encode()})
        counted = prompt_tokens_counted(d)
        first = ask(d, "valves", "When does valve 7 open?", retriever="tree", timeout=300)
        body = first.json() if first.status_code == 200 else {}
        counted = prompt_tokens_counted(d) - counted
        again = ask(d, "valves", "When does valve 8 open?", retriever="tree", timeout=300)
        raptor = ask(d, "valves", "When does valve 9 open?", retriever="raptor")
    finally:
        d.stop()
    calls = body.get("calls", [])
    built = [c for c in calls if c["stage"].startswith("index:")]
    billed = (len(built) == 1 and built[0]["prompt_tokens"] == (body.get("index_cost") or {}).get("prompt_tokens")
              and built[0]["prompt_tokens"] > 0 and body["prompt_tokens"] == sum(c["prompt_tokens"] for c in calls))
    later = [c["stage"] for c in again.json().get("calls", [])] if again.status_code == 200 else [again.status_code]
    for server in (t.a, t.b):
        collection(server, "paid", {"manual.txt": MANUAL.encode()})
    refusals = [ask(t.b, "paid", retriever="tree"), ask(t.a, "paid", retriever="tree"), raptor]
    plain = ask(t.b, "paid", retriever="bm25")
    searched, mcp_usage, mcp_calls = mcp_with_tree(t)
    got = (f"D tree: {first.status_code}, calls {[c['stage'] for c in calls]}, index "
           f"{built[0]['prompt_tokens'] if built else 0} of {body.get('prompt_tokens')} prompt tokens (calls sum "
           f"{sum(c['prompt_tokens'] for c in calls)}), "
           f"/metrics +{counted:.0f}; next question's calls {later} · refused: "
           + ", ".join(f"{r.status_code} {message(r)[:50]!r}" for r in refusals)
           + f" · B bm25 {plain.status_code} · MCP with tree offered: search {tool_text(searched)[:70]!r}; two asks: "
           f"usage {mcp_usage} prompt tokens, {mcp_calls} reader calls")
    return got, (billed and counted == body.get("prompt_tokens") and not any(s.startswith("index:") for s in later)
                 and all(r.status_code == 400 and "--retrievers" in message(r) for r in refusals)
                 and plain.status_code == 200 and searched.get("isError") is True
                 and "no model call" in tool_text(searched) and mcp_calls[0] > mcp_calls[1]
                 and mcp_usage[0] > 2 * mcp_usage[1])


def mcp_with_tree(t: Audit) -> tuple[dict, list[int], list[int]]:
    """`lcrag mcp --retrievers bm25 --retrievers tree` over the valves: search with tree (refused: it makes no model
    call), then two asks with it: each one's usage (prompt tokens) and the reader calls it made."""
    valves = {"valves": {"valves.txt": VALVES.encode()}}
    server = t.start_server("m-tree", ["--retrievers", "bm25", "--retrievers", "tree"], {},
                          command="mcp", before=lambda cache: plant_mcp_collections(cache, valves))
    t.others.append(server)
    client = Mcp(server).open()
    usage, calls = [], []
    try:
        searched = client.tool("search", {"query": "valve 7", "collection": "valves", "retriever": "tree"})
        for number in (12, 13):
            prompts = len(t.reader.prompts)
            asked = client.tool("ask", {"question": f"When does valve {number} open?", "collection": "valves",
                                        "retriever": "tree"}, timeout=300)
            calls.append(len(t.reader.prompts) - prompts)
            usage.append((asked.get("structuredContent") or {}).get("usage", {}).get("prompt_tokens", 0))
    finally:
        client.close()
        server.stop()
    return searched, usage, calls


# -- items 13, 14: wrong answers to mistakes -----------------------------------------------------------------------
SURROGATES = [  # path, body (raw JSON, \\u escapes as a client's JSON library writes them), the field named
    ("/v1/ask", '{"collection": "uni", "question": "Reset \\ud800 code?"}', "question"),
    ("/v1/ask", '{"collection": "uni", "question": "Reset code?", "history": [{"role": "user", '
     '"content": "a\\udfffb"}]}', "history[0].content"),
    ("/v1/chat/completions", '{"model": "lcrag/uni", "messages": [{"role": "user", "content": "x\\ud800"}]}',
     "messages[0].content"),
    ("/v1/chat/completions", '{"model": "lcrag/uni", "messages": [{"role": "user", "content": "hi"}, '
     '{"role": "assistant", "content": "\\ud83d"}, {"role": "user", "content": "Reset code?"}]}',
     "messages[1].content"),
]


@case("34.13", "a lone surrogate (\\ud800) in a question, a history message, chat messages (streamed or not); in "
      "MCP ask and search", "400 JSON naming the field ('... not valid Unicode text'); MCP: refused naming the lone "
      "surrogate (the SDK's JSON parser: -32700; or lcrag's tool error naming the field), the session going on")
def surrogates(t: Audit):
    collection(t.a, "uni", {"manual.txt": MANUAL.encode()})
    wrong = []
    for path, body, name in SURROGATES:
        for stream in (False, True):
            reply = t.a.post(path, content=body[:-1] + f', "stream": {json.dumps(stream)}}}',
                             headers={"Content-Type": "application/json"})
            if reply.status_code != 400 or not message(reply).startswith(f"{name}: not valid Unicode text"):
                wrong.append(f"{path} {name} stream={stream}: {reply.status_code} {reply.text[:60]!r}")
    client = Mcp(t.m).open()
    try:
        tools = [(client.rpc("tools/call", {"name": "ask", "arguments": {"question": "a\ud800", "collection": "ops"}}),
                  "question"),
                 (client.rpc("tools/call", {"name": "search", "arguments": {"query": "b\udc00", "collection": "ops"}}),
                  "query")]
        after = client.tool("ask", {"question": QUESTION, "collection": "ops"})
    finally:
        client.close()
    said = []
    for answer, name in tools:
        text = (answer.get("error") or {}).get("message") or tool_text(answer.get("result", {}))
        said.append(text)
        parse_error = (answer.get("error") or {}).get("code") == -32700
        if not (parse_error or f"{name}: not valid Unicode text" in text and answer["result"].get("isError")):
            wrong.append(f"MCP {name}: {str(answer)[:80]!r}")
    healthy = t.a.get("/healthz").status_code
    answered = (after.get("structuredContent") or {}).get("answer")
    got = (f"{len(SURROGATES) * 2 - sum(w.startswith('/') for w in wrong)} of {len(SURROGATES) * 2} HTTP 400 naming "
           f"the field, e.g. {message(reply)[:70]!r}; /healthz {healthy} · MCP: {said[0][:70]!r}, {said[1][:70]!r}; "
           f"then ask answered {answered!r}" + (f"; WRONG: {wrong[:3]}" if wrong else ""))
    return got, not wrong and healthy == 200 and answered == "7781"


def declared_body(server: Server, path: str, content_type: str, size: int, extra: str = "") -> tuple[str, dict, str]:
    head = (f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: {content_type}\r\nContent-Length: {size}\r\n"
            f"{extra}\r\n").encode()
    return raw_exchange(server, head, b"x" * 1000, wait=10)  # the rest is never sent


@case("34.14", "bodies over --max-body-kb (1024) or --max-upload-mb (4) with Content-Length (2 MB ask, 8 MB upload, "
      "2 MB to /mcp), the ask sent whole too", "413 JSON naming the flag, before the body is read")
def declared_too_large(t: Audit):
    collection(t.a, "big413")
    replies = [(declared_body(t.a, "/v1/ask", "application/json", 2 << 20), "--max-body-kb"),
               (declared_body(t.a, "/v1/collections/big413/files", "multipart/form-data; boundary=x", 8 << 20),
                "--max-upload-mb"),
               (declared_body(t.m, "/mcp", "application/json", 2 << 20, "Accept: application/json, text/event-stream"
                              "\r\n"), "lcrag mcp --max-body-kb")]
    whole = t.a.post("/v1/ask", content=b"{" + b" " * (2 << 20) + b"}", headers={"Content-Type": "application/json"})
    rows, passed = [], True
    for (status, headers, text), flag in replies:
        said = json_error(headers, text)
        rows.append(f"{status[9:]} {headers.get('content-type')} {said[:60]!r}")
        passed &= " 413 " in status and flag in said
    rows.append(f"whole: {whole.status_code} {message(whole)[:50]!r}")
    return "; ".join(rows), passed and whole.status_code == 413 and "--max-body-kb" in message(whole)


# -- items 15, 16: collections under races and storage failures ----------------------------------------------------
def lock(path: Path, locked: bool) -> None:
    """Make a directory immutable (root: chattr +i, which root's writes obey too) or writable again; without root,
    read-only (chmod), which binds everyone else."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i" if locked else "-i", str(path)], check=True)
    else:
        path.chmod(0o555 if locked else 0o755)


def full_disk(t: Audit) -> tuple[str, bool]:
    """An upload to a collection whose folder is a 1 MB file system (a full disk): 507 JSON without paths; then a
    small file fits. Needs root (mount); reported as not tried without it."""
    collection(t.a, "full")
    files = t.a.cache / "collections" / "full" / "files"
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(files)], capture_output=True)
    if mounted.returncode != 0:
        return "full disk not tried (mounting a 1 MB file system needs root)", True
    try:
        refused = upload(t.a, "full", "big.txt", big_text(2, 3))
        small = upload(t.a, "full", "manual.txt", MANUAL.encode())
        wait_state(t.a, "full")
    finally:
        subprocess.run(["umount", "-l", str(files)], check=False)
    t.a.delete("/v1/collections/full")
    got = f"full disk: {refused.status_code} {message(refused)!r}, then a small file {small.status_code}"
    return got, (refused.status_code == 507 and refused.headers["content-type"] == "application/json"
                 and "No space left" in message(refused) and str(t.work) not in refused.text
                 and small.status_code == 201)


def stuck_files(t: Audit) -> tuple[str, bool]:
    """A collection whose files cannot be removed (immutable): DELETE takes it away all the same; an upload into an
    immutable folder: 500 JSON without paths."""
    collection(t.a, "stuck", {"manual.txt": MANUAL.encode()})
    files = t.a.cache / "collections" / "stuck" / "files"
    lock(files, True)
    try:
        refused = upload(t.a, "stuck", "more.txt", b"More about the crane.\n")
        deleted = t.a.delete("/v1/collections/stuck")
    finally:
        for folder in [files] + list((t.a.cache / "collections").glob(".deleted-stuck-*/files")):
            if folder.exists():
                lock(folder, False)
    after = t.a.get("/v1/collections/stuck").status_code
    listed = "stuck" in [c["name"] for c in t.a.get("/v1/collections").json()["data"]]
    again = t.a.post("/v1/collections", json={"name": "stuck"}).status_code
    t.a.delete("/v1/collections/stuck")
    got = (f"immutable folder: upload {refused.status_code} {message(refused)!r}; DELETE {deleted.status_code}, "
           f"then GET {after}, listed {listed}, created again {again}")
    return got, (refused.status_code == 500 and refused.headers["content-type"] == "application/json"
                 and str(t.work) not in refused.text and "storage failed" in message(refused)
                 and deleted.status_code == 200 and after == 404 and not listed and again == 201)


def unwritable_index(t: Audit) -> tuple[str, bool]:
    """The index cache immutable: the collection's error says the storage failed, naming no server path."""
    indexes = t.a.cache / "indexes"
    indexes.mkdir(exist_ok=True)
    lock(indexes, True)
    try:
        fresh = f"A fresh note {time.time()}: the gate code is 3141.\n".encode()  # never indexed before
        status = collection(t.a, "noindex", {"fresh.txt": fresh})
    finally:
        lock(indexes, False)
    t.a.delete("/v1/collections/noindex")
    error = status.get("error") or ""
    got = f"index cache immutable: {status['state']} {error!r}"
    return got, status["state"] == "error" and "storage failed" in error and str(t.work) not in error and \
        not re.search(r"/\w+/", error)


@case("34.16", "storage failures: a full disk (a 1 MB tmpfs), an immutable collection folder (upload, DELETE), an "
      "immutable index cache", "507 / 500 JSON saying the storage failed, without a server path; DELETE takes the "
      "collection away (GET 404, the name free again); the collection's error without a path")
def storage_failures(t: Audit):
    rows = [full_disk(t), stuck_files(t), unwritable_index(t)]
    return " · ".join(got for got, _ in rows), all(ok for _, ok in rows)


# -- item 17 and the names ------------------------------------------------------------------------------------------
@case("34.names", "names: symbolic links planted among a collection's files and in the collections folder; "
      "paypal.txt then pаypal.txt (Cyrillic а); a file asked for by its NFD name",
      "links never listed, served, read or deleted through; the look-alike refused (400, naming the scripts); the "
      "NFD name finds the file")
def names(t: Audit):
    collection(t.a, "planted", {"manual.txt": MANUAL.encode()})
    root = t.a.cache / "collections"
    secret = t.work / "secret.txt"
    secret.write_text("The server's secret word is mandrake.\n")
    (root / "planted" / "files" / "planted.txt").symlink_to(secret)
    elsewhere = t.work / "elsewhere" / "files"
    elsewhere.mkdir(parents=True)
    (elsewhere / "secret.txt").symlink_to(secret)
    (root / "linked").symlink_to(elsewhere.parent)
    upload(t.a, "planted", "note.txt", b"A note: the gate opens at six.\n")  # indexed again, links among the files
    wait_state(t.a, "planted")
    served = t.a.get("/v1/collections/planted/files/planted.txt").status_code
    listed = [f["name"] for f in t.a.get("/v1/collections/planted").json()["files"]]
    collections_listed = [c["name"] for c in t.a.get("/v1/collections").json()["data"]]
    through = t.a.get("/v1/collections/linked/files/secret.txt").status_code
    deleted = t.a.delete("/v1/collections/linked").status_code
    answered = ask(t.a, "planted", "What is the server's secret word?").json().get("text")
    look = (upload(t.a, "planted", "paypal.txt", b"Pay.\n").status_code,
            upload(t.a, "planted", "p\u0430ypal.txt", b"P.\n"))
    nfd = upload(t.a, "planted", unicodedata.normalize("NFD", "café.txt"), b"Caf\xc3\xa9 menu.\n").json().get("name")
    forms = [t.a.get("/v1/collections/planted/files/" + unicodedata.normalize(f, "café.txt")).status_code
             for f in ("NFC", "NFD")]
    got = (f"planted.txt served {served}, listed {listed}, 'linked' listed {'linked' in collections_listed}, read "
           f"through {through}, deleted {deleted}, secret still there {secret.exists()}, answer {answered!r}; "
           f"paypal.txt {look[0]}, look-alike {look[1].status_code} {message(look[1])[:70]!r}; café.txt NFD stored "
           f"as {nfd!r} (NFC: {nfd == 'café.txt'}), fetched NFC/NFD {forms}")
    return got, (served == 404 and listed == ["manual.txt", "note.txt"] and "linked" not in collections_listed
                 and through == 404 and deleted == 404 and secret.exists() and answered != "mandrake"
                 and look[0] == 201 and look[1].status_code == 400 and "Cyrillic" in message(look[1])
                 and nfd == "café.txt" and forms == [200, 200])


# -- running the audit --------------------------------------------------------------------------------------------
LAST = {"25.16": 1}  # 25.16 searches every answer, so it runs last


def order(number: str) -> tuple[int, int]:
    issue, item = number.split(".")
    return int(issue), int(item) if item.isdigit() else 99


def run_cases(audit: Audit, only: set[str] | None) -> list[Case]:
    results = []
    for number, name, expected, fn in sorted(CASES, key=lambda c: LAST.get(c[0], 0)):
        if only and number not in only:
            continue
        log(f"case {number}: {name}")
        started = time.monotonic()
        try:
            got, passed = fn(audit)
        except Exception as exc:  # noqa: BLE001 - a case that crashes is a failed case, reported with what broke
            got, passed = f"audit error: {type(exc).__name__}: {str(exc)[:150]}", False
        log(f"  {'pass' if passed else 'FAIL'} in {time.monotonic() - started:.0f} s: {got}")
        results.append(Case(number, name, expected, got, passed))
    return sorted(results, key=lambda c: order(c.number))


def table(results: list[Case]) -> str:
    rows = [[c.number.split(".", 1)[1], c.name, c.expected, c.got.replace("|", "\\|").replace(" · ", "<br>"),
             "pass" if c.passed else "**FAIL**"] for c in results]
    return md_table(["#", "case", "expected", "got", ""], rows)


def render(results: list[Case], command: str, seconds: float, flags: dict[str, list[str]]) -> str:
    passed = sum(c.passed for c in results)
    by_issue = {issue: [c for c in results if c.number.startswith(issue + ".")] for issue in ("25", "34", "42")}
    out = [
        "# Service audit (issues 25, 34 and 42)", "",
        f"Command: `{command}`  ", f"Machine: {machine()}; `ulimit -n` {resource.getrlimit(resource.RLIMIT_NOFILE)}  ",
        f"Commit: {git_rev()}; {seconds:.0f} s; **{passed} of {len(results)} cases pass.**", "",
        "Real servers on loopback, each with its own temporary cache directory: "
        + "; ".join(f"{name} `lcrag {' '.join(args)}`" for name, args in flags.items())
        + "; D `lcrag serve --retrievers bm25 --retrievers tree` and `lcrag mcp --transport http --retrievers bm25 "
        "--retrievers tree` (started by case 34.12). Their reader is an OpenAI-compatible stand-in run by the "
        "script (the last word of the context line closest to the question, after a delay the audit sets, or slowly "
        "streamed for a question that says SLOWLY): the audit is about the service, not answers. Every hostile file "
        "is made by the script (issue 34's by tests/hostile_documents.py's builders); none is "
        "committed.", "",
        "An amplification file (34.1-34.4, and 34.6 over MCP) passes when it is **answered or refused** within "
        f"{WITHIN_S:.0f} s of its upload (until its collection is indexed) with at most {EXTRA_MB:.0f} MB more "
        "resident memory, both the server's own (VmHWM) and the server's with its parsing processes (PSS, sampled), "
        f"while a new client's `/healthz` (MCP: `tools/list`) answers in < {PROBE_MS:.0f} ms every 50 ms, and the "
        "collection still answers. The DOCX spans and the EPUB spines are now read with bounded work (each cell "
        "once, a repeated chapter once) rather than refused; the PDF page trees are refused at once.", ""]
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
         "B": ["serve", "--api-key", KEY, "--strategies", "rag", "--retrievers", "bm25", "--retrievers", "dense"],
         "C": ["serve"],
         # one question at a time at the reader, as before replicas answered several at once: 34.10's second client
         # queues behind the first (with the default 4 slots it would reach the reader at once)
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
    command = shlex.join(["python", "benchmarks/audit_service.py", *sys.argv[1:]])
    report = render(results, command, time.monotonic() - started, FLAGS)
    print(report)
    if args.out:
        args.out.write_text(report, encoding="utf-8")
    sys.exit(0 if all(c.passed for c in results) else 1)


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
