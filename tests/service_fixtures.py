"""A real lcrag service on a loopback port, in a thread of the test process (uvicorn), for the service tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running(app):
    import uvicorn

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    for _ in range(200):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join(10)


def wait_ready(url: str, collection: str, headers: dict | None = None, timeout: float = 120) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        status = httpx.get(f"{url}/v1/collections/{collection}", headers=headers, timeout=60).json()["status"]
        if status["state"] != "indexing":
            return status
        time.sleep(0.1)
    raise TimeoutError(f"{collection} still indexing")


@contextmanager
def lcrag_process(*args: str, url: str, cache_dir, stdin=None):
    """``lcrag ARGS`` in its own process with its cache under ``cache_dir``, once ``url``/healthz answers (any
    status: a server behind a key answers 401), stopped after."""
    env = {**os.environ, "LCRAG_CACHE_DIR": str(cache_dir)}
    process = subprocess.Popen([sys.executable, "-m", "lcrag.cli", *args], env=env, stderr=subprocess.PIPE,
                               text=True, stdin=stdin)
    try:
        for _ in range(600):
            if process.poll() is not None:
                raise AssertionError(f"lcrag {args[0]} exited: {process.stderr.read()}")
            try:
                httpx.get(f"{url}/healthz", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.1)
        else:
            raise TimeoutError(f"lcrag {args[0]} did not start")
        yield process
    finally:
        process.terminate()
        process.wait(30)
