"""Issue 42's cases of the service audit (benchmarks/audit_service.py, which imports this module so that they
register): every request, file and failure held to its declared bound.

    python benchmarks/audit_service.py --cases 42.1        # one of them alone (and only the servers it uses)

42.1 an option with no maximum (sentence-window's window 10^7 and 10^15, over HTTP and MCP); 42.2 heading paths in
memory, answers and the answer store; 42.3 a full disk during an upload (embedded store); 42.4 PostgreSQL: DELETE of
a collection or a file racing an upload of the same bytes through another replica; 42.5 /healthz without the key;
42.6 SIGTERM while a long question is answered. The servers are the audit's (C: default flags, B: keyed) or started
here through the audit's Processes (so stopped however the audit ends), each with its own cache directory.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from common import postgres_server


def audit_module():
    """The audit's module as it runs: `python benchmarks/audit_service.py` runs it as ``__main__``, and importing
    ``audit_service`` again would make a second copy of it, with a list of cases of its own that the run never sees."""
    running = sys.modules.get("__main__")
    if Path(getattr(running, "__file__", "") or "").name == "audit_service.py":
        return running
    import audit_service

    return audit_service


audit = audit_module()
case, Mcp, Meanwhile, ask, collection = audit.case, audit.Mcp, audit.Meanwhile, audit.ask, audit.collection
message, upload, wait_state = audit.message, audit.upload, audit.wait_state
timed, tool_text = audit.timed, audit.tool_text
MANUAL, PROBE_MS = audit.MANUAL, audit.PROBE_MS

ASK_S = 1.0  # 42.1: a hostile option refused or answered within this ...
ASK_MB = 20.0  # ... with at most this much more server memory
HEADINGS_MB = 60.0  # 42.2: two heading-path files cost at most this much server memory, at the peak and after
ANSWER_KB = 64  # 42.2: an answer's size (--max-kept-answer-kb's default)
KEPT_KB = 100  # 42.2: what the store keeps per distinct question
SHUTDOWN_S = 3  # 42.6: the server's --shutdown-seconds ...
EXIT_GRACE_S = 3  # ... and how much longer its exit may take


# == 42.1: an option with no maximum ==============================================================================
SENTENCES = "".join(f"Sentence {i} says that topic {i} is the colour of lamp {i * 7 % 200}. " for i in range(200))
WINDOWS = (10**7, 10**15)


def window_ask(server, window: int) -> tuple[str, str, str, float]:
    """POST /v1/ask with sentence-window's window: how it ended ("refused", "answered" or "other"), the status, what
    it said (the answer or the error message), seconds."""
    reply, seconds = timed(ask, server, "w42", "What is topic 3?", strategy="rag", retriever="sentence-window",
                           options={"window": window}, timeout=60)
    json_reply = reply.headers.get("content-type", "").startswith("application/json")
    if reply.status_code == 200:
        return "answered", "200", reply.json().get("text", ""), seconds
    ended = "refused" if 400 <= reply.status_code < 500 and json_reply else "other"
    return ended, f"{reply.status_code}{'' if json_reply else ' (not JSON)'}", message(reply), seconds


def window_row(label: str, ended: str, status: str, said: str, seconds: float, meanwhile, probe: str,
               answer: bool) -> tuple[str, bool]:
    """One row of 42.1: refused in one line (a 4xx JSON error, a tool error) or answered (``answer``: must be),
    within the bounds, the probe answering meanwhile."""
    one_line = "\n" not in said and 0 < len(said) <= 300
    ok = ((ended == "answered" or ended == "refused" and one_line and not answer) and seconds <= ASK_S
          and meanwhile.rss_grew <= ASK_MB and bool(meanwhile.latencies) and not meanwhile.failures
          and meanwhile.slowest_ms < PROBE_MS)
    return (f"{label}: {ended} ({status}) {said[:80]!r} in {seconds:.2f} s; RSS {meanwhile.rss_grew:+.0f} MB (with "
            f"its parsers {meanwhile.tree_grew:+.0f}); {probe} max {meanwhile.slowest_ms:.0f} ms over "
            f"{len(meanwhile.latencies)}, {len(meanwhile.failures)} failed"), ok


def window_label(front: str, window: int) -> str:
    return f"{front} window {window:.0e}" if window > 64 else f"{front} window 64 (its maximum)"


def http_windows(t) -> list[tuple[str, bool]]:
    collection(t.c, "w42", {"sentences.txt": SENTENCES.encode()})
    window_ask(t.c, 3)  # the collection's sentence index built, the retriever loaded: not what is measured
    rows = []
    for window in (*WINDOWS, 64):
        with Meanwhile(t.c) as meanwhile:
            ended, status, said, seconds = window_ask(t.c, window)
            time.sleep(0.3)  # /healthz probed after the answer too
        rows.append(window_row(window_label("HTTP", window), ended, status, said, seconds, meanwhile, "/healthz",
                               answer=window == 64))
    t.c.delete("/v1/collections/w42")
    return rows


def mcp_window_ask(client, window: int) -> tuple[str, str, str, float]:
    """tools/call ask with sentence-window's window: as :func:`window_ask` (a JSON-RPC error counts as refused)."""
    arguments = {"question": "What is topic 3?", "collection": "w42", "strategy": "rag",
                 "retriever": "sentence-window", "options": {"window": window}}
    answer, seconds = timed(client.rpc, "tools/call", {"name": "ask", "arguments": arguments}, 60)
    result, error = answer.get("result") or {}, answer.get("error") or {}
    if error:
        return "refused", f"JSON-RPC error {error.get('code')}", str(error.get("message", "")), seconds
    if result.get("isError"):
        return "refused", "tool error", tool_text(result), seconds
    return "answered", "tool result", str((result.get("structuredContent") or {}).get("answer", "")), seconds


