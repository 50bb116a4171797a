"""A failed rattler-build names the build script's first error and keeps its whole output."""

from __future__ import annotations

import os
import time
from pathlib import Path

from lmsforge.packaging import rattler as build


def _script_log(output_dir: Path, name: str, text: str, age: float = 0.0) -> Path:
    log = output_dir / "bld" / f"rattler-build_pkg_{name}" / "work" / "conda_build.log"
    log.parent.mkdir(parents=True)
    log.write_text(text)
    if age:
        then = time.time() - age
        os.utime(log, (then, then))
    return log


def test_the_failed_builds_script_log_is_found_and_older_ones_ignored(tmp_path):
    _script_log(tmp_path, "old", "CMake Error: from an earlier build\n", age=3600)
    start = time.monotonic()
    fresh = _script_log(tmp_path, "new", "+ cmake -DERROR_CHECKS=ON\n-- ok\n"
                        "CMake Error at CMakeLists.txt:127 (add_subdirectory):\n"
                        "-- Configuring incomplete, errors occurred!\n")
    found = build._script_log(tmp_path, start)
    assert found == fresh
    # The command line (a "+ " trace) mentions ERROR but is not the error.
    assert build._first_error_line(found) == "CMake Error at CMakeLists.txt:127 (add_subdirectory):"


def test_no_script_log_means_the_exception_alone(tmp_path):
    start = time.monotonic()
    assert build._script_log(tmp_path, start) is None
    where = build._write_log(None, tmp_path, "Script failed to execute", None)
    assert where.read_text() == "Script failed to execute"


def test_the_full_log_holds_the_exception_and_the_scripts_output(tmp_path):
    log = _script_log(tmp_path, "x", "fatal error: cuda_runtime.h: No such file\n")
    where = build._write_log(tmp_path / "logs" / "b.log", tmp_path, "boom", log)
    text = where.read_text()
    assert text.startswith("boom") and "fatal error: cuda_runtime.h" in text
