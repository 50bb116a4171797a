"""The cache folder (downloads, imported trees, recorded identities) and its locks.

Default location: the user's cache directory (``~/.cache/lmsforge`` on Linux); overridden by
``--cache-dir`` or ``LMSFORGE_CACHE_DIR``. Several lmsforge processes may share one cache: every
change to an entry happens under that entry's file lock, and files appear under their final name
only by an atomic rename after they were verified, so an interrupted download never leaves an entry
that a later run would use.
"""

from __future__ import annotations

import os
import re
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import filelock
import platformdirs

LOCK_TIMEOUT_S = 3600  # a concurrent download of the largest archive finishes well within this


def default_cache_dir() -> Path:
    env = os.environ.get("LMSFORGE_CACHE_DIR")
    if env:
        return Path(env).expanduser().resolve()
    return Path(platformdirs.user_cache_dir("lmsforge")).resolve()


class Cache:
    def __init__(self, root: Path) -> None:
        self.root = root

    @property
    def archives(self) -> Path:
        return self.root / "archives"

    @property
    def partial(self) -> Path:
        # Downloads in progress; never read from, removed by the process that made them.
        return self.root / "partial"

    def repo(self, framework: str, kind: str) -> Path:
        return self.root / "repos" / f"{framework}-{kind}.git"

    def identity_file(self, framework: str, tag: str) -> Path:
        return self.root / "identities" / framework / f"{_safe(tag)}.json"

    def report_dir(self, framework: str, tag: str) -> Path:
        return self.root / "reports" / framework / _safe(tag)

    def build_dir(self, framework: str, tag: str, what: str) -> Path:
        return self.root / "builds" / framework / _safe(tag) / what

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        locks = self.root / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(locks / f"{_safe(name)}.lock"), timeout=LOCK_TIMEOUT_S):
            yield


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name)
