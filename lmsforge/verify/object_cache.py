"""Compile one C++ unit through a content-addressed object cache that every tree and run shares.

Verification compiles the same sources again and again: each level of a series in its own work
folder, each work tree of the same series (the harness tests', a mutant's), each run. A unit's
object depends only on the compiler, the command and the source as the preprocessor sees it, so
that is the key:

- the compiler: its resolved path and ``-dumpfullversion -dumpmachine`` (a new g++ is a new key);
- the command without its input and output, with the caller's per-run folders (``roots``: the
  tree, generated code, shims) named by role, so that two trees of the same content share;
- the preprocessed source (``-E``), with the same folders named the same way. It holds every
  header the unit reads, so a changed header, a new header that shadows another, a changed macro
  or a regenerated proto changes the key: nothing is reused that a fresh compile would build
  differently. Preprocessing costs about a fourteenth of an -O1 compile of a TensorFlow unit.

Every compile, cached or not, runs with ``-ffile-prefix-map`` for those folders, so an object does
not depend on where its tree was (``__FILE__`` and debug paths name the role). Only the compiler's
working folder in the debug information may come from the run that compiled first.

Only successes are stored (an object, or a passed ``-fsyntax-only`` check, with the compiler's
warnings); a failing unit is compiled again each time, so its errors are always fresh. Entries
appear by atomic rename, so concurrent compiles never see half an object. The folder is kept
under ``MAX_BYTES`` by removing the least recently used entries. ``LMSFORGE_OBJECT_CACHE=off``
compiles everything afresh; ``LMSFORGE_OBJECT_CACHE_DIR`` moves the folder from ``<cache>/objects``
(the test suite points it at one folder for all its tests, whose caches are otherwise their own).
"""

from __future__ import annotations

import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path
from typing import Mapping, Sequence

MAX_BYTES = 3 << 30
KEEP_BYTES = 2 << 30
# Listing the whole folder costs a stat per file: a process prunes after its first store and then
# once per PRUNE_EVERY_BYTES it stored, so the folder overshoots MAX_BYTES by at most that much
# per process running.
PRUNE_EVERY_BYTES = 256 << 20
DISABLE_ENV = "LMSFORGE_OBJECT_CACHE"
FOLDER_ENV = "LMSFORGE_OBJECT_CACHE_DIR"
# Modes of a command we can cache, and what its entry holds.
OBJECT, SYNTAX = "-c", "-fsyntax-only"


def compile_unit(cmd: Sequence[str], roots: Mapping[Path, str],
                 cache_dir: Path | None) -> subprocess.CompletedProcess[str]:
    """Run the compile CMD (``-c SRC -o OBJ`` or ``-fsyntax-only SRC``), from the cache under
    CACHE_DIR when it holds the result. ROOTS maps per-run folders to the role names that
    replace them (``{tree: "tree"}``). Returns what the compiler returned (on a hit: rc 0 and the
    warnings it printed then)."""
    mapped = with_prefix_maps(cmd, roots)
    mode = OBJECT if OBJECT in mapped else SYNTAX if SYNTAX in mapped else None
    folder = None if cache_dir is None else objects_folder(cache_dir)
    if mode is None or folder is None or not enabled():
        return _run(mapped)
    key = _key(mapped, mode, roots)
    if key is None:  # the preprocessor failed: the compile says why
        return _run(mapped)
    output = Path(mapped[mapped.index("-o") + 1]) if mode == OBJECT else None
    hit = _fetch(folder, key, output)
    if hit is not None:  # the warnings name this run's folders, as a compile here would
        return subprocess.CompletedProcess(mapped, 0, "", _in_this_run(hit, roots))
    proc = _run(mapped)
    if proc.returncode == 0 and (output is None or output.is_file()):
        _store(folder, key, output, _normalised(proc.stderr.encode(), roots).decode())
    return proc


def enabled() -> bool:
    """Whether compiles may come from the cache (``LMSFORGE_OBJECT_CACHE=off``: never)."""
    return os.environ.get(DISABLE_ENV, "").lower() != "off"


def objects_folder(cache_dir: Path) -> Path:
    """Where the objects of the lmsforge cache CACHE_DIR are kept."""
    moved = os.environ.get(FOLDER_ENV)
    return Path(moved) if moved else cache_dir / "objects"


def with_prefix_maps(cmd: Sequence[str], roots: Mapping[Path, str]) -> list[str]:
    """CMD with a ``-ffile-prefix-map`` per root, after the compiler. GCC applies the last map
    that matches, so the longer (inner) folders come last."""
    maps = [f"-ffile-prefix-map={_slash(root)}=/lmsforge/{name}/"
            for root, name in sorted(roots.items(), key=lambda item: len(str(item[0])))]
    return [cmd[0], *maps, *cmd[1:]]


