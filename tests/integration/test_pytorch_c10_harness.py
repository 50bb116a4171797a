"""The c10 harness and the PyTorch levels on a real PyTorch tree (slow: real CMake builds)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from lmsforge.errors import CheckFailed
from lmsforge.frameworks import pytorch
from lmsforge.verify.levels import FAIL, PASS, SKIPPED, LevelContext, have_cuda_device
from lmsforge.verify.pytorch_c10.gtest import run_gtest

REPO = Path(__file__).resolve().parents[2]


# Its tests build in the same folders one after another: one cache (conftest.shared_cache).
pytestmark = pytest.mark.usefixtures("shared_cache")


@pytest.fixture(scope="module")
def pytorch_tree(pytorch_v260_lms_tree: Path) -> Path:
    """A PyTorch work tree with the LMS series applied (the real v2.6.0 tree)."""
    return pytorch_v260_lms_tree


HARNESS_TEST = """\
#include <gtest/gtest.h>

#include <c10/core/CPUAllocator.h>

TEST(LmsHarness, AllocatesThroughLibc10) {
  auto data = c10::GetCPUAllocator()->allocate(64);
  EXPECT_NE(data.get(), nullptr);
}

TEST(LmsHarness, Skips) {
  GTEST_SKIP() << "skips are counted, not passed";
}
"""
FAILING_TEST = """
TEST(LmsHarness, Fails) {
  EXPECT_EQ(1, 2);
}
"""


@pytest.fixture(scope="module")
def c10_copy(pytorch_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Only the c10 folder of the tree, where these tests may add test files of their own."""
    tree = tmp_path_factory.mktemp("c10-copy")
    shutil.copytree(pytorch_tree / "c10", tree / "c10")
    for old in tree.glob("c10/**/LargeModelSupport*_test.cpp"):
        old.unlink()
    return tree


@pytest.fixture(scope="module")
def copy_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("copy-work")


@pytest.fixture(scope="module")
def tree_work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("tree-work")


def _ctx(tree: Path, work: Path) -> LevelContext:
    return LevelContext("pytorch", "test", tree, "0" * 40, work)


def _write_harness_test(tree: Path, *, failing: bool) -> None:
    path = tree / "c10" / "test" / "core" / "LargeModelSupportHarness_test.cpp"
    text = HARNESS_TEST + (FAILING_TEST if failing else "")
    if not path.is_file() or path.read_text() != text:
        path.write_text(text)


@pytest.mark.slow
def test_compile_builds_both_libraries_and_rebuilds_only_what_changed(c10_copy, copy_work):
    result = pytorch.run_level("compile", _ctx(c10_copy, copy_work))
    assert result.status == PASS, result.detail
    sources = [p for d in ("", "core/", "core/impl/", "mobile/", "macros/", "util/")
               for p in c10_copy.glob(f"c10/{d}*.cpp")] + \
        list(c10_copy.glob("c10/cuda/*.cpp")) + list(c10_copy.glob("c10/cuda/impl/*.cpp"))
    assert result.facts["tus"] == len(sources)
    build_dir = copy_work / pytorch.BUILD_SUBDIR
    assert (build_dir / "libc10.so").is_file() and (build_dir / "libc10_cuda.so").is_file()

    again = pytorch.run_level("compile", _ctx(c10_copy, copy_work))
    assert again.facts["tus_compiled"] == 0

    os.utime(c10_copy / "c10" / "util" / "Exception.cpp")
    touched = pytorch.run_level("compile", _ctx(c10_copy, copy_work))
    assert (touched.status, touched.facts["tus_compiled"]) == (PASS, 1)


@pytest.mark.slow
def test_core_cpu_counts_failures_then_passes(c10_copy, copy_work):
    _write_harness_test(c10_copy, failing=True)
    failed = pytorch.run_level("core-cpu", _ctx(c10_copy, copy_work))
    assert (failed.status, failed.detail) == (FAIL, "1 of 2 tests failed: LmsHarness.Fails")
    assert failed.facts["tests_skipped"] == 1

    _write_harness_test(c10_copy, failing=False)
    passed = pytorch.run_level("core-cpu", _ctx(c10_copy, copy_work))
    assert (passed.status, passed.detail) == (PASS, "1 tests passed, 1 skipped")
    assert passed.facts["tus_compiled"] == 1
    assert "[  PASSED  ] 1 test." in Path(passed.log).read_text()


