"""Progress bars (rich) for the CLI: a factory that strategies and indexes call with (description, total)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

stderr = Console(stderr=True)


@contextmanager
def progress_factory(console: Console = stderr) -> Iterator[Callable[[str, int], Callable[[int], None]]]:
    """Yields ``make(description, total) -> advance(n)``; bars show on a terminal and stay silent elsewhere."""
    with Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,  # elsewhere rich still writes a blank line on exit (before any error line)
    ) as progress:

        def make(description: str, total: int) -> Callable[..., None]:
            task = progress.add_task(description, total=total)

            def advance(n: int = 1, description: str | None = None) -> None:
                progress.update(task, advance=n, **({"description": description} if description else {}))

            return advance

        yield make


@contextmanager
def spinner(message: str, console: Console = stderr):
    with console.status(message):
        yield
