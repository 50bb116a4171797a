"""Ending the process: on a signal, and once rattler's native modules are loaded without the
interpreter's teardown.

SIGTERM and SIGHUP become ``errors.Terminated`` (a KeyboardInterrupt) in the main thread, so the
clean-up Ctrl-C runs (temporary and staging folders, the private auth file, locks) runs for them
too; the processes lmsforge started are ended first, whatever process group they are in
(``end_children``), so none of them is left writing into a folder that is being removed.

Python runs a signal's handler only in the main thread, and only once that thread next wakes. A
signal the kernel hands to another thread (rattler's tokio threads, ours), or one that arrives
just before the main thread enters a blocking call, wakes no one: a read from a server that never
answers then outlives SIGTERM (a CI run saw it). So every signal is also written to a wakeup pipe,
and a small thread (``_forward_to_main``) sends it on to the main thread until its handler ran.

py-rattler and py-rattler-build are Rust extensions that run tokio runtimes on threads of their
own. Those threads can still be touching Python objects while the interpreter finalizes, which
crashes the process after the command has finished its work: a CI run saw `lmsforge publish`
print its result and then die with SIGSEGV (exit 139). It is a known race of PyO3 extensions with
background runtimes (PyO3/pyo3-async-runtimes#40), with no shutdown API to call.

So once a command is done, and only when one of those modules was imported, the process runs
the `atexit` handlers (temporary folders, logging, locks), flushes its streams and ends with
`os._exit`, skipping only the module teardown where the race is.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading
import time
from pathlib import Path

from lmsforge.errors import Terminated

NATIVE_RUNTIME_MODULES = ("rattler", "rattler_build")


HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


_handled = threading.Event()  # set once _on_signal ran in the main thread


def handle_signals() -> None:
    """SIGTERM and SIGHUP end the command like Ctrl-C (for the program only, not for callers
    that import lmsforge). A signal the caller made us ignore stays ignored: `nohup lmsforge
    build …` must outlive its terminal."""
    handled = [signum for signum in HANDLED_SIGNALS if signal.getsignal(signum) != signal.SIG_IGN]
    for signum in handled:
        signal.signal(signum, _on_signal)
    if handled:
        read_end, write_end = os.pipe()  # neither end is inherited by the processes we start
        os.set_blocking(write_end, False)  # the C-level handler must never block on it
        signal.set_wakeup_fd(write_end, warn_on_full_buffer=False)
        threading.Thread(target=_forward_to_main, args=(read_end, set(handled)),
                         name="lmsforge-signals", daemon=True).start()


def _forward_to_main(read_end: int, handled: set[int]) -> None:
    """Send each handled signal on to the main thread until its handler has run there (the
    kernel may have given it to another thread, or it may have come just before a blocking
    call); a signal to a thread interrupts that thread's blocking call."""
    main = threading.main_thread().ident
    while True:
        try:
            received = os.read(read_end, 64)  # one byte per signal: its number
        except OSError:
            return
        signum = next((s for s in received if s in handled), None)
        if signum is None or main is None:
            continue
        while not _handled.is_set():
            try:
                signal.pthread_kill(main, signum)
            except (OSError, ProcessLookupError):
                return  # the main thread is gone: the process is ending
            _handled.wait(0.2)


def _on_signal(signum: int, frame: object) -> None:
    _handled.set()
    for other in HANDLED_SIGNALS:  # a second signal must not interrupt the clean-up
        if signal.getsignal(other) == _on_signal:
            signal.signal(other, _ignore)
    end_children(grace_s=0)
    raise Terminated(signum, signal.Signals(signum).name)


def _ignore(signum: int, frame: object) -> None:
    """A handler that does nothing (unlike SIG_IGN, children started later do not inherit it)."""


def _processes() -> dict[int, tuple[int, int, str]]:
    """pid -> (parent pid, process group, state) of every process we can see."""
    found = {}
    for entry in Path("/proc").iterdir() if Path("/proc").is_dir() else []:
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()  # after "pid (comm) "
        found[int(entry.name)] = (int(fields[1]), int(fields[2]), fields[0])
    return found


def children(root: int | None = None) -> list[int]:
    """Live descendants of ROOT, by default this process (zombies, already ended, are left
    out)."""
    table = _processes()
    found, parents = [], {os.getpid() if root is None else root}
    while True:
        new = [pid for pid, (ppid, _, state) in table.items()
               if ppid in parents and pid not in found and pid not in parents]
        if not new:
            return [pid for pid in found if table[pid][2] not in ("Z", "X")]
        found += new
        parents.update(new)


def end_children(grace_s: float = 3.0) -> None:
    """SIGTERM every descendant (and the process group of each one that leads its own group, as
    ninja's compilers and the test programs do); after GRACE_S, SIGKILL those still alive."""
    own_group = os.getpgrp()
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = children()
        if not pids:
            return
        table = _processes()
        for pid in pids:
            group = table.get(pid, (0, own_group, ""))[1]
            try:
                if group == pid and group != own_group:
                    os.killpg(group, sig)
                else:
                    os.kill(pid, sig)
            except OSError:
                pass  # gone meanwhile, or not ours to signal
        if sig == signal.SIGKILL or grace_s <= 0:
            return
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and children():
            time.sleep(0.05)


def kill_tree(root: int) -> None:
    """SIGKILL ROOT, its process group and every descendant's, from one look at the process
    table taken first. ninja runs each compiler in a process group of its own: killing ninja's
    group alone would leave them running, and once ninja is gone they are no longer ours to
    find (hostile-inputs row 24)."""
    table = _processes()
    own_group = os.getpgrp()
    targets = [root, *children(root)]
    for pid in targets:
        group = table.get(pid, (0, own_group, ""))[1]
        try:
            if group == pid and group != own_group:
                os.killpg(group, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
        except OSError:
            pass  # gone meanwhile, or not ours to signal


def exit_code(status: object) -> int:
    """The exit status `sys.exit(status)` would give (None -> 0, a message -> 1)."""
    if status is None:
        return 0
    if isinstance(status, int):
        return status
    print(status, file=sys.stderr)
    return 1


def finish(status: object) -> None:
    """End the process with STATUS, skipping teardown when a native runtime is loaded."""
    if not any(name in sys.modules for name in NATIVE_RUNTIME_MODULES):
        raise SystemExit(status)
    code = exit_code(status)
    atexit._run_exitfuncs()  # what teardown would run first; os._exit runs none of it
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # a closed pipe: nothing more can be said there
            pass
    os._exit(code)
