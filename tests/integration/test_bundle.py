"""The GPU bundle of the real PyTorch v2.6.0 series (slow): written from the patched tree, then
built offline from the extracted tarball alone: c10, c10_cuda, lms_core_tests, lms_cuda_tests and
the benchmark programs. Running them needs a GPU; without one run-gpu.sh must say so and exit 4.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from lmsforge.series import manifest as series_mod
from lmsforge.verify import bundle
from lmsforge.verify.levels import have_cuda_device

REPO = Path(__file__).resolve().parents[2]
SERIES = REPO / "patches" / "pytorch" / "v2.6.0"
PROGRAMS = ("lms_core_tests", "lms_cuda_tests", "lms_bench_copy", "lms_bench_oversub",
            "lms_device_probe")

pytestmark = pytest.mark.slow


def _have_toolchain() -> bool:
    cuda = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    return all(shutil.which(tool) for tool in ("cmake", "g++")) and (cuda / "bin/nvcc").is_file()


@pytest.fixture(scope="module")
def tarball(pytorch_v260_lms_tree: Path, tmp_path_factory: pytest.TempPathFactory,
            real_cache_dir: Path) -> bundle.BundleResult:
    dest = tmp_path_factory.mktemp("bundle") / "lms-gpu-pytorch-v2.6.0.tar.gz"
    return bundle.write_bundle(pytorch_v260_lms_tree, dest, tarball=True,
                               build_inputs=bundle.find_build_inputs(real_cache_dir))


@pytest.fixture(scope="module")
def extracted(tarball: bundle.BundleResult, tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Another folder than the one it was made in: nothing may point back there.
    where = tmp_path_factory.mktemp("gpu-host")
    with tarfile.open(tarball.path) as archive:
        archive.extractall(where)
    return where / "lms-gpu-pytorch-v2.6.0"


def test_bundle_of_the_real_series(tarball: bundle.BundleResult, extracted: Path) -> None:
    assert tarball.path.stat().st_size < bundle.MAX_BUNDLE_BYTES
    assert tarball.size_bytes < bundle.MAX_BUNDLE_BYTES
    manifest = json.loads((extracted / "MANIFEST.json").read_text())
    assert manifest["framework"] == "pytorch" and manifest["tag"] == "v2.6.0"
    assert manifest["series_hash"] == series_mod.load(SERIES).content_hash()
    assert manifest["patches"] == [path.name for path in series_mod.load(SERIES).paths()]
    upstream = manifest["tree"]["upstream"]
    assert upstream["upstream_commit"] == "2236df1770800ffea5697b11b0bb0d910b2e59e1"
    assert upstream["sha256"] or upstream["kind"] == "git"
    assert manifest["inputs"]["nvml"].startswith("nvidia-nvml-dev")
    for rel in ("tree/c10/cuda/CUDALargeModelSupport.cpp", "tree/c10/core/LargeModelSupport.h",
                "tree/c10/cuda/test/LargeModelSupport_test.cpp",
                "tree/c10/test/core/LargeModelSupport_test.cpp",
                "deps/googletest/googletest/src/gtest-all.cc", "deps/nvml/include/nvml.h",
                "deps/fmt/include/fmt/format.h", "deps/cpuinfo/include/cpuinfo.h"):
        assert (extracted / rel).is_file(), rel
    assert list((extracted / "deps" / "cpuinfo" / "lib").glob("libcpuinfo.so*"))


@pytest.fixture(scope="module")
def offline_run(extracted: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> tuple[subprocess.CompletedProcess[str], Path]:
    if not _have_toolchain():
        pytest.skip("needs cmake, g++ and a CUDA toolkit (nvcc) to build the bundle")
    results = tmp_path_factory.mktemp("results")
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("LMSFORGE_", "CMAKE_", "CPATH", "LIBRARY_PATH"))}
    env["LMSFORGE_CACHE_DIR"] = str(tmp_path_factory.mktemp("empty-cache"))
    proc = subprocess.run(["bash", str(extracted / "run-gpu.sh"), str(results), "--jobs", "2",
                           "--quick"], capture_output=True, text=True, env=env, timeout=1800)
    return proc, results


def test_bundle_builds_offline(offline_run: tuple[subprocess.CompletedProcess[str], Path],
                               extracted: Path) -> None:
    proc, results = offline_run
    output = proc.stdout + proc.stderr
    build_log = (results / "build.log").read_text()
    assert "built c10, c10_cuda, lms_core_tests, lms_cuda_tests and the benchmarks" in output, \
        output + build_log[-3000:]
    for program in PROGRAMS:
        assert (extracted / "build" / "bin" / program).is_file(), program
    # The tree's C++ standard comes from its root CMakeLists.txt, which travels for that: without
    # it a 1.x tree was built as C++17 and failed on a newer host compiler.
    assert "C++ standard of the tree: 17 (read from its CMakeLists.txt)" in build_log, build_log[:3000]
    # The bundle's inputs, not the host's, went into the build.
    deps = subprocess.run(["ninja", "-C", str(extracted / "build"), "-t", "deps"],
                          capture_output=True, text=True)
    if deps.returncode == 0:  # ninja generator
        used = set(re.findall(r"^\s+(\S+)$", deps.stdout, re.MULTILINE))
        host_inputs = [path for path in used
                       if re.match(r"/usr/(local/)?include/(fmt/|gtest/|cpuinfo\.h|nvml\.h)", path)]
        assert not host_inputs, host_inputs
        assert any(path.startswith(str(extracted / "deps")) for path in used)


def test_run_reports_the_device_situation(
        offline_run: tuple[subprocess.CompletedProcess[str], Path]) -> None:
    proc, results = offline_run
    summary = json.loads((results / "summary.json").read_text())
    have_device, _ = have_cuda_device()
    if have_device:
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert summary["status"] == "passed"
        for name in ("copy-engine", "oversubscription"):
            assert (results / f"{name}.png").read_bytes().startswith(b"\x89PNG")
    else:
        assert proc.returncode == 4, proc.stdout + proc.stderr
        assert "run-gpu: skipped: no CUDA device" in proc.stdout
        assert summary["status"] == "skipped" and summary["exit_code"] == 4
        assert summary["reason"].startswith("no CUDA device")
        assert "no CUDA device" in (results / "device.txt").read_text()
        assert not (results / "lms_cuda_tests.json").exists()


def test_cuda_tests_list_the_issue_cases(offline_run: tuple[subprocess.CompletedProcess[str], Path],
                                         extracted: Path) -> None:
    listed = subprocess.run([str(extracted / "build" / "bin" / "lms_cuda_tests"),
                             "--gtest_list_tests"], capture_output=True, text=True, check=True)
    assert "ReclaimsUnderTheLimitAndKeepsData" in listed.stdout
    assert "HostLimitGivesOutOfMemoryError" in listed.stdout


@pytest.mark.parametrize("program, args, code, message", [
    ("lms_bench_copy", [], 2, "--out is required"),
    ("lms_bench_copy", ["--out", "x.json", "--sizes", "2K"], 2, "outside 4 KiB..1 GiB"),
    ("lms_bench_copy", ["--out", "x.json", "--repeats", "0"], 2, "--repeats: 0 is outside"),
    ("lms_bench_copy", ["--out", "x.json", "--sizes", "16Q"], 2, "not a size"),
    ("lms_bench_copy", ["--out", "x.json", "--nonsense"], 2, "unknown option --nonsense"),
    ("lms_bench_oversub", ["--out", "x.json", "--factors", "1,65"], 2, "65 is outside 1..64"),
    ("lms_bench_oversub", ["--out", "x.json", "--limit", "1M"], 2, "at least 64M"),
    ("lms_bench_oversub", ["--out", "x.json", "--steps"], 2, "--steps needs a value"),
    ("lms_bench_oversub", ["--help"], 0, "usage: lms_bench_oversub"),
    ("lms_bench_copy", ["--help"], 0, "--short"),
    ("lms_bench_oversub", ["--out", "x.json", "--short", "--limit", "1M"], 2, "at least 64M"),
])
def test_program_argument_checks(offline_run: tuple[subprocess.CompletedProcess[str], Path],
                                 extracted: Path, tmp_path: Path, program: str, args: list[str],
                                 code: int, message: str) -> None:
    proc = subprocess.run([str(extracted / "build" / "bin" / program), *args], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == code, proc.stdout + proc.stderr
    assert message in proc.stdout + proc.stderr
    assert not (tmp_path / "x.json").exists()


@pytest.mark.parametrize("program", ["lms_bench_copy", "lms_bench_oversub"])
def test_programs_without_a_device(offline_run: tuple[subprocess.CompletedProcess[str], Path],
                                   extracted: Path, tmp_path: Path, program: str) -> None:
    if have_cuda_device()[0]:
        pytest.skip("a CUDA device is present")
    proc = subprocess.run([str(extracted / "build" / "bin" / program), "--out",
                           str(tmp_path / "r.json")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 4
    assert "no CUDA device" in proc.stderr and "nothing was measured" in proc.stderr
    assert not (tmp_path / "r.json").exists()
