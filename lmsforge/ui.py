"""Output for people (rich tables, progress on stderr) and for machines (--json on stdout)."""

from __future__ import annotations

import json
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from rich.console import Console
from rich.table import Table

out = Console(highlight=False, soft_wrap=True)
if not out.is_terminal:
    out = Console(highlight=False, soft_wrap=True, width=200)  # logs: do not wrap at 80
err = Console(stderr=True, highlight=False, soft_wrap=True)


def say(message: str) -> None:
    """A progress line on stderr, so stdout stays clean for --json and tables."""
    err.print(f"[dim]·[/dim] {message}", markup=True)


HEARTBEAT_S = 15.0  # a log line this often keeps a CI log (and its reader) sure the step lives


@contextmanager
def step(message: str, progress: Callable[[], str] | None = None) -> Iterator[None]:
    """A spinner with elapsed time on a terminal; on a log, a start line, a line every
    HEARTBEAT_S seconds while it runs (with PROGRESS, e.g. megabytes so far) and an end line."""
    start = time.monotonic()
    stop = threading.Event()

    def status_text() -> str:
        extra = ""
        if progress is not None:
            try:
                extra = f", {progress()}"
            except OSError:
                extra = ""
        return f"{message} ({time.monotonic() - start:.0f} s{extra})"

    if err.is_terminal:
        with err.status(message) as status:
            ticker = threading.Thread(target=_tick, args=(stop, 1.0, lambda: status.update(
                status_text())), daemon=True)
            ticker.start()
            try:
                yield
            finally:
                stop.set()
    else:
        say(message)
        ticker = threading.Thread(target=_tick, args=(stop, HEARTBEAT_S, lambda: say(
            f"still {status_text()}")), daemon=True)
        ticker.start()
        try:
            yield
        finally:
            stop.set()
    say(f"{message}: done in {time.monotonic() - start:.1f} s")


def _tick(stop: threading.Event, every: float, action: Callable[[], None]) -> None:
    while not stop.wait(every):
        action()


def folder_size(path: Path) -> str:
    """How much has arrived under PATH so far, for a step's progress."""
    total = sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) if path.exists() else 0
    return f"{total / 1e6:.0f} MB so far"


def print_json(data: object) -> None:
    sys.stdout.write(json.dumps(data, indent=2, sort_keys=False) + "\n")


def table(title: str | None, columns: list[str], rows: list[list[str]]) -> None:
    grid = Table(title=title, show_lines=False)
    for column in columns:
        grid.add_column(column, overflow="fold")
    for row in rows:
        grid.add_row(*row)
    out.print(grid)


def error(message: str) -> None:
    err.print(f"lmsforge: error: {message}", markup=False, highlight=False)
