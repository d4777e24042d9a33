"""A router spec (issue 44): a bare name always means the router shipped under it, whatever the working directory
holds; a file is given by a path with a slash or a suffix. Before, a folder called `lara` in the working directory
hid the shipped `lara` ("lara: not a router file (Is a directory); shipped routers: lara")."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.resources import files

import pytest

from lcrag.core.errors import InputError
from lcrag.service.answer_cache import router_digest
from lcrag.strategies.routing.learned import Router, is_router_path, router_file_identity, shipped_name

pytestmark = pytest.mark.unit

SHIPPED = files("lcrag.strategies.routing").joinpath("routers", "lara.json").read_text(encoding="utf-8")


def another_router(path) -> None:
    """A valid router file unlike the shipped one: its operating point moved."""
    data = json.loads(SHIPPED)
    data["default_share"] = 0.123
    path.write_text(json.dumps(data), encoding="utf-8")


@pytest.mark.parametrize("spec, is_path", [("lara", False), ("./lara", True), ("x/lara.json", True),
                                           ("lara.json", True), ("/abs/lara", True), ("nosuch", False)])
def test_a_path_has_a_slash_or_a_suffix(spec, is_path):
    assert is_router_path(spec) is is_path


def test_a_folder_called_lara_in_the_working_directory_does_not_hide_the_shipped_router(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "lara").mkdir()
    assert Router.parse("lara").default_share == json.loads(SHIPPED)["default_share"]
    assert Router.load("lara") is Router.load("lara")  # parsed once, by its name
    assert router_file_identity("lara") == ("lara",) and router_digest("lara") == "lara"
    with pytest.raises(InputError, match=r"^\./lara: not a router file \(.*Is a directory") as error:
        Router.load("./lara")  # the folder, asked for by its path
    assert "\n" not in str(error.value)


def test_a_file_called_lara_is_reached_by_its_path_only(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    another_router(tmp_path / "lara")
    assert Router.load("lara").default_share == json.loads(SHIPPED)["default_share"]
    assert Router.load("./lara").default_share == 0.123
    assert Router.load(str(tmp_path / "lara")).default_share == 0.123
    assert router_digest("./lara") != router_digest("lara") == "lara"


def test_an_unknown_bare_name_is_a_one_line_error_naming_the_shipped_routers(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    another_router(tmp_path / "mine.json")
    (tmp_path / "mine").mkdir()
    with pytest.raises(InputError) as error:
        Router.load("mine")
    message = str(error.value)
    assert message.startswith("mine: not a router shipped with lcrag (shipped: lara)") and "\n" not in message
    assert "./mine" in message and "mine.json" in message
    assert Router.load("mine.json").default_share == 0.123  # the suffix makes it a file
    with pytest.raises(InputError, match="not a router shipped"):
        shipped_name("mine")


def lcrag(*args, cwd):
    return subprocess.run([sys.executable, "-m", "lcrag.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)