def mcp_windows(t) -> list[tuple[str, bool]]:
    """The same through `lcrag mcp --transport http` (default flags) over the 200 sentences planted in its cache,
    while another client calls tools/list."""
    server = t.start_server("m42", [], {}, command="mcp", before=lambda cache: audit.plant_mcp_collections(
        cache, {"w42": {"sentences.txt": SENTENCES.encode()}}))
    t.others.append(server)
    client, lister = Mcp(server).open(), Mcp(server).open()
    rows = []
    try:
        mcp_window_ask(client, 3)  # indexed, loaded
        for window in (*WINDOWS, 64):
            with Meanwhile(server, lambda: lister.rpc("tools/list", timeout=5)["result"]["tools"]) as meanwhile:
                ended, status, said, seconds = mcp_window_ask(client, window)
                time.sleep(0.3)
            rows.append(window_row(window_label("MCP", window), ended, status, said, seconds, meanwhile,
                                   "tools/list", answer=window == 64))
    finally:
        client.close()
        lister.close()
        server.stop()
    return rows


@case("42.1", "sentence-window's window 10^7 and 10^15 (and 64, its maximum) over a 200-sentence text, through "
      "POST /v1/ask (C) and MCP tools/call ask (lcrag mcp, default flags)",
      f"each refused in one line (4xx JSON, a tool error) or answered, in ≤ {ASK_S:.0f} s with ≤ +{ASK_MB:.0f} MB "
      f"server RSS; /healthz (MCP: tools/list) < {PROBE_MS:.0f} ms meanwhile; the maximum answered")
def unbounded_option(t):
    rows = http_windows(t) + mcp_windows(t)
    return " · ".join(got for got, _ in rows), all(ok for _, ok in rows)


# == 42.2: heading paths in memory, in answers and in the answer store =============================================
def heading_markdown(letter: str) -> bytes:
    """One 50,000-character top heading over 5,000 small sub-sections (a line each): ~114 KB of Markdown whose
    every segment lies under that title."""
    sections = "".join(f"## h{i}\n{i}\n" for i in range(5000))
    return ("# " + letter * 50_000 + "\n" + sections).encode()


def nested_markdown() -> bytes:
    """Five nested 40,000-character headings over 400 small sections, each naming its valve."""
    headings = "".join("#" * level + " " + letter * 40_000 + "\n" for level, letter in enumerate("CDEFG", 1))
    sections = "".join(f"###### s{i}\nThe valve {i} opens at {10 + i} bar.\n" for i in range(400))
    return (headings + sections).encode()


