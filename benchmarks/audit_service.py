"""Service audit (issue 25): the hostile-client findings replayed against a real `lcrag serve`.

    python benchmarks/audit_service.py --out benchmarks/results/audit_service.md

Two real servers are started as subprocesses of the installed `lcrag` on free loopback ports, each with its own
temporary --cache-dir: A, the default (no key, loopback), and B, with --api-key and a narrowed --strategies. Their
reader is a small OpenAI-compatible server this script runs (`--llm openai:audit --base-url ...`): it streams its
answer (the last word of the context line closest to the question) after a delay the script sets, so questions can
be made slow on purpose. The reader is a stand-in: this audit is about the service (HTTP, limits, collections,
memory), not answer quality. Each case sends what a hostile or careless client sent and compares what came back
with what the issue asks for; the table shows case, expected, got. Exit status 1 when any case fails.
"""

from __future__ import annotations

import argparse
import io
import os
import re
import shlex
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from common import log, machine, md_table
import stub_reader
from stub_reader import Reader

LCRAG = str(Path(sys.executable).with_name("lcrag"))
KEY = "audit-key-5b1e"
MANUAL = ("Crane manual.\nThe reset code of the crane is 7781.\nThe hoist limit of the crane is 12 tonnes.\n"
          "Inspect the wire rope of the crane every week.\n")
QUESTION = "What is the reset code of the crane?"


# -- the servers under audit --------------------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Server:
    url: str
    cache: Path
    process: subprocess.Popen
    headers: dict
    seen: list[str] = field(default_factory=list)  # every answer's text, searched for server paths (item 16)

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

    def request(self, method: str, path: str, **kw) -> httpx.Response:
        reply = httpx.request(method, self.url + path, headers=self.headers | kw.pop("headers", {}), timeout=60, **kw)
        self.seen.append(reply.text[:100_000])
        return reply

    def get(self, path: str, **kw) -> httpx.Response:
        return self.request("GET", path, **kw)

    def post(self, path: str, **kw) -> httpx.Response:
        return self.request("POST", path, **kw)

    def delete(self, path: str) -> httpx.Response:
        return self.request("DELETE", path)


def start_server(work: Path, reader_url: str, name: str, extra: list[str], headers: dict,
                 before=None) -> Server:
    cache = work / name
    cache.mkdir()
    if before:
        before(cache)
    port = free_port()
    args = [LCRAG, "serve", "--port", str(port), "--cache-dir", str(cache), "--llm", "openai:audit",
            "--base-url", reader_url, "--context-window", "8192", *extra]
    log(f"server {name}: {shlex.join(args[1:])}")
    process = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                               stderr=(work / f"{name}.log").open("w"))
    server = Server(f"http://127.0.0.1:{port}", cache, process, headers)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(server.url + "/healthz", timeout=2).status_code == 200:
                return server
        except httpx.TransportError:
            time.sleep(0.2)
    raise SystemExit(f"server {name} did not start: {(work / f'{name}.log').read_text()[-2000:]}")


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
    return server.post("/v1/ask", json={"collection": collection, "question": question} | options)


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
    a: Server  # the default: loopback, no key
    b: Server  # --api-key, --strategies rag
    reader: Reader
    work: Path


def timed(fn, *args, **kw):
    started = time.monotonic()
    result = fn(*args, **kw)
    return result, time.monotonic() - started


