"""The c10 harness without building PyTorch: gtest reports, build logs, macro headers, levels."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lmsforge.upstream import debian

from lmsforge.errors import UsageError
from lmsforge.frameworks import pytorch
from lmsforge.verify.levels import FAIL, SKIPPED, LevelContext, have_cuda_device
from lmsforge.verify.pytorch_c10 import build, inputs
from lmsforge.verify.pytorch_c10.gtest import GtestReport, one_line, parse_gtest_json

# Real `--gtest_output=json:` of googletest 1.12.1 (Debian) for a file with one passing, one
# skipped, one failing and one disabled test.
GTEST_MIXED = json.dumps({
    "tests": 4, "failures": 1, "disabled": 1, "errors": 0, "timestamp": "2026-11-22T14:21:12Z",
    "time": "0s", "name": "AllTests", "testsuites": [{
        "name": "LargeModelSupportSmoke", "tests": 4, "failures": 1, "disabled": 1, "errors": 0,
        "timestamp": "2026-11-22T14:21:12Z", "time": "0s", "testsuite": [
            {"name": "StorageOverCpuAllocator",
             "file": "c10/test/core/LargeModelSupportSmoke_test.cpp", "line": 6,
             "status": "RUN", "result": "COMPLETED",
             "timestamp": "2026-11-22T14:21:12Z", "time": "0s",
             "classname": "LargeModelSupportSmoke"},
            {"name": "Skipped", "file": "c10/test/core/LargeModelSupportSmoke_test.cpp",
             "line": 13, "status": "RUN", "result": "SKIPPED",
             "timestamp": "2026-11-22T14:21:12Z", "time": "0s",
             "classname": "LargeModelSupportSmoke"},
            {"name": "Fails", "file": "c10/test/core/LargeModelSupportSmoke_test.cpp", "line": 17,
             "status": "RUN", "result": "COMPLETED", "timestamp": "2026-11-22T14:21:12Z",
             "time": "0s", "classname": "LargeModelSupportSmoke",
             "failures": [{"failure": "c10/test/core/LargeModelSupportSmoke_test.cpp:18\n"
                                      "Expected equality of these values:\n  1\n  2\n"
                                      "deliberate failure", "type": ""}]},
            {"name": "DISABLED_NotRun", "file": "c10/test/core/LargeModelSupportSmoke_test.cpp",
             "line": 21, "status": "NOTRUN", "result": "SUPPRESSED",
             "timestamp": "1970-01-01T00:00:00Z", "time": "0s",
             "classname": "LargeModelSupportSmoke"}]}]})

# The same program run with a --gtest_filter that matches nothing.
GTEST_EMPTY = ('{"tests": 0, "failures": 0, "disabled": 0, "errors": 0, '
               '"timestamp": "2026-11-22T14:26:40Z", "time": "0s", "name": "AllTests", '
               '"testsuites": []}')

# Real template from PyTorch v2.6.0 (c10/macros/cmake_macros.h.in) and c10/cuda's.
CMAKE_MACROS_IN = """\
#ifndef C10_MACROS_CMAKE_MACROS_H_
#define C10_MACROS_CMAKE_MACROS_H_
#cmakedefine C10_BUILD_SHARED_LIBS
#cmakedefine C10_USE_GLOG
#cmakedefine C10_USE_GFLAGS
#cmakedefine C10_USE_NUMA
#cmakedefine C10_USE_MSVC_STATIC_RUNTIME
#cmakedefine C10_USE_ROCM_KERNEL_ASSERT
#endif // C10_MACROS_CMAKE_MACROS_H_
"""
CUDA_CMAKE_MACROS_IN = "#pragma once\n#cmakedefine C10_CUDA_BUILD_SHARED_LIBS\n"


def test_gtest_report_counts_every_outcome():
    assert parse_gtest_json(GTEST_MIXED) == GtestReport(
        passed=1, failed=1, skipped=1, disabled=1, failures=("LargeModelSupportSmoke.Fails",),
        skips=("LargeModelSupportSmoke.Skipped",),
        first_failure="c10/test/core/LargeModelSupportSmoke_test.cpp:18 Expected equality of "
                      "these values: 1 2 deliberate failure")


def test_a_long_failure_message_is_cut_to_one_line():
    folded = one_line("a.cpp:1\n" + "x" * 500, limit=40)
    assert "\n" not in folded and len(folded) == 40 and folded.startswith("a.cpp:1 xxx")


def test_gtest_report_of_an_empty_run_is_all_zero():
    assert parse_gtest_json(GTEST_EMPTY) == GtestReport(0, 0, 0, 0, ())


def test_compiled_units_are_counted_from_ninja_output():
    lines = [
        "ninja: Entering directory `/b'",
        "[1/2] Building CXX object CMakeFiles/lms_core_tests.dir/t/c10/test/core/X_test.cpp.o",
        "[2/2] Linking CXX executable lms_core_tests",
    ]
    assert build.count_compiled(lines) == 1
    assert build.count_compiled(["ninja: no work to do."]) == 0


@pytest.mark.parametrize("lines, expected", [
    (["FAILED: CMakeFiles/c10.dir/bad.cpp.o", "bad.cpp: In function ‘int f()’:",
      "bad.cpp:2:23: error: ‘no_such_thing’ is not a member of ‘c10’"],
     "bad.cpp:2:23: error: ‘no_such_thing’ is not a member of ‘c10’"),
    (["FAILED: lms_core_tests", "/usr/bin/ld: /tmp/ccFR4VVl.o: in function `main':",
      "link.cpp:(.text+0x5): undefined reference to `missing()'",
      "collect2: error: ld returned 1 exit status"],
     "link.cpp:(.text+0x5): undefined reference to `missing()'"),
    (["CMake Error at CMakeLists.txt:14 (message):",
      "  TORCH_SRC='/x' is not a PyTorch source tree",
      "", "-- Configuring incomplete, errors occurred!"],
     "TORCH_SRC='/x' is not a PyTorch source tree"),
    ([], "no output"),
])
def test_first_error_picks_the_line_that_explains(lines, expected):
    assert build.first_error(lines) == expected


@pytest.fixture
def debian_inputs() -> None:
    """fmt's headers and the rest, as the level's own build gets them (cmake's configure looks
    for them): on a fresh machine these tests ran before any other test had installed them."""
    inputs.ensure_debian_packages()


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ninja") is None,
                    reason="cmake and ninja are needed to configure")
def test_cmake_renders_macro_headers_with_shared_libs_only(tmp_path, debian_inputs):
    tree = tmp_path / "tree"
    (tree / "c10" / "macros").mkdir(parents=True)
    (tree / "c10" / "cuda" / "impl").mkdir(parents=True)
    (tree / "c10" / "macros" / "cmake_macros.h.in").write_text(CMAKE_MACROS_IN)
    (tree / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h.in").write_text(CUDA_CMAKE_MACROS_IN)
    (tree / "c10" / "util").mkdir()
    (tree / "c10" / "util" / "Empty.cpp").write_text("int c10_empty() { return 0; }\n")
    (tree / "c10" / "cuda" / "Empty.cpp").write_text("int c10_cuda_empty() { return 0; }\n")
    cuda = (inputs.cuda_home() / "include" / "cuda_runtime_api.h").is_file()
    out = tmp_path / "b"
    subprocess.run(["cmake", "-G", "Ninja", "-S", build.CMAKE_DIR, "-B", out, f"-DTORCH_SRC={tree}",
                    f"-DLMS_BUILD_CUDA={'ON' if cuda else 'OFF'}"],
                   check=True, capture_output=True)

    macros = (out / "generated" / "c10" / "macros" / "cmake_macros.h").read_text()
    assert "#define C10_BUILD_SHARED_LIBS\n" in macros
    for off in ("C10_USE_GLOG", "C10_USE_GFLAGS", "C10_USE_NUMA", "C10_USE_MSVC_STATIC_RUNTIME",
                "C10_USE_ROCM_KERNEL_ASSERT"):
        assert f"/* #undef {off} */" in macros
    if cuda:
        cuda_macros = out / "generated" / "c10" / "cuda" / "impl" / "cuda_cmake_macros.h"
        assert "#define C10_CUDA_BUILD_SHARED_LIBS\n" in cuda_macros.read_text()
    # Upstream's own c10 folder holds no generated header: the build dir's copy is the one used.
    assert not (tree / "c10" / "macros" / "cmake_macros.h").exists()


@pytest.mark.skipif(shutil.which("cmake") is None or shutil.which("ninja") is None,
                    reason="cmake and ninja are needed to build")
@pytest.mark.parametrize("standard, builds", [(14, False), (17, True)])
def test_c10_builds_with_the_trees_standard(tmp_path, standard, builds, debian_inputs):
    """A C++17 feature (here an inline variable, which gcc -std=c++14 only warns about) in c10
    fails the build of a C++14 tree (PyTorch 1.x) and builds in a C++17 one."""
    tree = tmp_path / "tree"
    (tree / "c10" / "macros").mkdir(parents=True)
    (tree / "c10" / "macros" / "cmake_macros.h.in").write_text(CMAKE_MACROS_IN)
    (tree / "c10" / "util").mkdir()
    (tree / "c10" / "util" / "Lms.cpp").write_text(
        "struct Lms { static inline int calls = 0; };\nint lms_calls() { return Lms::calls; }\n")
    (tree / "CMakeLists.txt").write_text(f"set(CMAKE_CXX_STANDARD {standard} CACHE STRING x)\n")
    out = tmp_path / "b"
    subprocess.run(["cmake", "-G", "Ninja", "-S", build.CMAKE_DIR, "-B", out, f"-DTORCH_SRC={tree}",
                    "-DLMS_BUILD_CUDA=OFF"], check=True, capture_output=True)
    built = subprocess.run(["ninja", "-C", out, "c10"], capture_output=True, text=True)
    assert (built.returncode == 0) == builds, built.stdout
    assert f"-std=c++{standard}" in built.stdout or builds


def test_nvml_header_of_the_toolkit_is_preferred(tmp_path, monkeypatch):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "nvml.h").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    assert inputs.nvml_include_dir(tmp_path / "cache") == tmp_path / "include"
    assert not (tmp_path / "cache").exists()


@pytest.mark.skipif(shutil.which("dpkg-query") is None, reason="not a Debian machine")
def test_missing_debian_packages_are_named():
    assert debian.missing_packages(("lmsforge-no-such-package",)) == \
        ["lmsforge-no-such-package"]


def _ctx(tmp_path: Path, tree: Path) -> LevelContext:
    return LevelContext("pytorch", "v2.6.0", tree, "0" * 40, tmp_path / "work", say=lambda _: None)


def test_core_cpu_fails_when_the_tree_has_no_lms_tests(tmp_path):
    tree = tmp_path / "tree"
    (tree / "c10" / "test" / "core").mkdir(parents=True)
    (tree / "c10" / "test" / "core" / "Device_test.cpp").write_text("")
    result = pytorch.run_level("core-cpu", _ctx(tmp_path, tree))
    assert result.status == FAIL
    assert result.detail.startswith("no LMS test sources (c10/test/core/LargeModelSupport*")


def test_core_gpu_is_skipped_without_a_device(tmp_path):
    have, why = have_cuda_device()
    if have:
        pytest.skip("a CUDA device is present")
    result = pytorch.run_level("core-gpu", _ctx(tmp_path, tmp_path))
    assert (result.status, result.detail) == (SKIPPED, why)


def test_full_is_skipped_and_names_a_missing_third_party(tmp_path):
    tree = tmp_path / "tree"
    (tree / "third_party" / "pybind11").mkdir(parents=True)
    result = pytorch.run_level("full", _ctx(tmp_path, tree))
    assert result.status == SKIPPED
    assert result.detail == ("needs a GPU build host: use the `full` recipe profile; "
                             "source archive lacks third_party/ for a full build")


def test_full_with_submodules_still_needs_a_build_host(tmp_path):
    tree = tmp_path / "tree"
    for path in pytorch.FULL_BUILD_SUBMODULES:
        (tree / path).mkdir(parents=True)
        (tree / path / "CMakeLists.txt").write_text("")
    result = pytorch.run_level("full", _ctx(tmp_path, tree))
    assert result.detail == "needs a GPU build host: use the `full` recipe profile"


def test_apply_is_not_a_pytorch_level(tmp_path):
    with pytest.raises(UsageError, match="no level runner for 'apply'"):
        pytorch.run_level("apply", _ctx(tmp_path, tmp_path))


def test_build_folder_from_another_lmsforge_copy_is_started_afresh(tmp_path):
    """cmake refuses a build folder configured from another source folder; ours is a cache."""
    from lmsforge.verify.pytorch_c10.build import CMAKE_DIR, _forget_foreign_configuration

    foreign = tmp_path / "foreign"
    foreign.mkdir()
    (foreign / "CMakeCache.txt").write_text("CMAKE_HOME_DIRECTORY:INTERNAL=/elsewhere/lmsforge\n")
    _forget_foreign_configuration(foreign)
    assert not foreign.exists()
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "CMakeCache.txt").write_text(f"CMAKE_HOME_DIRECTORY:INTERNAL={CMAKE_DIR}\n")
    _forget_foreign_configuration(ours)
    assert (ours / "CMakeCache.txt").is_file()


def test_the_simulated_driver_build_of_another_lmsforge_copy_is_started_afresh(tmp_path,
                                                                                monkeypatch):
    """TensorFlow's core-sim builds the simulator with cmake too: a cache folder configured by
    another checkout made the level fail with cmake's "does not match the source" error."""
    from lmsforge.errors import CheckFailed
    from lmsforge.verify.tensorflow_tf import core_sim

    build = tmp_path / "sim-build"
    build.mkdir()
    (build / "CMakeCache.txt").write_text("CMAKE_HOME_DIRECTORY:INTERNAL=/elsewhere/sim\n")
    seen = []

    def fake_run(cmd, **kwargs):
        seen.append((cmd[:3], (build / "CMakeCache.txt").exists()))
        return subprocess.CompletedProcess(cmd, 1, "", "stop here")

    monkeypatch.setattr(core_sim.subprocess, "run", fake_run)
    with pytest.raises(CheckFailed):
        core_sim.build_simulator(build, tmp_path, tmp_path, tmp_path / "log", 1)
    assert seen == [(["cmake", "-G", "Ninja"], False)]
