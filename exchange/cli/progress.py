"""The progress bar of ``exchange check``: what is being checked, how far, and an ETA.

The checker knows nothing of terminals: :func:`exchange.checker.check` calls
``progress(regime, property, done, total)`` before each property of each regime, and
this module draws that as a rich progress bar on stderr. The bar is drawn only on a
terminal (stderr a TTY, as rich's ``Console.is_terminal`` reads it), never with
``--json`` or ``--no-progress``, and is erased when the check ends, so stdout (the table
or the JSON document) is the same with or without it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

__all__ = ["check_progress", "describe"]

ProgressFn = Callable[[str, str, int, int], None]


def describe(regime: str, prop: str) -> str:
    """The bar's text for one step: ``checking exchangeable (on-policy)``."""
    return f"checking {prop} ({str(regime).replace('_', '-')})"


@contextlib.contextmanager
def check_progress(enabled: bool = True, console: Any = None) -> Iterator[ProgressFn | None]:
    """Yield the ``progress`` callback for :func:`exchange.checker.check`, or ``None``
    where no bar is drawn (``enabled`` false, or ``console`` not a terminal).

    ``console``: the rich Console to draw on (default: stderr). The bar is transient:
    it is erased when the block exits, also on an error.
    """
    if not enabled:
        yield None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    console = Console(stderr=True) if console is None else console
    if not console.is_terminal:
        yield None
        return
    bar = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
        console=console, transient=True,
    )
    task = bar.add_task("starting the check", total=None)
    last = [-1]

    def show(regime: str, prop: str, done: int, total: int) -> None:
        if done < last[0]:  # a second pass (the loss judged beside its float64 twin)
            bar.reset(task, total=total, completed=done)
        last[0] = done
        bar.update(task, description=describe(regime, prop), completed=done, total=total, refresh=True)

    with bar:
        yield show
