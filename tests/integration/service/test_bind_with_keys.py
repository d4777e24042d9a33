"""Beyond loopback a server needs a key (issue 43, item 5): --api-key, or keys added with `lcrag keys add` to the
store it uses; with neither, lcrag serve refuses in one line (exit 2) naming both ways."""

from __future__ import annotations

import os
import subprocess
import sys

import httpx
from service_fixtures import free_port, lcrag_process


def _lcrag(cache, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LCRAG_CACHE_DIR": str(cache)}
    env.pop("LCRAG_API_KEY", None)
    return subprocess.run([sys.executable, "-m", "lcrag.cli", *args], env=env, capture_output=True, text=True,
                          timeout=300)


def test_beyond_loopback_a_key_added_to_the_store_is_enough(tmp_path):
    cache, port = tmp_path / "cache", free_port()
    refused = _lcrag(cache, "serve", "--host", "0.0.0.0", "--port", str(port))
    assert refused.returncode == 2, refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and "lcrag keys add" in refused.stderr
    added = _lcrag(cache, "keys", "add", "alice", "--role", "admin")
    assert added.returncode == 0, added.stderr
    key = added.stdout.strip().split()[-1]
    url = f"http://127.0.0.1:{port}"
    with lcrag_process("serve", "--host", "0.0.0.0", "--port", str(port), url=url, cache_dir=cache):
        assert httpx.get(f"{url}/v1/collections", timeout=30).status_code == 401
        assert httpx.get(f"{url}/v1/collections", headers={"Authorization": f"Bearer {key}"},
                         timeout=30).status_code == 200
