"""`lcrag mcp` without an MCP SDK it can use: one line and exit 2, saying what to install — the SDK when there is
none, and a supported one, naming the version found, when the one installed is too old, too new or fails to import.
The versions are real installations (a stand-in ``mcp`` package with its metadata, first on the path of an ``lcrag
mcp`` process), so the version named is the one Python finds."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


def stand_in_sdk(root, version: str, init: str = "") -> str:
    """A directory holding an ``mcp`` package of ``version`` (its ``__init__`` being ``init``), as pip installs one."""
    (root / "mcp").mkdir(parents=True)
    (root / "mcp" / "__init__.py").write_text(init)
    info = root / f"mcp-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: mcp\nVersion: {version}\n")
    return str(root)


def lcrag_mcp_with(sdk: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [sdk, os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "lcrag.cli", "mcp", *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=120)


@pytest.mark.parametrize("version", ["0.9.1", "1.9.4", "3.0.0"])
def test_an_unsupported_sdk_is_named_with_its_version(tmp_path, version):
    done = lcrag_mcp_with(stand_in_sdk(tmp_path, version))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (f"lcrag: error: lcrag mcp needs the MCP SDK 1.10 or newer (1.x or 2.x); found mcp "
                                   f"{version}: pip install -U 'lcrag[mcp]'")


def test_a_supported_sdk_that_fails_to_import_is_named_with_its_version_and_the_failure(tmp_path):
    done = lcrag_mcp_with(stand_in_sdk(tmp_path, "2.3.0", "import httpx_missing_for_this_test\n"))
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr, done.stderr
    assert ("lcrag mcp cannot load the MCP SDK (found mcp 2.3.0): No module named 'httpx_missing_for_this_test': "
            "pip install -U 'lcrag[mcp]'") in done.stderr
