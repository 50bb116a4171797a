"""The `core-cpu` level: the series' BFC allocator test, built from the tree and run on the CPU.

The patched ``tsl::BFCAllocator`` and the LMS core are compiled from the tree; everything else they
call (logging, mutexes, the allocator base) comes from the wheel's ``libtensorflow_framework.so.2``.
Symbols defined in the test binary take precedence over the library's unpatched copies. The test
supplies its own host sub-allocator and host LMS backend, so "device memory" is host memory.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple

from lmsforge.errors import CheckFailed
from lmsforge.verify.tensorflow_tf.toolchain import CXX, WHEEL_FLAGS, Paths, include_flags

LMS_DIR = "tensorflow/tsl/framework/lms"
ALLOCATOR_SOURCES = ("tensorflow/tsl/framework/bfc_allocator.cc",
                     "tensorflow/tsl/framework/bfc_allocator_lms.cc")
TEST_BINARY = "bfc_allocator_lms_test"


class Sources(NamedTuple):
    library: list[str]  # allocator + LMS core
    tests: list[str]


def find_sources(tree: Path) -> Sources:
    lms = sorted(p for p in (tree / LMS_DIR).glob("*.cc")) if (tree / LMS_DIR).is_dir() else []
    tests = [str(p.relative_to(tree)) for p in lms if p.name.endswith("_test.cc")]
    core = [str(p.relative_to(tree)) for p in lms if not p.name.endswith("_test.cc")]
    allocator = [s for s in ALLOCATOR_SOURCES if (tree / s).is_file()]
    return Sources(allocator + core, tests)


def build(sources: Sources, paths: Paths, library_dir: Path, out: Path, log: Path,
          jobs: int) -> Path:
    """Compile and link the test binary; raises CheckFailed naming the first error."""
    objects = out / "obj"
    objects.mkdir(parents=True, exist_ok=True)
    units = [*sources.library, *sources.tests]

    def compile_one(source: str) -> tuple[str, subprocess.CompletedProcess[str]]:
        obj = objects / (source.replace("/", "__") + ".o")
        cmd = [CXX, *WHEEL_FLAGS, "-O1", "-g", *include_flags(paths), "-c",
               str(paths.tree / source), "-o", str(obj)]
        return source, subprocess.run(cmd, capture_output=True, text=True)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        compiled = list(pool.map(compile_one, units))
    with open(log, "a") as out_log:
        for source, proc in compiled:
            out_log.write(f"== compile {source}: rc={proc.returncode}\n{proc.stderr}")
    for source, proc in compiled:
        if proc.returncode != 0:
            raise CheckFailed(f"{source} does not compile: {_first_error(proc.stderr)}; "
                              f"full log: {log}")
    binary = out / TEST_BINARY
    link = [CXX, "-o", str(binary), *(str(objects / (s.replace("/", "__") + ".o")) for s in units),
            f"-L{library_dir}", "-l:libtensorflow_framework.so.2", f"-Wl,-rpath,{library_dir}",
            "-lgtest_main", "-lgtest", "-lpthread"]
    proc = subprocess.run(link, capture_output=True, text=True)
    with open(log, "a") as out_log:
        out_log.write(f"== link: rc={proc.returncode}\n{proc.stderr}")
    if proc.returncode != 0:
        raise CheckFailed(f"linking {TEST_BINARY} failed: {_first_error(proc.stderr)}; "
                          f"full log: {log}")
    return binary


def _first_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "error" in line]
    return (lines or stderr.strip().splitlines() or ["no output"])[0].strip()
