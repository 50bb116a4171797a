"""Work in progress under partial/: a live process's folder is never swept, a dead one's always
is (issue 11: a killed fetch left 160 MB in partial/import-* that nothing removed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from lmsforge.cache import Cache, sweep_partial

HOLDER = """
import sys, time
from pathlib import Path
from lmsforge.cache import Cache
with Cache(Path(sys.argv[1])).scratch("import") as folder:
    (folder / "data").write_bytes(b"x" * 1000)
    print(folder, flush=True)
    time.sleep(60)
"""


def _holder(root: Path) -> tuple[subprocess.Popen, Path]:
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(root)], stdout=subprocess.PIPE,
                            text=True)
    return proc, Path(proc.stdout.readline().strip())


def test_a_live_processs_folder_is_kept_and_a_killed_ones_is_swept(tmp_path):
    proc, folder = _holder(tmp_path)
    try:
        assert sweep_partial(tmp_path / "partial") == []
        assert (folder / "data").is_file()
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert folder.is_dir()  # SIGKILL: no cleanup ran
    assert sweep_partial(tmp_path / "partial") == [folder.name]
    assert sorted(p.name for p in (tmp_path / "partial").iterdir()) == []


def test_scratch_sweeps_first_and_cleans_up_after_itself(tmp_path):
    stale = tmp_path / "partial" / "download-old"
    stale.mkdir(parents=True)  # left by an lmsforge that predates the locks
    with Cache(tmp_path).scratch("download") as folder:
        assert folder.is_dir() and not stale.exists()
        (folder / "file").write_text("x")
    assert list((tmp_path / "partial").iterdir()) == []


def test_two_scratch_folders_never_share_a_name(tmp_path):
    cache = Cache(tmp_path)
    with cache.scratch("x") as one, cache.scratch("x") as two:
        assert one != two and one.is_dir() and two.is_dir()
    assert list((tmp_path / "partial").iterdir()) == []


# A scratch folder's owner starts a child that works there, then is killed (SIGKILL: no cleanup).
# FULL_OPTIONS: the child gets Cache.child_options as they are; otherwise without the
# parent-death signal, so that it outlives its parent and only its share of the lock remains.
PARENT_OF_A_WORKER = """
import subprocess, sys, time
from pathlib import Path
from lmsforge.cache import Cache
with Cache(Path(sys.argv[1])).scratch("import") as folder:
    options = Cache.child_options(folder)
    if sys.argv[2] != "full":
        options = {**options, "preexec_fn": None}
    child = subprocess.Popen(["sleep", "60"], cwd=folder, **options)
    print(folder, child.pid, flush=True)
    time.sleep(60)
"""


def _parent_of_a_worker(root: Path, options: str) -> tuple[Path, int]:
    proc = subprocess.Popen([sys.executable, "-c", PARENT_OF_A_WORKER, str(root), options],
                            stdout=subprocess.PIPE, text=True)
    folder, child = proc.stdout.readline().split()
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return Path(folder), int(child)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def test_a_child_that_outlives_its_killed_parent_keeps_the_folder_from_the_sweep(tmp_path):
    folder, child = _parent_of_a_worker(tmp_path, "lock-only")
    try:
        assert _alive(child)
        assert sweep_partial(tmp_path / "partial") == []  # the child still works there
        assert folder.is_dir()
    finally:
        os.kill(child, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert sweep_partial(tmp_path / "partial") == [folder.name]


def test_a_child_dies_with_its_killed_parent_and_the_folder_is_then_swept(tmp_path):
    folder, child = _parent_of_a_worker(tmp_path, "full")
    deadline = time.monotonic() + 30
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.01)
    try:
        assert not _alive(child), "the child outlived its killed parent"
    finally:
        if _alive(child):
            os.kill(child, signal.SIGKILL)
    assert sweep_partial(tmp_path / "partial") == [folder.name]
    assert list((tmp_path / "partial").iterdir()) == []
