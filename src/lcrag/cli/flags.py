"""The flags the question commands share (``ask``, ``index``, ``eval``, ``demo``, ``report``, ``passkey``; the
reader-pool flags ``serve`` and ``mcp`` too), and how their values become a configuration."""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from lcrag.core.errors import LcragError
from lcrag.core.http_client import DEFAULT_TIMEOUT
from lcrag.core.options import option_values, reader_forms
from lcrag.core.registry import CHUNKERS, EMBEDDERS, RETRIEVERS

if TYPE_CHECKING:
    from rich.console import Console

    from lcrag.pipeline.config import Config

# Choices and their help come from the registries (built-ins and plugins, which are named without being imported).
RetrieverOpt = Annotated[str, typer.Option("--retriever", "-r", help=f"One of: {RETRIEVERS.describe()}.")]
CHUNKING_HELP = f"UNIT:SIZE (e.g. words:300, tokens:128) or UNIT:SIZE:OVERLAP (sentence-splitter:600:100), UNIT one of: {CHUNKERS.describe()}"
LLM = Annotated[str, typer.Option("--llm", help=f"The reader: {reader_forms()} (smollm2: bundled).")]
Embedder = Annotated[str, typer.Option("--embedder", help=f"The embedder: {EMBEDDERS.spec_forms()} (minilm: bundled ONNX).")]
ContextWindow = Annotated[Optional[int], typer.Option("--context-window", help="Reader window in tokens (default: the model's).")]
Threads = Annotated[Optional[int], typer.Option("--threads", help="CPU threads for the embedded reader.")]
Timeout = Annotated[float, typer.Option("--timeout", help="Seconds one call to a reader or embedder may take, retries included; then it fails.")]
SummaryLLM = Annotated[Optional[str], typer.Option("--summary-llm", help="raptor/tree retrievers: who writes the summaries (default: the --llm reader); same specs as --llm.")]
CacheDir = Annotated[Optional[Path], typer.Option("--cache-dir", envvar="LCRAG_CACHE_DIR", help="Where indexes and the completion cache live.")]
RouterFile = Annotated[Optional[str], typer.Option("--router", help="A learned router: `lara` (shipped, fitted on ten strong readers' LaRA answers) or a file from `lcrag route fit`, given by a path with a slash or a suffix (./router, router.json). Self-Route goes to LC when it predicts LC beats RAG on the question (holding --lc-share or --lc-cost-share, or at a fixed --route-threshold).")]
PricesFile = Annotated[Optional[Path], typer.Option("--prices", help="A TOML/YAML price table (USD per million input, cached input, output tokens per model), added over the built-in one.")]
PriceAs = Annotated[Optional[str], typer.Option("--price-as", help="Price the calls as if made with this model (e.g. gpt-4o-mini); otherwise a model not in the table is unpriced.")]
PartOption = Annotated[Optional[list[str]], typer.Option("--option", help="NAME=VALUE: an option the strategy or retriever declares (e.g. widen=2 for cascade; see the README's list); repeatable, over the run file's options table.")]
RunFile = Annotated[Optional[Path], typer.Option("--config", help="A run file (.yaml/.toml, see the README): its values are used, then the flags given here override them.")]
# The reader's servers, as `lcrag ask` and `eval` take them and `lcrag serve` and `mcp` too.
BaseUrl = Annotated[Optional[list[str]], typer.Option("--base-url", envvar="LCRAG_BASE_URL", help="OpenAI-compatible reader server, e.g. http://localhost:8000/v1; repeat it (or separate URLs with commas) for a pool of servers serving one model: the questions about one document go to one server while it is up (its prefix cache keeps hitting), other calls to the least busy, and a failing server is skipped and its calls retried on another.")]
PoolBackoff = Annotated[Optional[float], typer.Option("--backoff", help="A pool of reader servers: seconds a failing server is skipped at first, doubled at each failure in a row (default 1).")]
PoolMaxBackoff = Annotated[Optional[float], typer.Option("--max-backoff", help="A pool of reader servers: the most seconds a failing server is skipped (default 60).")]
ServerSlots = Annotated[Optional[int], typer.Option("--server-slots", min=1, help="Calls sent to one OpenAI-compatible reader server at once (default 4): what it runs together (llama.cpp's --parallel; more for vLLM). It is how many questions are answered at once per server.")]


# The reader, embedder and cache flags of every question command (ask, eval, chat), declared once: name, option and
# default. lcrag.cli.question_flags adds them to a command; their values reach it through ctx.params, from which
# config_from_flags builds the configuration.
READER_FLAGS: tuple[tuple[str, object, object], ...] = (
    ("llm", LLM, "smollm2"), ("embedder", Embedder, "minilm"), ("base_url", BaseUrl, None),
    ("context_window", ContextWindow, None), ("cache_dir", CacheDir, None), ("threads", Threads, None),
    ("timeout", Timeout, DEFAULT_TIMEOUT), ("backoff", PoolBackoff, None), ("max_backoff", PoolMaxBackoff, None),
    ("server_slots", ServerSlots, None), ("summary_llm", SummaryLLM, None), ("router", RouterFile, None),
)


def config_from_flags(ctx: typer.Context, run_file: Path | None, renamed: dict[str, tuple[str, Callable]] | None = None,
                      options: list[str] | None = None) -> Config:
    """The run file's configuration (or the defaults) with the values of the flags the user gave over it.

    A flag counts as given when it was on the command line or came from its environment variable (not typer's
    default). Parameters are named as the configuration's fields, except those in ``renamed``: param -> (field,
    conversion of the flag's value). ``options``: the ``--option NAME=VALUE`` flags, added to the run file's options
    table (and winning where both name one)."""
    from lcrag.pipeline.config import CONFIG_FIELDS, Config

    renamed = renamed or {}
    given = {}
    for param, value in ctx.params.items():
        field, convert = renamed.get(param, (param, None))
        source = ctx.get_parameter_source(param)
        if field in CONFIG_FIELDS and source is not None and source.name not in ("DEFAULT", "DEFAULT_MAP"):
            given[field] = convert(value) if convert else value
    base = Config.from_file(run_file) if run_file else Config()
    if options:
        given["options"] = base.options.options | option_values(options)
    return base.merged(given)


def check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise LcragError(f"unknown {name} {value!r}; choose one of {', '.join(allowed)}")


def listed(value: str, name: str) -> list[str]:
    """A comma-separated flag's items (``--strategies lc,rag``); none is an error naming the flag."""
    items = [v.strip() for v in value.split(",") if v.strip()]
    if not items:
        raise LcragError(f"--{name} is empty")
    return items


def whole_numbers(value: str | None, name: str) -> list[int]:
    """A comma-separated flag's whole numbers (``-k 3,5``); none when the flag is not given."""
    if not value:
        return []
    try:
        return [int(v) for v in listed(value, name)]
    except ValueError:
        raise LcragError(f"--{name} takes whole numbers separated by commas") from None


def tokenizer_for(spec: str, stack: ExitStack):
    """What a ``--tokenizer`` flag names: words, a tokenizer.json path, or a reader spec (whose own tokenizer
    counts; the reader is closed with ``stack``)."""
    from lcrag.readers import make_reader
    from lcrag.core.tokenization import HFTokenizer, WordCounter

    if spec == "words":
        return WordCounter()
    if spec.endswith(".json") or Path(spec).is_dir():
        return HFTokenizer(spec)
    reader = make_reader(spec)
    stack.callback(reader.close)
    return reader.tokenizer


def stdout() -> Console:
    """Standard output for rich text: wide enough for the demo table when it goes to a file or a pipe (rich
    assumes 80 columns there)."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 140)
