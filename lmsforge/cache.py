"""The cache folder (downloads, imported trees, recorded identities) and its locks.

Default location: the user's cache directory (``~/.cache/lmsforge`` on Linux); overridden by
``--cache-dir`` or ``LMSFORGE_CACHE_DIR``. Several lmsforge processes may share one cache: every
change to an entry happens under that entry's file lock, and files appear under their final name
only by an atomic rename after they were verified, so an interrupted download never leaves an entry
that a later run would use.

Work in progress lives in ``partial/<name>`` folders, each held by a lock on ``partial/<name>.lock``
for as long as its process lives, and by the children it starts to work there
(``Cache.child_options``): a `tar` that outlives a killed lmsforge by a moment still holds it. A
folder whose lock nobody holds belongs to processes that are all gone; the next process to start
work there removes it.

A cache may be read-only (an admin fills it once for a cluster). Reading from it works; locks and
logs then go to a per-user folder under the system's temporary directory, and anything that would
have to write into the cache stops with one line that says what to do.
"""

from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re
import secrets
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import filelock
import platformdirs

from lmsforge.children import die_with_parent
from lmsforge.errors import UsageError

LOCK_TIMEOUT_S = 3600  # a concurrent download of the largest archive finishes well within this
UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS)
_HELD_LOCKS: dict[Path, int] = {}  # scratch folder -> the descriptor of its held lock file


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
        # Work in progress; never read from (see `scratch`).
        return self.root / "partial"

    def repo(self, framework: str, kind: str) -> Path:
        return self.root / "repos" / f"{framework}-{kind}.git"

    def identity_file(self, framework: str, tag: str) -> Path:
        return self.root / "identities" / framework / f"{_safe(tag)}.json"

    def report_dir(self, framework: str, tag: str) -> Path:
        return self.root / "reports" / framework / _safe(tag)

    def build_dir(self, framework: str, tag: str, what: str) -> Path:
        return self.root / "builds" / framework / _safe(tag) / what

    def writable(self) -> bool:
        """Whether this process can create files in the cache (made if it does not exist)."""
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=self.root, prefix=".probe-"):
                return True
        except OSError as exc:
            if exc.errno in UNWRITABLE:
                return False
            if exc.errno in (errno.EEXIST, errno.ENOTDIR):
                raise UsageError(f"the cache {self.root} is not a folder; pass --cache-dir "
                                 "with a folder") from None
            raise

    def require_writable(self, why: str) -> None:
        if not self.writable():
            raise UsageError(f"the cache {self.root} is read-only and {why}; pass --cache-dir "
                             "(or LMSFORGE_CACHE_DIR) with a folder you can write")

    def state_dir(self) -> Path:
        """Where locks and logs go: the cache itself, or a per-user folder when it is read-only."""
        if self.writable():
            return self.root
        key = hashlib.sha256(str(self.root).encode()).hexdigest()[:16]
        fallback = Path(tempfile.gettempdir()) / f"lmsforge-{os.getuid()}" / key
        fallback.mkdir(parents=True, exist_ok=True, mode=0o700)
        return fallback

    @property
    def log_dir(self) -> Path:
        return self.state_dir() / "logs"

    @contextmanager
    def lock(self, name: str) -> Iterator[None]:
        locks = self.state_dir() / "locks"
        locks.mkdir(parents=True, exist_ok=True)
        with filelock.FileLock(str(locks / f"{_safe(name)}.lock"), timeout=LOCK_TIMEOUT_S):
            yield

    @contextmanager
    def scratch(self, prefix: str) -> Iterator[Path]:
        """A fresh folder under ``partial/`` for this process, removed on exit.

        Leftovers of killed processes are removed first, so they never pile up."""
        self.require_writable(f"has no room for work in progress ({prefix})")
        self.partial.mkdir(parents=True, exist_ok=True)
        sweep_partial(self.partial)
        while True:
            name = f"{_safe(prefix)}-{secrets.token_hex(6)}"
            lock_path = self.partial / f"{name}.lock"
            fd = os.open(lock_path, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
            if _same_file(fd, lock_path):  # a sweeper did not remove it before we locked it
                break
            os.close(fd)
        folder = self.partial / name
        _HELD_LOCKS[folder] = fd
        try:
            folder.mkdir()
            yield folder
        finally:
            del _HELD_LOCKS[folder]
            shutil.rmtree(folder, ignore_errors=True)
            lock_path.unlink(missing_ok=True)
            os.close(fd)

    @staticmethod
    def held_lock(folder: Path) -> int:
        """The descriptor of the lock this process holds on FOLDER, a ``scratch`` folder."""
        return _HELD_LOCKS[folder]

    @staticmethod
    def child_options(folder: Path) -> dict[str, object]:
        """``subprocess`` keyword arguments for a child (started by the main thread) that writes
        into FOLDER, a ``scratch`` folder: it holds the folder's lock too and dies with lmsforge.

        Without both, SIGKILL on lmsforge leaves the child writing there while the next lmsforge
        sweeps the folder: the sweep fails half-way, or the child makes files again after it."""
        return {"pass_fds": (Cache.held_lock(folder),), "preexec_fn": die_with_parent}


def sweep_partial(partial: Path) -> list[str]:
    """Remove work folders (and their locks) whose owning process is gone; returns their names."""
    removed = []
    for entry in sorted(partial.iterdir()) if partial.is_dir() else []:
        if entry.suffix == ".lock":
            continue
        lock_path = partial / f"{entry.name}.lock"
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except FileNotFoundError:
            fd = None  # no lock at all: left by an lmsforge that predates these locks
        try:
            if fd is not None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # its process is alive and working there
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry, ignore_errors=True)
            else:
                entry.unlink(missing_ok=True)
            if fd is not None:
                lock_path.unlink(missing_ok=True)
            removed.append(entry.name)
        finally:
            if fd is not None:
                os.close(fd)
    for lock_path in partial.glob("*.lock"):  # a lock whose folder is gone and no one holds
        if (partial / lock_path.stem).exists():
            continue
        try:
            fd = os.open(lock_path, os.O_RDWR)
        except FileNotFoundError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if _same_file(fd, lock_path) and not (partial / lock_path.stem).exists():
                lock_path.unlink(missing_ok=True)
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
    return removed


def _same_file(fd: int, path: Path) -> bool:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    own = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (own.st_dev, own.st_ino)


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._+-]", "_", name)