@pytest.mark.slow
def test_command_line_builds_and_runs_the_tests(c10_copy, copy_work):
    _write_harness_test(c10_copy, failing=False)
    proc = subprocess.run(
        [sys.executable, "-m", "lmsforge.verify.pytorch_c10", "--tree", str(c10_copy),
         "--build-dir", str(copy_work / pytorch.BUILD_SUBDIR), "--tests", "core",
         "--", "--gtest_filter=LmsHarness.Allocates*"],
        cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "lms_core_tests: 1 passed, 0 failed, 0 skipped, 0 disabled" in proc.stdout


@pytest.mark.slow
def test_a_compile_error_fails_with_the_compiler_line(c10_copy, copy_work):
    broken = c10_copy / "c10" / "util" / "LmsHarnessBroken.cpp"
    broken.write_text("int lms_harness_broken() { return undeclared_name; }\n")
    try:
        result = pytorch.run_level("compile", _ctx(c10_copy, copy_work))
    finally:
        broken.unlink()
    assert result.status == FAIL
    assert "LmsHarnessBroken.cpp:1:" in result.detail
    assert "error: ‘undeclared_name’ was not declared in this scope" in result.detail
    assert result.detail.endswith(f"full log: {result.log}")


# The series tree's compile and core-cpu levels are checked on the session's one verify run of
# the bundled series (test_core_sim.py), not built a second time here.


@pytest.mark.slow
def test_the_series_cuda_tests(pytorch_tree, tree_work):
    result = pytorch.run_level("core-gpu", _ctx(pytorch_tree, tree_work))
    have_device, why = have_cuda_device()
    if not have_device:
        assert (result.status, result.detail) == (SKIPPED, why)
        return
    assert result.status == PASS, result.detail


@pytest.mark.slow
def test_full_is_never_run_here(pytorch_tree, tree_work):
    result = pytorch.run_level("full", _ctx(pytorch_tree, tree_work))
    assert result.status == SKIPPED
    assert result.detail.startswith("needs a GPU build host: use the `full` recipe profile")


CRASHING_PROGRAM = """\
#include <gtest/gtest.h>
#include <chrono>
#include <cstdlib>
#include <thread>

TEST(Harness, Passes) {}
TEST(Harness, Crashes) { std::abort(); }
TEST(Harness, Hangs) { std::this_thread::sleep_for(std::chrono::hours(1)); }
"""


@pytest.fixture(scope="module")
def crashing_gtest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("g++") is None or not Path("/usr/include/gtest/gtest.h").is_file():
        pytest.skip("g++ and libgtest-dev are needed")
    folder = tmp_path_factory.mktemp("gtest")
    (folder / "t.cpp").write_text(CRASHING_PROGRAM)
    subprocess.run(["g++", "-std=c++17", "t.cpp", "-o", "t", "-lgtest_main", "-lgtest",
                    "-pthread"], cwd=folder, check=True)
    return folder / "t"


def test_run_gtest_reports_a_crash_with_the_test_that_crashed(crashing_gtest, tmp_path):
    with pytest.raises(CheckFailed, match=r"t was killed by SIGABRT before writing its report "
                                          r"\(last test started: Harness.Crashes\)"):
        run_gtest(crashing_gtest, log=tmp_path / "t.log", extra_args=["--gtest_filter=*Crash*"])


def test_run_gtest_stops_a_hanging_program(crashing_gtest, tmp_path):
    with pytest.raises(CheckFailed, match="t did not finish within 1 s"):
        run_gtest(crashing_gtest, log=tmp_path / "t.log", extra_args=["--gtest_filter=*Hangs"],
                  timeout=1)


def test_run_gtest_reads_the_report(crashing_gtest, tmp_path):
    run = run_gtest(crashing_gtest, log=tmp_path / "t.log", extra_args=["--gtest_filter=*Passes"])
    assert (run.report.passed, run.report.failed, run.returncode) == (1, 0, 0)
    assert (tmp_path / "t.json").is_file()