def kept_bytes(cache: Path) -> int:
    """The bytes the embedded store holds (pages in use, the WAL's included), read from its own count."""
    with sqlite3.connect(f"file:{cache / 'collections.sqlite'}?mode=ro", uri=True) as db:
        pages, free, size = (db.execute(f"PRAGMA {name}").fetchone()[0]
                             for name in ("page_count", "freelist_count", "page_size"))
    db.close()
    return (pages - free) * size


def heading_files(t) -> tuple[str, bool]:
    """Two 114 KB heading-path Markdown files uploaded to C (a small one and a question first, not measured): the
    server's RSS at the peak and after, and an answer over them."""
    collection(t.c, "headings", {"crane.md": b"# Crane\n" + MANUAL.encode()})
    ask(t.c, "headings")
    files = {f"{letter}.md": heading_markdown(letter) for letter in "AB"}
    before = t.c.rss_mb()
    with Meanwhile(t.c) as meanwhile:
        sent = [upload(t.c, "headings", name, data).status_code for name, data in files.items()]
        status = wait_state(t.c, "headings", timeout=300)
    time.sleep(1)
    after = t.c.rss_mb() - before
    answer = ask(t.c, "headings", "What does section h4321 say?")
    size = len(answer.content)
    t.c.delete("/v1/collections/headings")
    got = (f"two {len(files['A.md']) / 1024:.0f} KB files: {sent}, {status['state']} with {status['files']} files; "
           f"{meanwhile.summary()}; RSS after {after:+.0f} MB; answer {answer.status_code}, {size / 1024:.1f} KB")
    return got, (sent == [201, 201] and status["state"] == "ready" and meanwhile.rss_grew <= HEADINGS_MB
                 and after <= HEADINGS_MB and answer.status_code == 200 and size <= ANSWER_KB * 1024)


def nested_headings(t, questions: int = 5) -> tuple[str, bool]:
    """Five nested 40,000-character headings over 400 sections: each answer's size, and how much the store grows
    per distinct question (each answer kept, if kept at all, under --max-kept-answer-kb)."""
    collection(t.c, "nested", {"nested.md": nested_markdown()})
    ask(t.c, "nested", "When does valve 399 open?")  # the first question's index built: not what is measured
    before = kept_bytes(t.c.cache)
    sizes = []
    for i in range(questions):
        reply = ask(t.c, "nested", f"When does valve {i * 37} open?")
        sizes.append(len(reply.content) if reply.status_code == 200 else -reply.status_code)
    grew = (kept_bytes(t.c.cache) - before) / questions
    t.c.delete("/v1/collections/nested")
    got = (f"nested headings ({len(nested_markdown()) / 1024:.0f} KB): {questions} answers of "
           f"{', '.join(f'{s / 1024:.1f}' for s in sizes)} KB; the store +{grew / 1024:.1f} KB per question")
    return got, all(0 < s <= ANSWER_KB * 1024 for s in sizes) and grew <= KEPT_KB * 1024


@case("42.2", "heading paths: two 114 KB Markdown files ('# ' + 50,000 × A over 5,000 '## hN' sections) uploaded to "
      "C (default flags); five nested 40,000-character headings over 400 sections, asked 5 distinct questions",
      f"≤ +{HEADINGS_MB:.0f} MB server RSS at the peak and after indexing, an answer over them ≤ {ANSWER_KB} KB; "
      f"the nested headings' answers ≤ {ANSWER_KB} KB each, collections.sqlite + ≤ {KEPT_KB} KB per distinct "
      "question")
def heading_paths(t):
    rows = [heading_files(t), nested_headings(t)]
    return " · ".join(got for got, _ in rows), all(ok for _, ok in rows)


# == 42.3: a full disk during an upload (embedded store) ===========================================================
HOIST = "# Hoist\nThe hoist limit of the crane is 12 tonnes.\n" + "tonnes " * 4000  # 28 KB: 7 pages


def mount_small_disk(cache: Path, megabytes: int = 8) -> None:
    """A tmpfs of ``megabytes`` at ``cache`` (the server's --cache-dir): root only."""
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(cache)],
                             capture_output=True, text=True)
    if mounted.returncode != 0:
        raise RuntimeError(f"a tmpfs cannot be mounted (needs root): {mounted.stderr.strip()[:100]}")


