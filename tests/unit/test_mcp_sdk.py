"""`lcrag mcp` without an MCP SDK it can use: one line and exit 2, saying what to install — the SDK when there is
none, and a supported one, naming the version found, when the one installed is too old, too new or fails to import.
The versions are real installations (a stand-in ``mcp`` package with its metadata, first on the path of an ``lcrag
mcp`` process), so the version named is the one Python finds."""

from __future__ import annotations

import sys

import pytest

from lcrag.cli import mcp as cli_mcp
from lcrag.core.errors import OptionError


def test_no_sdk_says_what_to_install(monkeypatch):
    monkeypatch.setattr(cli_mcp, "sdk_version", lambda: None)
    monkeypatch.setitem(sys.modules, "lcrag.service.mcp.tools", None)  # importing it fails, as without the SDK
    with pytest.raises(OptionError) as refused:
        cli_mcp.mcp_server_class()
    assert str(refused.value) == "lcrag mcp needs the MCP SDK: pip install -e '.[mcp]' in lcrag's checkout"


@pytest.mark.parametrize("version, supported", [("1.9.4", False), ("1.10.0", True), ("1.30.0", True),
                                                ("2.0.0rc1", True), ("2.3.0", True), ("3.0.0", False),
                                                ("0.9.1", False), ("dev", False)])
def test_supported_versions(version, supported):
    assert cli_mcp.supported(version) is supported


def test_the_installed_sdk_is_used():
    pytest.importorskip("mcp")
    from lcrag.service.mcp.tools import SDK_MAJOR, LcragMCP

    assert cli_mcp.mcp_server_class() is LcragMCP
    assert SDK_MAJOR == int(cli_mcp.sdk_version().split(".")[0])
