"""Output for people (rich tables, progress on stderr) and for machines (--json on stdout)."""

from __future__ import annotations

import json
import sys
import time
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.table import Table

out = Console(highlight=False, soft_wrap=True)
if not out.is_terminal:
    out = Console(highlight=False, soft_wrap=True, width=200)  # logs: do not wrap at 80
err = Console(stderr=True, highlight=False, soft_wrap=True)


def say(message: str) -> None:
    """A progress line on stderr, so stdout stays clean for --json and tables."""
    err.print(f"[dim]·[/dim] {message}", markup=True)


@contextmanager
def step(message: str) -> Iterator[None]:
    """A spinner with elapsed time on a terminal; a plain start/end line otherwise (CI logs)."""
    start = time.monotonic()
    if err.is_terminal:
        with err.status(message):
            yield
    else:
        say(message)
        yield
    say(f"{message}: done in {time.monotonic() - start:.1f} s")


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
