"""The TensorFlow GPU bundle of the real v2.14.1 series (slow): `lmsforge bundle` writes it from
the session's one core-sim verify (conftest.bundled_verification) without building again, and
its run-gpu.sh builds gpu_lms_test from the extracted tarball alone (no lmsforge checkout or
cache, no network, an empty HOME). Without a GPU, run-gpu.sh must say so and exit 4; and since
this machine has lmsforge's simulated CUDA driver, the program built from the bundle must then
pass on it, as the core-sim level's own build does. That is not a GPU result.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import tarfile
import time
from pathlib import Path

import pytest

from fixtures import lmsforge
from lmsforge.series import manifest as series_mod
from lmsforge.verify import bundle
from lmsforge.verify.levels import PASS, have_cuda_device
from lmsforge.verify.tensorflow_tf import core_sim, header_closure, inputs as tf_inputs
from test_tensorflow_core_sim import GPU_TESTS

REPO = Path(__file__).resolve().parents[2]
SERIES = REPO / "patches" / "tensorflow" / "v2.14.1"
NAME = "lms-gpu-tensorflow-v2.14.1"
SIM_SEED = 1
CLEAN_PATH = "/usr/local/bin:/usr/bin:/bin"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def verify_dir(bundled_verification, real_cache_dir: Path) -> Path:
    sim = bundled_verification("tensorflow", "v2.14.1").levels["core-sim"]
    assert sim["status"] == PASS, sim["detail"]
    return real_cache_dir / "builds" / "tensorflow" / "v2.14.1" / "verify"


@pytest.fixture(scope="module")
def tarball(verify_dir: Path, real_cache_dir: Path,
            tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, float]:
    dest = tmp_path_factory.mktemp("tf-bundle") / f"{NAME}.tar.gz"
    started = time.monotonic()
    result = lmsforge("--cache-dir", str(real_cache_dir), "bundle", "--framework", "tensorflow",
                      "--tag", "v2.14.1", "--tarball", "--into", str(dest))
    assert result.exit_code == 0, result.output
    return dest, time.monotonic() - started


@pytest.fixture(scope="module")
def extracted(tarball: tuple[Path, float], tmp_path_factory: pytest.TempPathFactory) -> Path:
    # Another folder than the one it was made in: nothing may point back there.
    where = tmp_path_factory.mktemp("gpu-host")
    with tarfile.open(tarball[0]) as archive:
        archive.extractall(where)
    return where / NAME


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_bundle_of_the_real_series(tarball: tuple[Path, float], extracted: Path,
                                   real_cache_dir: Path) -> None:
    path, seconds = tarball
    print(f"lmsforge bundle took {seconds:.0f} s")
    assert seconds < 120, f"the bundle took {seconds:.0f} s: it must reuse the core-sim build"
    unpacked = sum(p.stat().st_size for p in extracted.rglob("*") if p.is_file())
    assert path.stat().st_size < bundle.MAX_BUNDLE_BYTES and unpacked < bundle.MAX_BUNDLE_BYTES
    manifest = json.loads((extracted / "MANIFEST.json").read_text())
    series = series_mod.load(SERIES)
    assert manifest["framework"] == "tensorflow" and manifest["tag"] == "v2.14.1"
    assert manifest["series_hash"] == series.content_hash()
    assert manifest["patches"] == [p.name for p in series.paths()]
    # The wheel's identity: the library the TensorFlow levels use, and the shipped copy.
    wheel_library = (tf_inputs.library_dir(tf_inputs.unpacked_wheel(real_cache_dir))
                     / tf_inputs.FRAMEWORK_LIBRARY)
    identity = manifest["tensorflow"]
    assert identity["version"] == "2.14.1" and identity["wheel"].startswith("tensorflow-2.14.1-")
    assert identity["framework_sha256"] == _sha256(wheel_library)
    shipped = extracted / "wheel" / "tensorflow" / tf_inputs.FRAMEWORK_LIBRARY
    assert identity["shipped"]["sha256"] == _sha256(shipped)
    runtime = extracted / "wheel" / "nvidia" / "cuda_runtime"
    assert manifest["cuda_runtime"]["sha256"] == _sha256(runtime / "lib" / "libcudart.so.11.0")
    assert "Attachment A" in (runtime / "License.txt").read_text()
    assert (extracted / "wheel" / "tensorflow" / "LICENSE").is_file()
    # Only the headers the program includes: a few hundred of the wheel's thousands.
    wheel_headers = [p for p in (extracted / "src" / "wheel").rglob("*") if p.is_file()]
    assert 100 < len(wheel_headers) == manifest["program"]["files_by_root"]["wheel"] < 2000
    assert (extracted / "src" / "tree" / core_sim.GPU_DIR / "gpu_lms_test.cc").is_file()


@pytest.fixture(scope="module")
def offline_run(extracted: Path, tmp_path_factory: pytest.TempPathFactory
                ) -> tuple[subprocess.CompletedProcess[str], Path, float]:
    results = tmp_path_factory.mktemp("results")
    env = {"PATH": CLEAN_PATH, "HOME": str(tmp_path_factory.mktemp("empty-home")),
           "LANG": "C.UTF-8"}
    started = time.monotonic()
    proc = subprocess.run(["bash", str(extracted / "run-gpu.sh"), str(results), "--jobs", "2"],
                          capture_output=True, text=True, env=env, timeout=1200)
    return proc, results, time.monotonic() - started


def test_bundle_builds_offline_and_reports_the_device(
        offline_run: tuple[subprocess.CompletedProcess[str], Path, float],
        extracted: Path) -> None:
    proc, results, seconds = offline_run
    output = proc.stdout + proc.stderr
    print(f"run-gpu.sh built and ran in {seconds:.0f} s")
    assert "run-gpu: built gpu_lms_test" in output, \
        output + (results / "build.log").read_text()[-3000:]
    summary = json.loads((results / "summary.json").read_text())
    if have_cuda_device()[0]:
        assert proc.returncode == 0, output
        assert summary["status"] == "passed"
    else:
        assert proc.returncode == 4, output
        assert "run-gpu: skipped: no CUDA device" in proc.stdout
        assert summary["status"] == "skipped" and summary["exit_code"] == 4
        assert summary["reason"].startswith("no CUDA device")
        assert not (results / "gpu_lms_test.json").exists()


def test_the_build_reads_only_the_bundle_and_the_compilers_own_headers(
        offline_run: tuple[subprocess.CompletedProcess[str], Path, float],
        extracted: Path) -> None:
    deps = subprocess.run(["ninja", "-C", str(extracted / "build"), "-t", "deps"],
                          capture_output=True, text=True)
    if deps.returncode != 0:
        pytest.skip("the build did not use ninja")
    used = {Path(p).resolve() for p in re.findall(r"^\s+(\S+)$", deps.stdout, re.MULTILINE)}
    system = header_closure.compiler_search_dirs("g++")
    foreign = [str(p) for p in used if not p.is_relative_to(extracted.resolve())
               and not any(p.is_relative_to(d) for d in system)]
    assert not foreign, foreign[:10]
    host_gtest = [str(p) for p in used if "gtest" in p.parts and
                  not p.is_relative_to(extracted.resolve())]
    assert not host_gtest, host_gtest[:5]


def _sim_env(sim_dir: Path) -> dict[str, str]:
    return core_sim.env_for(SIM_SEED, sim_dir)


def test_the_bundle_built_program_passes_on_the_simulated_driver(
        offline_run: tuple[subprocess.CompletedProcess[str], Path, float], extracted: Path,
        verify_dir: Path, tmp_path: Path) -> None:
    binary = extracted / "build" / "bin" / core_sim.PROGRAM
    ldd = subprocess.run(["ldd", str(binary)], capture_output=True, text=True, check=True)
    assert str(extracted / "wheel" / "tensorflow" / tf_inputs.FRAMEWORK_LIBRARY) in ldd.stdout
    run = core_sim.run_seed(binary, SIM_SEED, verify_dir / "core-sim" / "sim", tmp_path)
    assert not run.problem, run.problem
    assert run.report is not None and run.report.passed == GPU_TESTS


def test_run_gpu_passes_on_the_simulated_driver(
        offline_run: tuple[subprocess.CompletedProcess[str], Path, float], extracted: Path,
        verify_dir: Path, tmp_path: Path) -> None:
    """run-gpu.sh's path past the device probe (the driver's answers, the test, the report),
    with the simulator's libcuda.so.1 and libcudart.so.11.0 first on LD_LIBRARY_PATH."""
    results = tmp_path / "results"
    env = {"PATH": CLEAN_PATH, "HOME": str(tmp_path), **_sim_env(verify_dir / "core-sim" / "sim")}
    proc = subprocess.run(["bash", str(extracted / "run-gpu.sh"), str(results), "--jobs", "2"],
                          capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"gpu_lms_test: {GPU_TESTS} passed, 0 failed, 0 skipped" in proc.stdout
    assert "(simulated)" in (results / "device.txt").read_text()
    summary = json.loads((results / "summary.json").read_text())
    assert summary["status"] == "passed" and summary["test_reports"] == ["gpu_lms_test.json"]


def test_the_framework_loads_the_bundled_cuda_runtime(
        offline_run: tuple[subprocess.CompletedProcess[str], Path, float], extracted: Path,
        verify_dir: Path, tmp_path: Path) -> None:
    """With only a driver on the library path, as on a node without CUDA 11, TensorFlow finds
    libcudart.so.11.0 in the bundle through its RUNPATH (NVIDIA's runtime then asks the driver
    for what the simulator does not offer, so the run itself ends there)."""
    driver_only = tmp_path / "driver"
    driver_only.mkdir()
    (driver_only / "libcuda.so.1").symlink_to(verify_dir / "core-sim" / "sim" / "libcuda.so.1")
    env = {**_sim_env(driver_only), "LD_DEBUG": "libs"}
    proc = subprocess.run([str(extracted / "build" / "bin" / core_sim.PROGRAM)],
                          capture_output=True, text=True, env=env, timeout=300)
    loaded = re.findall(r"calling init: (\S*libcudart\.so\.11\.0)", proc.stdout + proc.stderr)
    assert loaded, (proc.stdout + proc.stderr)[-2000:]
    assert Path(loaded[0]).resolve() == \
        (extracted / "wheel" / "nvidia" / "cuda_runtime" / "lib" / "libcudart.so.11.0").resolve()