# -- security -----------------------------------------------------------------------------------------------------
@case("1", "stored XSS: an uploaded HTML page", "a download (octet-stream, attachment, nosniff, sandbox CSP); the "
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


@case("2", "client-chosen server paths (router: a FIFO, /dev/zero, /etc/passwd, a missing file)",
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


@case("3", "cross-site writes and DNS rebinding on the default server",
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
@case("4", "stale answers after delete (3 runs)", "an empty re-created collection: 400, never the deleted "
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


@case("5", "memory per upload (24 × create, upload 2 MB, ask, delete)",
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


@case("6", "a JSONL nested 100,000 deep, then a good file",
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


@case("7", "a 150 MB upload without Content-Length at --max-upload-mb 4",
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


@case("8", "a 200 MB JSON body (declared, then chunked); a 200 KB bad value",
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


@case("9", "metrics labels: 3,000 requests without the key to random paths",
      "/metrics grows by less than 20 KB (labels are route templates)")
def metrics_labels(t: Audit):
    def size() -> int:
        return len(t.b.get("/metrics").content)

    before = size()
    with httpx.Client(base_url=t.b.url, timeout=30) as client:
        codes = {client.get(f"/v1/{os.urandom(6).hex()}/x{i}").status_code for i in range(3000)}
    after = size()
    return f"/metrics {before} → {after} bytes (answers {sorted(codes)})", after - before < 20_000


@case("10", "10 slow asks at once with --max-waiting 8, and a 37-byte upload meanwhile",
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


@case("11", "a DOCX bomb (100 MB of XML in a small zip)",
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


@case("12", "names that collide: договор.txt, счёт.txt, another счёт.txt; over-long names",
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


@case("13", "an 8 MB .upload-* left by kill -9 before start-up", "removed at start-up; the collection's file kept")
def upload_leftovers(t: Audit):
    left = sorted(p.name for p in (t.a.cache / "collections" / "left" / "files").iterdir())
    listed = [f["name"] for f in t.a.get("/v1/collections/left").json()["files"]]
    return f"on disk {left}, listed {listed}", left == ["manual.txt"] and listed == ["manual.txt"]


@case("14", "per-request cost: max_tokens 100,000,000; a 20,000-character question; strategy lc where only rag "
      "is allowed", "400 at once naming --max-tokens, --max-question-chars, --strategies")
def cost_caps(t: Audit):
    collection(t.a, "paths", {"manual.txt": MANUAL.encode()})  # as case 2 made it (cases run alone too)
    chat = {"model": "lcrag/paths", "messages": [{"role": "user", "content": QUESTION}], "max_tokens": 10**8}
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
    chat = {"model": "lcrag/paths", "messages": [{"role": "user", "content": QUESTION}], "stream": True,
            "stream_options": "x"}
    replies.append(("stream_options \"x\"", t.a.post("/v1/chat/completions", json=chat)))
    replies.append(("300-char upload name", upload(t.a, "paths", "n" * 296 + ".txt", b"x")))
    replies.append(("300-char download name", t.a.get("/v1/collections/paths/files/" + "n" * 300)))
    replies.append(("200K-word question", ask(t.a, "paths", "word " * 200_000)))
    return replies


@case("15", "bodies of the wrong shape (k [1], {}, 5,000 digits, nested, stream_options, long names, "
      "a 200K-word question)", "each a 4xx with a short message, never 500, never the reader's address")
def wrong_shapes(t: Audit):
    replies = bad_requests(t)
    reader_port = str(t.reader.server_address[1])
    bad = [(n, r.status_code) for n, r in replies
           if not 400 <= r.status_code < 500 or reader_port in r.text or len(message(r)) > 300]
    codes = ", ".join(f"{n}: {r.status_code}" for n, r in replies)
    return (codes if not bad else f"FAILED {bad}; {codes}"), not bad


@case("16", "server paths in answers (every answer of this audit; an unreadable upload's status)",
      "no answer quotes the server's directories; files are named as uploaded")
def no_server_paths(t: Audit):
    collection(t.a, "quiet", {"manual.txt": MANUAL.encode(), "broken.pdf": b"%PDF-1.7 not really"})
    skipped = t.a.get("/v1/collections/quiet").json()["status"]["skipped"]
    root = str(t.work)
    leaks = [text[max(0, text.index(root) - 60):text.index(root) + 60] for text in t.a.seen + t.b.seen if root in text]
    got = (f"skipped {skipped}; {len(t.a.seen) + len(t.b.seen)} answers searched, {len(leaks)} quote a server path"
           + (f", e.g. {leaks[0]!r}" if leaks else ""))
    return got, not leaks and len(skipped) == 1 and skipped[0].startswith("broken.pdf")


@case("17", "small things: a name with a trailing newline; OpenAI content parts; a lowercase bearer; a wrong key",
      "422/400; 200 with the answer; 200; 401")
def small_things(t: Audit):
    collection(t.a, "paths", {"manual.txt": MANUAL.encode()})  # as case 2 made it (cases run alone too)
    newline = t.a.post("/v1/collections", json={"name": "ops\n"}).status_code
    parts = {"model": "lcrag/paths", "messages": [{"role": "user", "content": [{"type": "text", "text": QUESTION}]}]}
    chat = t.a.post("/v1/chat/completions", json=parts)
    text = chat.json()["choices"][0]["message"]["content"] if chat.status_code == 200 else message(chat)
    lower = httpx.get(t.b.url + "/v1/collections", headers={"authorization": f"bearer {KEY}"}, timeout=30)
    wrong = httpx.get(t.b.url + "/v1/collections", headers={"Authorization": "Bearer nope"}, timeout=30)
    got = (f"newline {newline}; parts {chat.status_code} {text!r}; bearer {lower.status_code}; "
           f"wrong key {wrong.status_code}")
    return got, newline in (400, 422) and text == "7781" and lower.status_code == 200 and wrong.status_code == 401


# -- a test command that passes on a fresh machine -----------------------------------------------------------------
REPO = Path(__file__).resolve().parents[1]


def readme_test_command() -> str:
    block = REPO.joinpath("README.md").read_text(encoding="utf-8").split("## Quick start", 1)[1]
    return next(line for line in block.splitlines() if "pytest" in line).strip()


@case("18", "examples name only data the project ships", "no file under examples/ names ../shared")
def examples_data(t: Audit):
    naming = [p.name for p in REPO.joinpath("examples").rglob("*") if p.is_file()
              and "shared/" in p.read_text(encoding="utf-8", errors="replace")]
    return f"{len(naming)} files name ../shared {naming}", not naming


@case("19", "the README's test command installs the browser tests' system packages",
      "it runs tests/install-system-packages.sh, which installs chromium")
def installs_chromium(t: Audit):
    command = readme_test_command()
    script = REPO / "tests" / "install-system-packages.sh"
    installs = script.exists() and "chromium" in script.read_text(encoding="utf-8")
    return f"{command[:70]!r}…; installs chromium: {installs}", command.startswith(
        "sh tests/install-system-packages.sh") and installs


@case("20", ".ci/run runs the README's test command", "its last command is the README's, verbatim")
def ci_runs_readme(t: Audit):
    lines = [line.strip() for line in REPO.joinpath(".ci", "run").read_text().splitlines() if line.strip()
             and not line.lstrip().startswith("#")]
    same = lines[-1] == readme_test_command()
    return f"last line {'is' if same else 'is not'} the README's command", same


# -- running the audit --------------------------------------------------------------------------------------------
def run_cases(audit: Audit, only: set[str] | None) -> list[Case]:
    # "16" searches every answer, so it runs after the others.
    ordered = sorted(CASES, key=lambda c: c[0] == "16")
    results = []
    for number, name, expected, fn in ordered:
        if only and number not in only:
            continue
        log(f"case {number}: {name}")
        try:
            got, passed = fn(audit)
        except Exception as exc:  # noqa: BLE001 - a case that crashes is a failed case, reported with what broke
            got, passed = f"audit error: {type(exc).__name__}: {str(exc)[:150]}", False
        log(f"  {'pass' if passed else 'FAIL'}: {got}")
        results.append(Case(number, name, expected, got, passed))
    return sorted(results, key=lambda c: int(c.number))


def render(results: list[Case], command: str, seconds: float, flags: dict[str, list[str]]) -> str:
    rows = [[c.number, c.name, c.expected, c.got.replace("|", "\\|"), "pass" if c.passed else "**FAIL**"]
            for c in results]
    passed = sum(c.passed for c in results)
    return "\n".join([
        "# Service audit (issue 25)", "",
        f"Command: `{command}`  ", f"Machine: {machine()}  ",
        f"Commit: {git_rev()}; {seconds:.0f} s; **{passed} of {len(results)} cases pass.**", "",
        ("Two real `lcrag serve` processes on loopback, each with its own temporary cache directory: "
         f"A `{' '.join(flags['a'])}` (the default: no key) and B `{' '.join(flags['b'])}`. Their reader is an "
         "OpenAI-compatible stand-in run by the script (it streams the last word of the context line closest to "
         "the question, after a delay the audit sets for case 10): the audit is about the service, not answers."),
        "",
        md_table(["#", "case", "expected", "got", ""], rows), "",
    ])


def git_rev() -> str:
    try:
        return subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True, timeout=10, check=False).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


FLAGS = {"a": ["--max-upload-mb", "4"], "b": ["--api-key", KEY, "--strategies", "rag"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, help="write the Markdown report here")
    parser.add_argument("--only", help="comma-separated case numbers")
    args = parser.parse_args()
    reader, reader_url = stub_reader.start()
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="lcrag-audit-") as tmp:
        work = Path(tmp)
        a = start_server(work, reader_url, "a", FLAGS["a"], {}, before=leave_upload_leftover)
        b = start_server(work, reader_url, "b", FLAGS["b"], {"Authorization": f"Bearer {KEY}"})
        try:
            results = run_cases(Audit(a, b, reader, work), set(args.only.split(",")) if args.only else None)
        finally:
            for server in (a, b):
                server.process.terminate()
                server.process.wait(30)
    command = "python benchmarks/audit_service.py" + (f" --out {args.out}" if args.out else "")
    report = render(results, command, time.monotonic() - started, FLAGS)
    print(report)
    if args.out:
        args.out.write_text(report, encoding="utf-8")
    sys.exit(0 if all(c.passed for c in results) else 1)


if __name__ == "__main__":
    main()
