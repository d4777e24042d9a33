"""A router spec (issue 44): a bare name always means the router shipped under it, whatever the working directory
holds; a file is given by a path with a slash or a suffix. Before, a folder called `lara` in the working directory
hid the shipped `lara` ("lara: not a router file (Is a directory); shipped routers: lara")."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib.resources import files

import pytest



SHIPPED = files("lcrag.strategies.routing").joinpath("routers", "lara.json").read_text(encoding="utf-8")


def lcrag(*args, cwd):
    return subprocess.run([sys.executable, "-m", "lcrag.cli", *args], capture_output=True, text=True, cwd=cwd,
                          timeout=120)


def test_cli_an_unknown_bare_router_name_exits_2_with_one_line(tmp_path):
    (tmp_path / "doc.txt").write_text("Alice has a sister called Bea.")
    (tmp_path / "nosuch").mkdir()  # a folder of that name changes nothing
    done = lcrag("ask", "doc.txt", "Who is Alice's sister?", "--router", "nosuch", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "not a router shipped with lcrag" in done.stderr
    assert "Traceback" not in done.stderr


def test_cli_route_eval_reads_the_shipped_router_beside_a_folder_of_its_name(tmp_path):
    from route_runs import write_run

    write_run(tmp_path / "run")
    (tmp_path / "lara").mkdir()
    done = lcrag("route", "eval", "run", "--router", "lara", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "learned router: router lara" in done.stdout
    folder = lcrag("route", "eval", "run", "--router", "./lara", cwd=tmp_path)
    assert folder.returncode == 2 and len(folder.stderr.strip().splitlines()) == 1
    assert "./lara: not a router file" in folder.stderr