def fill(disk: Path, leave: int) -> Path:
    """A file taking all of ``disk``'s free space but ``leave`` bytes."""
    stats = os.statvfs(disk)
    filler = disk / "filler"
    with open(filler, "wb") as out:
        out.write(b"\0" * max(0, stats.f_bavail * stats.f_frsize - leave))
    return filler


def agreeing(server, files: list[str]) -> str:
    """What the listing, the status, the folder and an answer's sources say the collection holds, "" when they all
    say ``files``."""
    status = wait_state(server, "disk")
    listed = [f["name"] for f in server.get("/v1/collections/disk").json()["files"]]
    on_disk = sorted(p.name for p in (server.cache / "collections" / "disk" / "files").iterdir())
    answer = ask(server, "disk", "What is the hoist limit of the crane?")
    cited = sorted({s["file"] for s in answer.json().get("sources", [])}) if answer.status_code == 200 else []
    if (listed, on_disk, status["files"], status["state"]) == (files, files, len(files), "ready") \
            and answer.status_code == 200 and set(cited) <= set(files) and ("hoist.md" in cited) == (
            "hoist.md" in files):
        return ""
    return (f"listed {listed}, on disk {on_disk}, status {status['state']} {status['files']} files, answer "
            f"{answer.status_code} citing {cited}")


