"""Work in progress under partial/: a live process's folder is never swept, a dead one's always
is (issue 11: a killed fetch left 160 MB in partial/import-* that nothing removed)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
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