def _key(cmd: list[str], mode: str, roots: Mapping[Path, str]) -> str | None:
    out_at = cmd.index("-o") if "-o" in cmd else None
    preprocess = [word for i, word in enumerate(cmd)
                  if out_at is None or i not in (out_at, out_at + 1)]
    preprocess[preprocess.index(mode)] = "-E"
    proc = subprocess.run(preprocess, capture_output=True)
    if proc.returncode != 0:
        return None
    digest = hashlib.sha256()
    digest.update(_compiler_identity(cmd[0]).encode())
    for word in preprocess:
        digest.update(b"\0" + _normalised(word.encode(), roots))
    digest.update(b"\0" + mode.encode() + b"\0")
    digest.update(_normalised(proc.stdout, roots))
    return digest.hexdigest()


def _normalised(data: bytes, roots: Mapping[Path, str]) -> bytes:
    # The longest first: a root inside another one keeps its own name. A root is replaced where
    # it is a whole path or a path's beginning (`-I/x/tree`, `"/x/tree/a.h"`), never inside a
    # longer name (`/x/tree2`).
    for root, name in sorted(roots.items(), key=lambda item: -len(str(item[0]))):
        pattern = re.escape(str(root).rstrip("/").encode()) + rb"(?:/|(?![^\s\"\0]))"
        data = re.sub(pattern, f"/lmsforge/{name}/".encode(), data)
    return data


def _in_this_run(text: str, roots: Mapping[Path, str]) -> str:
    for root, name in roots.items():
        text = text.replace(f"/lmsforge/{name}/", _slash(root))
    return text


def _slash(root: Path) -> str:
    return str(root).rstrip("/") + "/"


@functools.lru_cache(maxsize=None)
def _compiler_identity(compiler: str) -> str:
    resolved = shutil.which(compiler) or compiler
    real = os.path.realpath(resolved)
    version = subprocess.run([resolved, "-dumpfullversion", "-dumpmachine"],
                             capture_output=True, text=True).stdout
    stat = os.stat(real)
    return f"{real}\0{stat.st_size}\0{stat.st_mtime_ns}\0{version}"


def _entry(folder: Path, key: str) -> Path:
    return folder / key[:2] / key


def _fetch(folder: Path, key: str, output: Path | None) -> str | None:
    """The warnings of the stored compile after copying its object to OUTPUT; None on a miss."""
    entry = _entry(folder, key)
    try:
        warnings = (entry / "stderr").read_text()
        if output is not None:
            shutil.copyfile(entry / "object.o", output)
        os.utime(entry)  # recently used: pruned last
    except OSError:  # absent, or pruned by another process meanwhile
        return None
    return warnings


def _store(folder: Path, key: str, output: Path | None, warnings: str) -> None:
    entry = _entry(folder, key)
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=entry.parent, prefix=f".{key[:8]}-"))
    except OSError:  # a read-only cache: compile without it
        return
    try:
        if output is not None:
            shutil.copyfile(output, staging / "object.o")
        (staging / "stderr").write_text(warnings)
        stored = sum(f.stat().st_size for f in staging.iterdir())
        os.rename(staging, entry)
    except OSError:  # another process stored it first, or the disk is full
        shutil.rmtree(staging, ignore_errors=True)
        return
    if _due_for_pruning(stored):
        _prune(folder)


_unpruned_bytes: int | None = None  # stored by this process since it last pruned; None: never
_unpruned_lock = threading.Lock()  # the levels compile on a thread pool


def _due_for_pruning(stored: int) -> bool:
    global _unpruned_bytes
    with _unpruned_lock:
        due = _unpruned_bytes is None or _unpruned_bytes + stored >= PRUNE_EVERY_BYTES
        _unpruned_bytes = 0 if due else _unpruned_bytes + stored
    return due


def _prune(folder: Path) -> None:
    entries = []
    for shard in folder.iterdir():
        if not shard.is_dir():
            continue
        for entry in shard.iterdir():
            if entry.name.startswith("."):
                continue
            try:
                size = sum(f.stat().st_size for f in entry.iterdir())
                entries.append((entry.stat().st_mtime, size, entry))
            except OSError:
                continue
    total = sum(size for _, size, _ in entries)
    if total <= MAX_BYTES:
        return
    for _, size, entry in sorted(entries, key=lambda item: item[0]):
        if total <= KEEP_BYTES:
            break
        shutil.rmtree(entry, ignore_errors=True)
        total -= size


def _run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True)
