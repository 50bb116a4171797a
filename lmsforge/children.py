"""Child processes that must not outlive lmsforge.

A SIGKILL cannot be caught, so a killed lmsforge runs no cleanup: a `tar` or `git` it started
would go on writing into a work folder that the next lmsforge is about to sweep. On Linux, such a
child asks the kernel to kill it when its parent dies (``prctl(PR_SET_PDEATHSIG)``); elsewhere
this is a no-op and the folder's lock, which the child holds too (``lmsforge.cache``), keeps the
sweeper away until it exits.
"""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1
# Looked up once, here: between fork and exec a child should do as little as it can (another
# thread of ours may have held the dynamic loader's lock when it forked).
_PRCTL = ctypes.CDLL(None, use_errno=True).prctl if sys.platform.startswith("linux") else None


def die_with_parent() -> None:
    """A ``preexec_fn``: the child is killed when the thread that started it dies.

    Only for children started by the main thread (a worker thread that ends would kill them)."""
    if _PRCTL is not None:
        _PRCTL(PR_SET_PDEATHSIG, int(signal.SIGKILL))
