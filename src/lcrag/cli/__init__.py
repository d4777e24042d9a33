"""The ``lcrag`` command line. Each subcommand is declared here by name and help only: its module (and what that
imports) is imported when the subcommand runs or its own ``--help`` is asked (:mod:`lcrag.cli.commands`)."""

from __future__ import annotations

import logging
import sys
from typing import Annotated, Optional

import typer

from lcrag.cli.commands import TYPER_SETTINGS, LazyGroup, Subcommand
from lcrag.core.errors import LcragError
from lcrag.core.options import SettingError, cli_message

# In the order `lcrag --help` lists them; each help is the first paragraph of the command's own (a unit test keeps
# them equal).
SUBCOMMANDS = (
    Subcommand("serve", "lcrag.cli.serve", "serve", "Serve collections over HTTP: an OpenAI-compatible API, the "
               "native ask API and a web page at /."),
    Subcommand("mcp", "lcrag.cli.mcp", "mcp", "Serve the collections to agents over the Model Context Protocol: "
               "tools list_collections, ask and search, and the collections' files as resources."),
    Subcommand("worker", "lcrag.cli.worker", "worker", "Run a shared store's indexing jobs (parsing, chunking and "
               "embedding collections' files): with the replicas' run file, so that segments are made as they "
               "would make them."),
    Subcommand("ask", "lcrag.cli.ask", "ask", "Answer QUESTION about DOC."),
    Subcommand("chat", "lcrag.cli.chat", "chat", "Talk about DOC: each line is a question, answered with the "
               "conversation so far."),
    Subcommand("index", "lcrag.cli.index", "index", "Chunk DOC and build its BM25 index and embeddings on disk "
               "(later questions reuse them)."),
    Subcommand("demo", "lcrag.cli.demo", "demo", "Ask a synthetic document's planted questions with every "
               "strategy and print a table."),
    Subcommand("eval", "lcrag.cli.evaluate", "evaluate", "Run a strategies × retrievers × k/budget matrix over a "
               "dataset; resumable."),
    Subcommand("passkey", "lcrag.cli.evaluate", "passkey", "Generate ∞Bench-style PassKey data and the "
               "Self-Route paper's two variants, ready for `lcrag eval`."),
    Subcommand("report", "lcrag.cli.evaluate", "report", "Write report.md, CSV tables and PNG plots for a run "
               "directory (with money next to tokens when priced)."),
    Subcommand("corpus", "lcrag.cli.corpus", "corpus_app", "Build a corpus index of long retrieval units "
               "(LongRAG); ask it with `lcrag ask INDEX`."),
    Subcommand("analyze", "lcrag.cli.analyze", "analyze_app", "Analyse evaluation runs: why RAG failed, which "
               "questions each side wins."),
    Subcommand("route", "lcrag.cli.routing", "route_app", "Learned routing between LC and RAG: fit a router, "
               "report routers."),
    Subcommand("keys", "lcrag.cli.keys", "keys_app", "People's keys for lcrag serve and lcrag mcp, each with a "
               "role (reader, writer, admin) and the collections it may see; add, list, revoke."),
)


class LcragCommands(LazyGroup):
    subcommands = SUBCOMMANDS


app = typer.Typer(cls=LcragCommands, no_args_is_help=True, context_settings={"max_content_width": 120},
                  help="Answer questions over long documents: LC, RAG, OP-RAG, Self-Route.", **TYPER_SETTINGS)


@app.callback()
def _global_options(
    ctx: typer.Context,
    max_file_mb: Annotated[Optional[float], typer.Option(
        "--max-file-mb", envvar="LCRAG_MAX_FILE_MB",
        help="Largest input file read whole (documents, datasets), in MB; default 512. Corpora are streamed and "
             "have no limit.")] = None,
) -> None:
    """Answer questions over long documents: LC, RAG, OP-RAG, Self-Route."""
    from lcrag.documents.limits import ParseLimits  # the documents package: not for `lcrag --help`

    if max_file_mb is not None and not max_file_mb > 0:
        raise SettingError("max_file_mb", f"must be > 0, got {max_file_mb:g}")
    # Handed to the commands in their context object (click passes a parent's obj to its subcommands), which give
    # it to the readers of files: the ParseLimits a document is loaded with, a dataset's max_bytes.
    ctx.obj = ParseLimits(file_mb=max_file_mb) if max_file_mb is not None else ParseLimits()


def _usage_error_line(exc: Exception) -> str | None:
    """The one line for a command-line usage error (bad option value, unknown command), else None.

    Duck-typed: typer ships its own copy of click's exceptions, and other versions use click's own."""
    if getattr(exc, "exit_code", None) != 2 or not callable(getattr(exc, "format_message", None)):
        return None
    param = getattr(exc, "param", None)
    hint = getattr(param, "opts", None) or ([getattr(param, "name", "")] if param is not None else [])
    message = " ".join(exc.format_message().split())
    if hint and hint[0] and hint[0] not in message:
        message = f"{hint[0]}: {message}"
    return f"lcrag: error: {message} (see lcrag --help)"


def _run() -> int:
    # Not typer's standalone mode: its usage errors are a framed box of several lines; ours are one.
    try:
        code = typer.main.get_command(app).main(prog_name="lcrag", standalone_mode=False)
    except Exception as exc:  # noqa: BLE001 - only usage errors are handled here; anything else is re-raised
        if type(exc).__name__ == "NoArgsIsHelpError":  # `lcrag` alone, or a group without its command
            ctx = getattr(exc, "ctx", None)
            print(ctx.get_help() if ctx else str(exc), file=sys.stderr)
            return 2
        if type(exc).__name__ == "Abort":
            raise KeyboardInterrupt from None
        line = _usage_error_line(exc)
        if line is None:
            raise
        print(line, file=sys.stderr)
        return 2
    return code if isinstance(code, int) else 0


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="lcrag: %(levelname)s: %(message)s")
    try:
        sys.exit(_run())
    except LcragError as exc:
        print(f"lcrag: error: {cli_message(exc)}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("lcrag: interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
