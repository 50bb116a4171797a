"""Output for people (rich tables, progress on stderr) and for machines (--json on stdout)."""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

from lmsforge.errors import EXIT_FAILED, EXIT_USAGE, LmsforgeError

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
                text = progress()
            except OSError:
                text = ""
            extra = f", {text}" if text else ""
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


class LiveLines:
    """The output of a long child (a build) as a step's progress: on a terminal, its last line
    beside the elapsed time (``progress``, for ``step``); on a log, every line as it comes."""

    WIDTH = 70  # of the last line shown beside a spinner

    def __init__(self) -> None:
        self.last = ""

    def show(self, line: str) -> None:
        self.last = line
        if not err.is_terminal:
            err.print(f"  {line}", markup=False, highlight=False)

    def progress(self) -> str:
        line = " ".join(self.last.split())
        return line if len(line) <= self.WIDTH else line[:self.WIDTH - 1] + "…"


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
    """ROWS as a table, or as records when the table cannot fit: below the width its longest
    words need, rich draws columns of no width (their content vanishes) or splits words."""
    grid = Table(title=title, show_lines=False)
    for column in columns:
        grid.add_column(column, overflow="fold")
    for row in rows:
        grid.add_row(*row)
    if Measurement.get(out, out.options.update_width(1 << 16), grid).minimum > out.width:
        records(title, columns, rows)
    else:
        out.print(grid)


def records(title: str | None, columns: list[str], rows: list[list[str]]) -> None:
    """One ``key: value`` block per row, blocks apart by a blank line; a value of several lines
    goes on under its first."""
    blocks = [title] if title else []
    for row in rows:
        lines = []
        for column, value in zip(columns, row):
            first, *more = str(value).split("\n") or [""]
            lines.append(f"{column}: {first}")
            lines.extend(" " * (len(column) + 2) + line for line in more)
        blocks.append("\n".join(lines))
    out.print("\n\n".join(blocks), markup=False, highlight=False, soft_wrap=True)


def error(message: str) -> None:
    err.print(f"lmsforge: error: {message}", markup=False, highlight=False)


# --- standard output that fails ------------------------------------------------------------------


class OutputClosed(Exception):
    """The reader of standard output went away (``lmsforge doctor | head -1``): the normal end
    of the output, not an error."""


class _GuardedStdout:
    """sys.stdout for the program: a write that fails says so in one line about standard output
    (not about the cache), and a reader that went away ends the output quietly."""

    def __init__(self, stream: object) -> None:
        self._stream = stream

    def _failed(self, exc: OSError) -> Exception:
        if exc.errno == errno.EPIPE:
            try:  # later writes, and the interpreter's last flush, go nowhere
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, self._stream.fileno())  # type: ignore[attr-defined]
            except (OSError, AttributeError, ValueError):
                pass
            return OutputClosed()
        return LmsforgeError(f"cannot write to standard output ({exc.strerror}); free space "
                             "where it goes, or send it elsewhere", EXIT_FAILED)

    def write(self, text: str) -> int:
        if self._stream is None:
            raise LmsforgeError("standard output is closed; run the command with an open "
                                "standard output (or redirect it to /dev/null)", EXIT_USAGE)
        try:
            return self._stream.write(text)  # type: ignore[attr-defined]
        except UnicodeEncodeError:  # an ASCII or strict C locale: '?' for what it cannot show
            encoding = getattr(self._stream, "encoding", None) or "ascii"
            return self.write(text.encode(encoding, "replace").decode(encoding, "replace"))
        except OSError as exc:
            raise self._failed(exc) from None

    def flush(self) -> None:
        if self._stream is None:
            return
        try:
            self._stream.flush()  # type: ignore[attr-defined]
        except OSError as exc:
            raise self._failed(exc) from None

    def isatty(self) -> bool:
        return self._stream is not None and self._stream.isatty()  # type: ignore[attr-defined]

    def __getattr__(self, name: str) -> object:
        return getattr(self._stream, name)


def silence_stdout() -> None:
    """Once a failed write to standard output has been reported: what is still buffered, and the
    interpreter's last flush of it, go nowhere (that flush failing again would end the process
    with Python's "Exception ignored" and exit code 120 instead of ours)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, AttributeError, ValueError):
        pass


def guard_stdout() -> None:
    """Make sys.stdout a ``_GuardedStdout`` (the program only; tests capture output their way)."""
    if not isinstance(sys.stdout, _GuardedStdout):
        sys.stdout = _GuardedStdout(sys.stdout)  # type: ignore[assignment]
