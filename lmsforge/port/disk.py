"""A full disk during a port: name the device that is full, and what the port left on it.

A port writes to three places that may be on different devices: its work tree (git, the state,
scratch files), the patches folder (the staging folder of the series, the shared rr-cache) and
the cache. The OSError says little: a copy names its source as the file (the destination is
`filename2`), a write of an open file names nothing. So every place is asked how much room it
has left, and the first one that is full is named.
"""

from __future__ import annotations

import os
from pathlib import Path

from lmsforge.errors import LmsforgeError
from lmsforge.port.state import PortState, command

FULL_BYTES = 1 << 20  # less room than this left: the device that ran out


def free_bytes(path: Path) -> int | None:
    """Room left to an ordinary user on PATH's device (its nearest existing folder)."""
    for folder in (path, *path.parents):
        try:
            found = os.statvfs(folder)
        except OSError:
            continue
        return found.f_bavail * found.f_frsize
    return None


def full_device(exc: OSError, places: list[Path]) -> Path | None:
    """The first of the error's own paths (destination first), then of PLACES, whose device is
    full; or the error's destination or file when none looks full."""
    named = [Path(p) for p in (exc.filename2, exc.filename) if isinstance(p, (str, Path)) and p]
    for place in [*named, *places]:
        room = free_bytes(place)
        if room is not None and room < FULL_BYTES:
            return place
    return named[0] if named else None


def no_space(exc: OSError, places: list[Path], tree: Path | None,
             state: PortState | None) -> LmsforgeError:
    where = full_device(exc, places)
    device = f"the device of {where}" if where else "a device the port writes to"
    staging = Path(state.finish.staging) if state and state.finish else None
    added = (f" (and the resolutions it was adding in {state.shared_rr_cache})"
             if state and state.finish and state.finish.rr_added else "")
    left = (f"; this port's unfinished series stays in {staging}{added} until "
            f"`{command(state, tree, 'continue')}` remakes it or "
            f"`{command(state, tree, 'abort')}` removes it"
            if state and tree and staging and staging.exists() else "")
    then = (f", then `{command(state, tree, 'continue')}`" if state and tree and not left
            else "")
    return LmsforgeError(f"no space left on {device}{left}; free space there{then}")
