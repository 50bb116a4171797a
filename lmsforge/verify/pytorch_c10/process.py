"""Run a command with its output going to a log file (and optionally the terminal) as it comes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from typing import IO, Mapping, NamedTuple, Sequence

from lmsforge import native_exit


# The programs run_logged has started and not yet seen end, for stop_all(): programs may run on
# several threads at once (sim_seeds.run_seeds), and an interrupt reaches only the main one.
_running: set[subprocess.Popen[str]] = set()
_running_lock = threading.Lock()


class Finished(NamedTuple):
    returncode: int
    lines: list[str]
    timed_out: bool


def run_logged(cmd: Sequence[str], log: IO[str], *, echo: bool = False,
               timeout: float | None = None, env: Mapping[str, str] | None = None) -> Finished:
    """Run CMD with ENV added to this process's environment (both logged)."""
    settings = "".join(f"{key}={value} " for key, value in (env or {}).items())
    log.write(f"$ {settings}{' '.join(str(part) for part in cmd)}\n")
    log.flush()
    proc = subprocess.Popen([str(part) for part in cmd], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True,
                            env={**os.environ, **env} if env else None)
    with _running_lock:
        _running.add(proc)
    timed_out = threading.Event()

    def kill() -> None:
        timed_out.set()
        _kill_group(proc)

    timer = threading.Timer(timeout, kill) if timeout else None
    if timer:
        timer.start()
    lines = []
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.append(line.rstrip("\n"))
            log.write(line)
            if echo:
                sys.stdout.write(line)
                sys.stdout.flush()
        returncode = proc.wait()
    finally:
        if timer:
            timer.cancel()
        if proc.poll() is None:
            _kill_group(proc)
            proc.wait()
        with _running_lock:
            _running.discard(proc)
    log.write(f"[exit code {returncode}]\n")
    log.flush()
    return Finished(returncode, lines, timed_out.is_set())


def stop_all() -> None:
    """Kill every program run_logged is running, on any thread (each run_logged then returns
    as for a crash): the main thread's way out of a Ctrl-C while other threads wait on them."""
    with _running_lock:
        running = list(_running)
    for proc in running:
        if proc.poll() is None:
            _kill_group(proc)


def _kill_group(proc: subprocess.Popen[str]) -> None:
    # The whole tree, group by group: a test program may have started helpers of its own, and
    # ninja starts every compiler in a process group of its own (Ctrl-C during a compile left
    # cc1plus running for half a minute when only ninja's group was killed).
    native_exit.kill_tree(proc.pid)
