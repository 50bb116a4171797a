"""The simulator's driver API front end (lmsforge/sim/driver/, ``libcuda.so.1``): its own tests
(lmsforge/sim/tests/driver_test.cpp) plainly and under seeds, and a smoke program that runs the
tensorflow==2.14.1 wheel's StreamExecutor CUDA platform on it. The driver is built against the
wheel's CUDA 11.8 ``cuda.h``, taken from the wheel the TensorFlow levels use (the same cache
path as core-cpu). Slow: it compiles the simulator."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import sim_build

from lmsforge.sim import SOURCE_DIR
from lmsforge.verify.pytorch_c10.gtest import parse_gtest_json
from lmsforge.verify.tensorflow_tf import inputs as tf_inputs

pytestmark = pytest.mark.slow

DRIVER_TESTS = 16
WHEEL_CUDA_VERSION = 11080  # CUDA_VERSION in the wheel's third_party/gpus/cuda/include/cuda.h


@pytest.fixture(scope="module")
def wheel(real_cache_dir: Path) -> Path:
    return tf_inputs.unpacked_wheel(real_cache_dir)


wheel_cuda_include = sim_build.wheel_cuda_include


@pytest.fixture(scope="module")
def build(tmp_path_factory: pytest.TempPathFactory, real_cache_dir: Path, wheel: Path) -> Path:
    build = sim_build.configured(tmp_path_factory.getbasetemp(), real_cache_dir)
    return sim_build.built(build, "lms_cuda_sim_driver_tests")


def _run(build: Path, tmp_path: Path, **env: str):
    report = tmp_path / "report.json"
    proc = subprocess.run([str(build / "lms_cuda_sim_driver_tests"),
                           f"--gtest_output=json:{report}"], capture_output=True, text=True,
                          timeout=600, env={**os.environ, **env})
    return proc, parse_gtest_json(report.read_text())


def test_driver_without_a_seed(build: Path, tmp_path: Path) -> None:
    proc, report = _run(build, tmp_path, LMS_SIM_SEED="0", LMS_SIM_DEVICES="2")
    assert proc.returncode == 0 and report.failed == 0, proc.stdout + proc.stderr
    assert report.passed == DRIVER_TESTS and report.skipped == 0


@pytest.mark.parametrize("seed", ["1", "29"])
def test_driver_under_a_seed(build: Path, tmp_path: Path, seed: str) -> None:
    proc, report = _run(build, tmp_path, LMS_SIM_SEED=seed, LMS_SIM_DEVICES="3")
    assert proc.returncode == 0 and report.failed == 0, proc.stdout + proc.stderr
    assert report.passed == DRIVER_TESTS


def test_driver_implements_the_wheels_cuda_h_over_the_shared_engine(build: Path) -> None:
    driver = build / "libcuda.so.1"
    # In a child process: loaded into pytest's own, the simulator's libcuda.so.1 answers every
    # later dlopen("libcuda.so.1") of the session, and a CUDA torch's lazy initialisation in
    # another test (autograd's backward asks for the device count) then ran on the simulator and
    # aborted the whole run.
    probe = subprocess.run(
        [sys.executable, "-c",
         "import ctypes, sys; version = ctypes.c_int(0); "
         "status = ctypes.CDLL(sys.argv[1]).cuDriverGetVersion(ctypes.byref(version)); "
         "print(status, version.value)", str(driver)],
        capture_output=True, text=True, check=True)
    status, version = map(int, probe.stdout.split())
    assert status == 0
    assert version == WHEEL_CUDA_VERSION
    # One simulator: the driver holds no engine of its own, it needs the runtime library's.
    dynamic = subprocess.run(["readelf", "-d", "-W", str(driver)], capture_output=True,
                             text=True, check=True).stdout
    assert "Shared library: [liblms_cuda_sim.so]" in dynamic
    assert "Library soname: [libcuda.so.1]" in dynamic
    symbols = subprocess.run(["nm", "-D", "-C", "--defined-only", str(driver)],
                             capture_output=True, text=True, check=True).stdout
    assert "lms_sim::" not in symbols
    assert " T cuLaunchHostFunc" in symbols and " T cuModuleLoad" in symbols


# Both front ends loaded into one process: what one does, the other sees.
ONE_ENGINE = """
import ctypes, sys
build = sys.argv[1]
runtime = ctypes.CDLL(build + "/liblms_cuda_sim.so")
driver = ctypes.CDLL(build + "/libcuda.so.1")
assert driver.cuInit(0) == 0
context = ctypes.c_void_p()
assert driver.cuDevicePrimaryCtxRetain(ctypes.byref(context), 1) == 0
assert driver.cuCtxSetCurrent(context) == 0
device = ctypes.c_int(-1)
assert runtime.cudaGetDevice(ctypes.byref(device)) == 0 and device.value == 1, device.value
free_before, free_after, total = ctypes.c_size_t(), ctypes.c_size_t(), ctypes.c_size_t()
assert runtime.cudaMemGetInfo(ctypes.byref(free_before), ctypes.byref(total)) == 0
pointer = ctypes.c_uint64()
assert driver.cuMemAlloc_v2(ctypes.byref(pointer), 1 << 20) == 0
assert runtime.cudaMemGetInfo(ctypes.byref(free_after), ctypes.byref(total)) == 0
assert free_before.value - free_after.value == 2 << 20, (free_before.value, free_after.value)
stream = ctypes.c_void_p()
assert runtime.cudaStreamCreate(ctypes.byref(stream)) == 0
assert driver.cuMemsetD8Async(pointer, 7, 1 << 20, stream) == 0
assert driver.cuStreamSynchronize(stream) == 0
back = (ctypes.c_uint8 * 16)()
assert runtime.cudaMemcpy(back, ctypes.c_void_p(pointer.value), 16, 2) == 0  # device to host
assert list(back) == [7] * 16, list(back)
other = ctypes.c_void_p()
assert driver.cuStreamCreate(ctypes.byref(other), 0) == 0
assert runtime.cudaStreamQuery(other) == 0  # a driver stream is a runtime stream
assert runtime.cudaStreamDestroy(stream) == 0
assert driver.cuStreamDestroy_v2(other) == 0
print("one engine")
"""


def test_both_front_ends_share_one_engine(build: Path, tmp_path: Path) -> None:
    script = tmp_path / "one_engine.py"
    script.write_text(ONE_ENGINE)
    proc = subprocess.run([sys.executable, str(script), str(build)], capture_output=True,
                          text=True, timeout=120, env={**os.environ, "LMS_SIM_SEED": "5"})
    assert proc.returncode == 0 and "one engine" in proc.stdout, proc.stdout + proc.stderr


@pytest.fixture(scope="module")
def smoke(build: Path, wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not shutil.which("g++"):
        pytest.skip("needs g++")
    include = tf_inputs.include_dir(wheel)
    library = tf_inputs.library_dir(wheel)
    program = tmp_path_factory.mktemp("tf-smoke") / "tf_wheel_smoke"
    # The wheel's build settings: the C++11 ABI, Eigen's alignment, a CUDA build.
    subprocess.run(["g++", "-std=c++17", "-O1", "-D_GLIBCXX_USE_CXX11_ABI=1",
                    "-DEIGEN_MAX_ALIGN_BYTES=64", "-DGOOGLE_CUDA=1", f"-I{include}",
                    f"-I{include / 'external' / 'farmhash_archive' / 'src'}",
                    f"-I{wheel_cuda_include(wheel)}",
                    str(SOURCE_DIR / "tests" / "tf_wheel_smoke.cc"), "-o", str(program),
                    f"-L{library}", f"-l:{tf_inputs.FRAMEWORK_LIBRARY}",
                    f"-Wl,-rpath,{library}"], check=True, capture_output=True)
    return program


@pytest.mark.parametrize("seed", ["3", "17"])
def test_tensorflow_stream_executor_runs_on_the_driver(build: Path, smoke: Path,
                                                       seed: str) -> None:
    proc = subprocess.run([str(smoke)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "LD_LIBRARY_PATH": str(build),
                               "LMS_SIM_SEED": seed, "LMS_SIM_DEVICES": "2"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "visible devices: 2" in proc.stdout
    for device in (0, 1):
        assert f"device {device}: streams ok=1/1 sync=OK callbacks=1 wrong_words=0 " \
               f"wrong_in_callback=0 of 1048576 -> OK" in proc.stdout
    assert "SMOKE OK" in proc.stdout


def test_the_two_cuda_versions_meet_only_at_the_neutral_bridge() -> None:
    """driver/ sees the cuda.h it implements and runtime/bridge.h, nothing of the runtime's
    CUDA 13 side; bridge.h and the engine include no CUDA header, so no translation unit sees
    both versions and the engine serves either."""
    neutral = [SOURCE_DIR / "runtime" / "bridge.h", *sorted((SOURCE_DIR / "engine").iterdir())]
    for source in neutral:
        includes = [line for line in source.read_text().splitlines()
                    if line.startswith("#include")]
        assert all("cuda" not in line for line in includes), (source, includes)
    for source in sorted((SOURCE_DIR / "runtime11").iterdir()):  # the CUDA 11.8 runtime shim
        includes = [line for line in source.read_text().splitlines()
                    if line.startswith("#include")]
        assert includes == ['#include "bridge.h"', "#include <cuda_runtime_api.h>"], includes
    for source in sorted((SOURCE_DIR / "driver").iterdir()):
        for line in source.read_text().splitlines():
            if line.startswith("#include \""):
                assert line in ('#include "bridge.h"', '#include "driver.h"'), (source, line)
            elif line.startswith("#include <"):
                assert "cuda_runtime" not in line and "driver_types" not in line, (source, line)
