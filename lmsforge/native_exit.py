"""Ending the process once rattler's native modules are loaded, without the interpreter's teardown.

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
import sys

NATIVE_RUNTIME_MODULES = ("rattler", "rattler_build")


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
