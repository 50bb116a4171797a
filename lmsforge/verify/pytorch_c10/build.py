"""Configure and build c10, c10_cuda and the LMS test programs of a PyTorch tree with CMake."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, Sequence

from lmsforge import bundled
from lmsforge.errors import CheckFailed, LmsforgeError
from lmsforge.verify import cache_launcher
from lmsforge.verify.cmake_cache import forget_foreign_configuration
from lmsforge.verify.levels import Timer
from lmsforge.verify.pytorch_c10 import inputs
from lmsforge.verify.pytorch_c10.process import run_logged

CMAKE_DIR = Path(__file__).resolve().parent
LIBRARIES = ("c10", "c10_cuda")
# The same c10_cuda objects linked against lmsforge's simulated CUDA runtime (core-sim).
SIM_LIBRARIES = ("c10", "c10_cuda_sim")
# bench/ of a source checkout: built for the simulator by core-sim (bench/CMakeLists.txt).
BENCH_DIR = bundled.path("bench")
SIM_BENCHMARKS = ("lms_bench_copy_sim", "lms_bench_oversub_sim")
# `lmsforge plan`'s replay (lmsforge/plan/native), built beside the benchmarks, whose small
# library it links.
PLAN_DIR = CMAKE_DIR.parents[1] / "plan" / "native"
PLAN_REPLAY = "lms_plan_replay_sim"


@dataclass(frozen=True)
class TestSuite:
    target: str
    sources: str  # glob relative to the tree root; CMakeLists.txt globs the same
    cuda: bool


SUITES = {
    "core": TestSuite("lms_core_tests", "c10/test/core/LargeModelSupport*_test.cpp", False),
    "cuda": TestSuite("lms_cuda_tests", "c10/cuda/test/LargeModelSupport*_test.cpp", True),
    "sim": TestSuite("lms_cuda_tests_sim", "c10/cuda/test/LargeModelSupport*_test.cpp", True),
}


class BuildResult(NamedTuple):
    seconds: float
    tus: int  # translation units compiled by this build (0 when everything was up to date)
    log: Path


def _forget_foreign_configuration(build_dir: Path) -> None:
    """A build folder configured from another copy of lmsforge starts afresh (cmake_cache)."""
    forget_foreign_configuration(build_dir, CMAKE_DIR)


def have_benchmarks() -> bool:
    """Whether bench/ is here (a source checkout of lmsforge, not an installed package)."""
    return (BENCH_DIR / "CMakeLists.txt").is_file()


def benchmarks_unavailable(tree: Path) -> str:
    """Why the benchmarks cannot be built for TREE, or "" when they can."""
    if not have_benchmarks():
        return "no bench/ beside lmsforge (not a source checkout)"
    return ""


def test_sources(tree: Path, suite: str) -> list[Path]:
    return sorted(tree.glob(SUITES[suite].sources))


def build(tree: Path, build_dir: Path, targets: Sequence[str], *, cache_root: Path,
          jobs: int = 2, cuda: bool = True, log: Path | None = None,
          echo: bool = False) -> BuildResult:
    """Configure BUILD_DIR for TREE (again, cheaply, if it exists) and build TARGETS."""
    for tool, package in (("cmake", "cmake"), ("ninja", "ninja-build")):
        if shutil.which(tool) is None:
            raise LmsforgeError(f"{tool} not found: install the Debian package {package}")
    inputs.ensure_debian_packages()
    configure = ["cmake", "-G", "Ninja", "-S", CMAKE_DIR, "-B", build_dir,
                 f"-DTORCH_SRC={tree.resolve()}", "-DCMAKE_BUILD_TYPE=Release",
                 f"-DLMS_BUILD_CUDA={'ON' if cuda else 'OFF'}",
                 # Every tree and build folder of the same content shares its objects: the
                 # harnesses' copies and the mutants' worktrees compile only what differs.
                 "-DCMAKE_CXX_COMPILER_LAUNCHER=" + ";".join(cache_launcher.launcher_words(
                     cache_root, {"tree": tree, "build": build_dir}))]
    if cuda:
        # Named explicitly: a root made from wheels has no nvcc for CMake to start from, and a
        # build folder configured against another root must not keep that root's paths.
        cuda_root = inputs.ensure_cuda_toolkit(cache_root)
        configure += [f"-DCUDAToolkit_ROOT={cuda_root}",
                      f"-DCUDAToolkit_INCLUDE_DIR={cuda_root / 'include'}",
                      f"-DCUDA_cudart_LIBRARY={cuda_root / 'lib64' / 'libcudart.so'}",
                      f"-DNVML_INCLUDE_DIR={inputs.nvml_include_dir(cache_root)}",
                      f"-DLMS_BENCH_DIR={BENCH_DIR if have_benchmarks() else ''}",
                      f"-DLMS_PLAN_DIR={PLAN_DIR if have_benchmarks() else ''}"]
    _forget_foreign_configuration(build_dir)
    build_dir.mkdir(parents=True, exist_ok=True)
    log = log or build_dir / "build.log"
    with open(log, "w") as out, Timer() as timer:
        configured = run_logged(configure, out, echo=echo)
        if configured.returncode != 0:
            raise CheckFailed(f"cmake configure failed: {first_error(configured.lines)}; "
                              f"full log: {log}")
        built = run_logged(["ninja", "-C", build_dir, f"-j{jobs}", *targets], out, echo=echo)
    if built.returncode != 0:
        raise CheckFailed(f"building {' '.join(targets)} failed: {first_error(built.lines)}; "
                          f"full log: {log}")
    return BuildResult(timer.seconds, count_compiled(built.lines), log)


def count_tus(build_dir: Path, targets: Sequence[str]) -> int:
    """How many translation units TARGETS are made of, whether or not they need rebuilding."""
    proc = subprocess.run(["ninja", "-C", str(build_dir), "-t", "commands", *targets],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise LmsforgeError(f"`ninja -t commands` failed in {build_dir}: "
                            f"{first_error(proc.stderr.splitlines())}; delete the folder")
    return sum(1 for line in proc.stdout.splitlines() if " -c " in line)


_COMPILED = re.compile(r"^\[\d+/\d+\] Building CXX object ")


def count_compiled(ninja_lines: Sequence[str]) -> int:
    return sum(1 for line in ninja_lines if _COMPILED.match(line))


def first_error(lines: Sequence[str]) -> str:
    """The line of a compiler, linker or cmake log that best says what went wrong."""
    for marker in ("undefined reference to", ": error:", ": fatal error:", "CMake Error"):
        for index, line in enumerate(lines):
            if marker in line:
                if marker == "CMake Error":
                    following = [rest.strip() for rest in lines[index + 1:] if rest.strip()]
                    return following[0] if following else line.strip()
                return line.strip()
    for line in lines:
        if line.startswith("FAILED: "):
            return line.strip()
    return lines[-1].strip() if lines else "no output"
