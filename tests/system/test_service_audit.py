"""The service audit's cases (issues 25 and 34) that no other test covers, against a real `lcrag serve` / `lcrag mcp`
process on loopback: a non-ASCII --api-key refused at start-up by both servers whether it comes from the flag or from
LCRAG_SERVE_API_KEY (34.17), and a collection deleted while half of an upload's body is still on its way (34.15).
The reader is the tests' stand-in (tests/reader_servers.Stub); the upload case never reaches it. Where each other
case of the former benchmarks/audit_service.py is tested: benchmarks/bench_service_limits.py's docstring, which
measures what the remaining ones cost."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from reader_servers import Stub
from service_fixtures import free_port, lcrag_process

BOUNDARY = "auditrace"


@pytest.mark.parametrize("command", [["serve"], ["mcp", "--transport", "http"]], ids=["serve", "mcp"])
@pytest.mark.parametrize("given_by", ["flag", "environment"])
def test_a_non_ascii_api_key_is_refused_at_start_in_one_line_naming_the_flag(tmp_path, command, given_by):
    args = [sys.executable, "-m", "lcrag.cli", *command, "--port", str(free_port()), "--cache-dir",
            str(tmp_path / "cache")]
    env = {**os.environ, "LCRAG_SERVE_API_KEY": "clé-secrète"} if given_by == "environment" else dict(os.environ)
    if given_by == "flag":
        args += ["--api-key", "clé-secrète"]
    done = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env, stdin=subprocess.DEVNULL)
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 1, done.stderr
    assert "--api-key" in lines[0] and "ASCII" in lines[0]


def multipart_upload(collection: str, data: bytes) -> tuple[bytes, bytes]:
    """The request head and the multipart body of an upload of ``data`` as race.txt to ``collection``."""
    part = (f"--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"race.txt\"\r\n"
            "Content-Type: text/plain\r\n\r\n").encode()
    body = part + data + f"\r\n--{BOUNDARY}--\r\n".encode()
    head = (f"POST /v1/collections/{collection}/files HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return head, body


def read_until_closed(sock: socket.socket) -> bytes:
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    return received


def upload_deleted_at_half(url: str, port: int, collection: str, data: bytes) -> tuple[str, dict, str]:
    """Send half an upload's body, DELETE its collection, send the rest: the upload's status line, headers and body
    (the server may close the connection before the rest is in)."""
    assert httpx.post(f"{url}/v1/collections", json={"name": collection}, timeout=30).status_code == 201
    head, body = multipart_upload(collection, data)
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        sock.sendall(head + body[:len(body) // 2])
        time.sleep(0.3)  # the server has the first half
        assert httpx.delete(f"{url}/v1/collections/{collection}", timeout=30).status_code == 200
        try:
            sock.sendall(body[len(body) // 2:])
        except OSError:  # answered and closed before the rest: what it said is still to be read
            pass
        reply = read_until_closed(sock)
    status, _, rest = reply.partition(b"\r\n")
    header_block, _, text = rest.partition(b"\r\n\r\n")
    headers = dict(line.decode("latin-1").lower().split(": ", 1) for line in header_block.split(b"\r\n") if line)
    return status.decode(), headers, text.decode(errors="replace")


def test_a_collection_deleted_while_half_an_upload_is_in_answers_a_json_404_and_keeps_nothing(tmp_path):
    reader, port = Stub(), free_port()
    url, cache = f"http://127.0.0.1:{port}", tmp_path / "cache"
    data = ("The reset code of the crane is 7781.\n" * 60_000).encode()  # about 2 MB
    try:
        with lcrag_process("serve", "--port", str(port), "--cache-dir", str(cache), "--max-upload-mb", "4", "--llm",
                           "openai:stand-in", "--base-url", reader.url, url=url, cache_dir=cache):
            for round_ in range(3):
                status, headers, text = upload_deleted_at_half(url, port, f"gone{round_}", data)
                assert status.split(" ")[1] == "404", (status, text)
                assert headers["content-type"].startswith("application/json")
                assert "was deleted while race.txt was being uploaded" in text and str(tmp_path) not in text
            assert httpx.get(f"{url}/v1/collections", timeout=30).json()["data"] == []
            collections = Path(cache) / "collections"
            assert not [*collections.glob(".deleted-*"), *collections.glob("*/files/.upload-*")]
    finally:
        reader.kill()
