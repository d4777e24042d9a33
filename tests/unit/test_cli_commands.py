"""The command line's subcommands are declared by name and help, and each one's module is imported when it is used;
`lcrag serve` and `lcrag mcp` take their common flags from one declaration (lcrag.cli.service_flags)."""

from __future__ import annotations

import dataclasses
import importlib
from types import SimpleNamespace
from typing import Annotated

import pytest
import typer
from typer.testing import CliRunner

import lcrag.cli.commands
from lcrag.cli import SUBCOMMANDS, app
from lcrag.cli.service_flags import ServiceFlags, with_service_flags
from cli_runs import run_main

pytestmark = pytest.mark.unit


@pytest.fixture
def imported(monkeypatch) -> list[str]:
    """The subcommand modules the command line imports from here on, in order."""
    modules: list[str] = []

    def import_module(name: str):
        modules.append(name)
        return importlib.import_module(name)

    monkeypatch.setattr(lcrag.cli.commands, "importlib", SimpleNamespace(import_module=import_module))
    return modules


def test_the_command_list_imports_no_subcommand_and_a_subcommand_imports_its_own_module(imported, capsys):
    group = typer.main.get_command(app)
    group.main(["--help"], prog_name="lcrag", standalone_mode=False)
    listing = capsys.readouterr().out
    assert imported == []
    assert [line.split()[0] for line in listing.split("Commands:")[1].strip().splitlines()] == \
        [subcommand.name for subcommand in SUBCOMMANDS]
    group.main(["corpus", "--help"], prog_name="lcrag", standalone_mode=False)
    assert imported == ["lcrag.cli.corpus"] and "build" in capsys.readouterr().out


def test_a_running_subcommand_imports_its_module_alone(imported, tmp_path, monkeypatch, capsys):
    code, err = run_main(["ask", tmp_path / "missing.txt", "Who?"], monkeypatch, capsys)
    assert code == 2 and "missing.txt" in err
    assert imported == ["lcrag.cli.ask"]


def test_each_declared_help_is_the_commands_own():
    for subcommand in SUBCOMMANDS:
        command = subcommand.load()
        assert command.name == subcommand.name
        for limit in (60, 100, 1000):
            assert subcommand.short_help(limit) == command.get_short_help_str(limit), subcommand.name


def test_serve_and_mcp_take_every_service_flag_from_the_one_declaration():
    declared = {subcommand.name: subcommand for subcommand in SUBCOMMANDS}
    options = {name: {param.name: param for param in declared[name].load().params} for name in ("serve", "mcp")}
    for field in dataclasses.fields(ServiceFlags):
        if not field.metadata.get("option", True):  # lcrag's own --max-file-mb
            assert field.name not in options["serve"] and field.name not in options["mcp"]
            continue
        serve, mcp = options["serve"][field.name], options["mcp"][field.name]
        assert serve.opts == mcp.opts and serve.help == mcp.help and serve.envvar == mcp.envvar, field.name
        if field.name != "port":
            assert serve.default == mcp.default == field.default, field.name
    assert (options["serve"]["port"].default, options["mcp"]["port"].default) == (8000, 8001)
    assert {"max_upload_mb", "cors_origin"} <= set(options["serve"]) - set(options["mcp"])
    assert {"transport", "max_resource_mb", "max_sessions"} <= set(options["mcp"]) - set(options["serve"])


def test_a_command_with_the_service_flags_gets_their_values_as_one_object():
    seen = []

    @with_service_flags(port=9)
    def probe(own: Annotated[int, typer.Option("--own")] = 1, *, flags: ServiceFlags) -> None:
        """A command taking the service flags."""
        seen.append((own, flags))

    probe_app = typer.Typer()
    probe_app.command()(probe)
    unset = {"LCRAG_CACHE_DIR": None, "LCRAG_BASE_URL": None, "LCRAG_STORE": None, "LCRAG_SERVE_API_KEY": None}
    result = CliRunner().invoke(probe_app, ["--own", "2", "--max-waiting", "3", "--allowed-host", "a",
                                            "--allowed-host", "b", "--max-parse-mb", "64"], env=unset)
    assert result.exit_code == 0, result.output
    assert seen == [(2, ServiceFlags(port=9, max_waiting=3, allowed_host=["a", "b"], max_parse_mb=64))]
    assert seen[0][1].parse_limits().memory_mb == 64
    bad = CliRunner().invoke(probe_app, ["--max-waiting", "0"], env=unset)
    assert bad.exit_code == 2 and "--max-waiting" in bad.output and seen == seen[:1]
    with pytest.raises(TypeError, match="not service flags: prot"):
        with_service_flags(prot=9)


def test_lcrags_max_file_mb_reaches_the_service_flags_parse_limits():
    """`lcrag --max-file-mb 2 serve`: the root command's limit is the service's (no environment variable)."""
    from lcrag.documents.limits import ParseLimits

    seen = []

    @with_service_flags()
    def probe(*, flags: ServiceFlags) -> None:
        """A command taking the service flags."""
        seen.append(flags.parse_limits())

    root = typer.Typer()

    @root.callback()
    def limits(ctx: typer.Context, max_file_mb: Annotated[float, typer.Option("--max-file-mb")] = 512) -> None:
        ctx.obj = ParseLimits(file_mb=max_file_mb)

    root.command()(probe)
    unset = {"LCRAG_CACHE_DIR": None, "LCRAG_BASE_URL": None, "LCRAG_STORE": None, "LCRAG_SERVE_API_KEY": None,
             "LCRAG_MAX_FILE_MB": None}
    assert CliRunner().invoke(root, ["--max-file-mb", "2", "probe"], env=unset).exit_code == 0
    assert CliRunner().invoke(root, ["probe"], env=unset).exit_code == 0
    assert [limit.file_mb for limit in seen] == [2, 512]
