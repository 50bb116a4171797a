"""Build folders in lmsforge's cache are configured by cmake from one copy of lmsforge's sources;
another copy (a second checkout, a moved install, a CI clone) makes cmake refuse the folder with
"does not match the source ... used to generate cache". The folder is only a cache: start it
afresh."""

from __future__ import annotations

import shutil
from pathlib import Path


def forget_foreign_configuration(build_dir: Path, source_dir: Path) -> None:
    """Remove BUILD_DIR when its CMakeCache.txt names a source folder other than SOURCE_DIR."""
    cache_file = build_dir / "CMakeCache.txt"
    if not cache_file.is_file():
        return
    for line in cache_file.read_text(errors="replace").splitlines():
        if line.startswith("CMAKE_HOME_DIRECTORY:INTERNAL="):
            if Path(line.split("=", 1)[1]).resolve() != Path(source_dir).resolve():
                shutil.rmtree(build_dir)
            return