def full_uploads(t, server, pages: int) -> tuple[list[str], bool]:
    """hoist.md uploaded with half its pages free (its temporary file does not fit), then with all of them (it
    fits, and then the database is full): each 507 in one JSON line, and the collection as before."""
    rows, passed = [], True
    for leave in (pages // 2, pages):
        filler = fill(server.cache, leave)
        refused = upload(server, "disk", "hoist.md", HOIST.encode())
        filler.unlink()
        said = message(refused)
        disagree = agreeing(server, ["crane.md"])
        rows.append(f"{leave // 4096} pages free: {refused.status_code} {said[:110]!r}"
                    + (f", then {disagree}" if disagree else ", then listing, status, folder and answer agree"))
        passed &= (refused.status_code == 507 and refused.headers.get("content-type") == "application/json"
                   and "\n" not in said and str(t.work) not in refused.text and not disagree)
    return rows, passed


@case("42.3", "a full disk during an upload (embedded store: --cache-dir on an 8 MB tmpfs, filled so that a 28 KB "
      "upload's temporary file does not fit, then so that it fits and the database is full); the same upload again "
      "once space is freed", "507 in one JSON line, no server path; the file not listed, not counted, not on disk, "
      "not cited; then the same name and bytes: 201, listed, counted and cited in an answer")
def full_disk_upload(t):
    try:
        server = t.start_server("full42", [], {}, before=mount_small_disk)
    except RuntimeError as exc:
        return f"not tried: {exc}", False
    t.others.append(server)
    try:
        collection(server, "disk", {"crane.md": b"# Crane\nThe reset code of the crane is 7781.\n"})
        pages = -(-len(HOIST.encode()) // 4096) * 4096
        rows, passed = full_uploads(t, server, pages)
        again = upload(server, "disk", "hoist.md", HOIST.encode())
        disagree = agreeing(server, ["crane.md", "hoist.md"])
        rows.append(f"space freed, the same upload: {again.status_code} "
                    + (disagree or "listed, counted and cited in the answer"))
    finally:
        server.stop()
        subprocess.run(["umount", "-l", str(server.cache)], capture_output=True)
    return " · ".join(rows), passed and again.status_code == 201 and not disagree


# == 42.4: PostgreSQL, a DELETE racing an upload of the same bytes through another replica ========================
RACES = 60


def race_content(kind: str, round_: int) -> bytes:
    """Bytes of this round's own (no other round's blob is the same), 16 KB."""
    line = f"{kind} round {round_}: the valve {round_} of the harbour crane opens at {10 + round_} bar.\n"
    return (line * (16_384 // len(line) + 1)).encode()


def at_once(first, second, offset: float) -> tuple:
    """``first()`` and ``second()`` started together (``first`` ``offset`` seconds later): both results."""
    barrier = threading.Barrier(2)

    def after(fn, delay: float):
        barrier.wait()
        time.sleep(delay)
        return fn()

    with ThreadPoolExecutor(2) as pool:
        one, two = pool.submit(after, first, offset), pool.submit(after, second, 0.0)
        return one.result(), two.result()


def delete_races(one, two) -> dict[str, int]:
    """Each round: a collection holding the round's bytes (replica one), then its DELETE (one) against an upload of
    the same bytes to "kept" (replica two), the DELETE started 0-27 ms after the upload: each outcome counted."""
    outcomes: dict[str, int] = {}
    two.post("/v1/collections", json={"name": "kept"})
    for i in range(RACES):
        data = race_content("delete", i)
        collection_name = f"gone{i}"
        one.post("/v1/collections", json={"name": collection_name})
        upload(one, collection_name, "shared.txt", data)
        deleted, uploaded = at_once(lambda: one.delete(f"/v1/collections/{collection_name}"),
                                    lambda: upload(two, "kept", f"copy{i}.txt", data), (i % 10) * 0.003)
        for what, reply in (("DELETE", deleted), ("upload", uploaded)):
            key = f"{what} {reply.status_code}"
            outcomes[key] = outcomes.get(key, 0) + 1
    return outcomes


def remove_races(one, two) -> dict[str, int]:
    """Each round: a file of the round's bytes in "held" (replica one), then its DELETE (one) against an upload of
    the same bytes to "kept2" (two)."""
    outcomes: dict[str, int] = {}
    one.post("/v1/collections", json={"name": "held"})
    two.post("/v1/collections", json={"name": "kept2"})
    for i in range(RACES):
        data = race_content("remove", i)
        upload(one, "held", f"f{i}.txt", data)
        removed, uploaded = at_once(lambda: one.delete(f"/v1/collections/held/files/f{i}.txt"),
                                    lambda: upload(two, "kept2", f"g{i}.txt", data), (i % 10) * 0.003)
        for what, reply in (("remove", removed), ("upload", uploaded)):
            key = f"{what} {reply.status_code}"
            outcomes[key] = outcomes.get(key, 0) + 1
    return outcomes


def incomplete_files(url: str) -> int:
    """Files whose blob in the store does not hold all their bytes (a blob collected under an upload)."""
    import psycopg

    with psycopg.connect(url) as db:
        return db.execute("SELECT count(*) FROM lcrag_files f JOIN lcrag_blobs b ON b.hash = f.hash WHERE f.bytes <> "
                          "length(b.content) + (SELECT coalesce(sum(length(p.content)), 0) FROM lcrag_blob_parts p "
                          "WHERE p.hash = f.hash)").fetchone()[0]


@case("42.4", f"PostgreSQL 15 (started by the audit) under two `lcrag serve --store` replicas: {RACES} DELETEs of a "
      f"collection against an upload of the same bytes through the other replica; {RACES} removals of a file the "
      "same way", "0 5xx; every file the store lists holds all its bytes")
def postgres_races(t):
    try:
        with postgres_server() as (url, server_log):
            one = t.start_server("pg1", ["--store", url], {})
            two = t.start_server("pg2", ["--store", url], {})
            t.others += [one, two]
            try:
                deletes, removes = delete_races(one, two), remove_races(one, two)
                incomplete = incomplete_files(url)
                refused = server_log.read_text(errors="replace").count("violates foreign key constraint")
            finally:
                one.stop()
                two.stop()
    except RuntimeError as exc:
        return f"not tried: {exc}", False
    outcomes = {**deletes, **removes}
    errors = sum(n for key, n in outcomes.items() if key.split()[1].startswith("5"))
    got = (f"collection DELETE vs upload: {deletes}; file removal vs upload: {removes}; {errors} 5xx; "
           f"{incomplete} files missing bytes; races met: PostgreSQL refused {refused} statements on a foreign key "
           "(a blob collected under an upload, each kept or stored again)")
    return got, errors == 0 and incomplete == 0


# == 42.5: /healthz without the key ===============================================================================
@case("42.5", "/healthz without the key, with a wrong one and with the key on B (--api-key)",
      "without the key (or with a wrong one): 200 with only {\"status\": \"ok\"}; with the key: 200 (it may say more)")
def healthz_without_key(t):
    bare = httpx.get(t.b.url + "/healthz", timeout=30)
    wrong = httpx.get(t.b.url + "/healthz", headers={"Authorization": "Bearer not-the-key"}, timeout=30)
    keyed = t.b.get("/healthz")
    bodies = [reply.json() if reply.status_code == 200 else reply.text[:60] for reply in (bare, wrong, keyed)]
    got = (f"without the key {bare.status_code} {bodies[0]}; wrong key {wrong.status_code} {bodies[1]}; with the "
           f"key {keyed.status_code} {bodies[2]}")
    return got, (bare.status_code == wrong.status_code == keyed.status_code == 200
                 and bodies[0] == bodies[1] == {"status": "ok"})


# == 42.6: SIGTERM while a long question is answered ==============================================================
def process_group(group: int) -> set[int]:
    """The processes of process group ``group`` now (from /proc)."""
    members = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == group:
                members.add(int(entry.name))
    return members


def running(pid: int) -> bool:
    """Whether ``pid`` is a live process: an exited one nobody waited for (a zombie) is not."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def command_line(pid: int) -> str:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode()[:80]
    except OSError:
        return "(gone)"


def asked_slowly(server, replies: list[str]) -> None:
    """A question the stand-in reader answers a word every 0.25 s: how it ended, kept in ``replies``."""
    try:
        reply = ask(server, "slow", "SLOWLY what is the reset code of the crane? (42.6)", timeout=60)
        replies.append(f"{reply.status_code} {message(reply)[:70]!r}")
    except httpx.TransportError as exc:
        replies.append(f"connection closed ({type(exc).__name__})")


def sigterm_during_question(t, server) -> tuple[float, list[str], dict[int, str], dict, int]:
    """SIGTERM once the slow question is at the reader: seconds to exit, how the question ended, the server's
    processes still running after (with a second's grace), the reader's record of its generation, and how many
    processes the server had (itself included) when it was sent SIGTERM."""
    collection(server, "slow", {"manual.txt": MANUAL.encode()})
    t.reader.slow_seconds, t.reader.slow[:] = 60.0, []
    replies: list[str] = []
    asking = threading.Thread(target=asked_slowly, args=(server, replies))
    asking.start()
    deadline = time.monotonic() + 30
    while not t.reader.slow and time.monotonic() < deadline:
        time.sleep(0.05)
    pid = server.process.pid
    members = process_group(pid) | set(audit.descendants(pid))
    started = time.monotonic()
    server.process.send_signal(signal.SIGTERM)
    try:
        server.process.wait(SHUTDOWN_S + EXIT_GRACE_S + 10)
    except subprocess.TimeoutExpired:
        pass
    exited = time.monotonic() - started if server.process.poll() is not None else float("inf")
    asking.join(15)
    deadline = time.monotonic() + 1
    while any(running(p) for p in members | process_group(pid)) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = {p: command_line(p) for p in members | process_group(pid) if running(p)}
    deadline = time.monotonic() + 3  # the reader finds its stream closed at its next word or the one after
    while t.reader.slow and not t.reader.slow[0]["seconds"] and time.monotonic() < deadline:
        time.sleep(0.05)
    return exited, replies, left, (t.reader.slow[0] if t.reader.slow else {}), len(members)


@case("42.6", f"SIGTERM to a server (--shutdown-seconds {SHUTDOWN_S}) answering a long question (the stand-in "
      "reader's SLOWLY mode, a word every 0.25 s for 60 s)", f"exits within {SHUTDOWN_S} + {EXIT_GRACE_S} s; the "
      "client gets 503 (or its connection closed); none of the server's processes left running (its process group "
      "and children; zombies not counted)")
def sigterm_long_question(t):
    server = t.start_server("s42", ["--shutdown-seconds", str(SHUTDOWN_S)], {})
    t.others.append(server)
    try:
        exited, replies, left, generation, had = sigterm_during_question(t, server)
    finally:
        t.reader.slow_seconds = 6.0
        code = server.process.poll()
        server.stop()
    stopped = "stopped" if generation.get("stopped") else "NOT stopped"
    got = (f"exited (status {code}) {exited:.1f} s after SIGTERM; the question: "
           f"{replies[0] if replies else 'no answer'}; the reader's generation {stopped} after "
           f"{generation.get('seconds', 0):.1f} s; of its {had} processes, {len(left)} left {list(left.values())[:3]}")
    ended = bool(replies) and (replies[0].startswith("503 ") or replies[0].startswith("connection closed"))
    return got, exited <= SHUTDOWN_S + EXIT_GRACE_S and ended and not left
