"""Progress bars (rich) for the CLI: a factory that strategies and indexes call with (description, total)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager

from rich.console import Console

stderr = Console(stderr=True)


@contextmanager
def progress_factory(console: Console = stderr) -> Iterator[Callable[[str, int], Callable[[int], None]]]:
    """Yields ``make(description, total) -> advance(n)``; bars show on a terminal and stay silent elsewhere. The
    bars' display (and rich.progress) starts with the first bar: a question answered from caches makes none."""
    with ExitStack() as stack:
        shown = []
        first = threading.Lock()  # bars may be made from a question's threads

        def make(description: str, total: int) -> Callable[..., None]:
            with first:
                if not shown:
                    shown.append(stack.enter_context(_bars(console)))
            progress = shown[0]
            task = progress.add_task(description, total=total)

            def advance(n: int = 1, description: str | None = None) -> None:
                progress.update(task, advance=n, **({"description": description} if description else {}))

            return advance

        yield make


def _bars(console: Console):
    from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                               TimeRemainingColumn)

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,  # elsewhere rich still writes a blank line on exit (before any error line)
    )


@contextmanager
def spinner(message: str, console: Console = stderr):
    with console.status(message):
        yield
