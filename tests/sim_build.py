"""One CMake build folder of lmsforge's simulator per test session, shared by the runtime front
end's tests (test_cuda_sim) and the driver front end's (test_cuda_sim_driver): the engine is
compiled once, and each module builds only its own target there.

It is configured with the tensorflow wheel's CUDA 11.8 `cuda.h` for the driver front end, as
the TF levels build it; the runtime front end builds against the CUDA 13 toolkit either way."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lmsforge.sim import SOURCE_DIR
from lmsforge.verify.pytorch_c10 import inputs as c10_inputs
from lmsforge.verify.tensorflow_tf import inputs as tf_inputs

_configured: dict[Path, Path] = {}


def wheel_cuda_include(wheel: Path) -> Path:
    return tf_inputs.include_dir(wheel) / "third_party" / "gpus" / "cuda" / "include"


def configured(root: Path, cache: Path) -> Path:
    """The session's build folder under ROOT, configured once."""
    if root in _configured:
        return _configured[root]
    if not shutil.which("cmake"):
        pytest.skip("needs cmake")
    # The CUDA headers the levels use: the host toolkit, else NVIDIA's wheels (named explicitly,
    # as the levels do: a root made from wheels has no nvcc for CMake to start from).
    cuda = c10_inputs.ensure_cuda_toolkit(cache)
    wheel = tf_inputs.unpacked_wheel(cache)
    build = root / "cuda-sim-build"
    generator = ["-G", "Ninja"] if shutil.which("ninja") else []
    subprocess.run(["cmake", *generator, "-S", str(SOURCE_DIR), "-B", str(build),
                    f"-DCUDAToolkit_ROOT={cuda}", f"-DCUDAToolkit_INCLUDE_DIR={cuda / 'include'}",
                    f"-DCUDA_cudart_LIBRARY={cuda / 'lib64' / 'libcudart.so'}",
                    f"-DLMS_SIM_DRIVER_CUDA_INCLUDE={wheel_cuda_include(wheel)}"],
                   check=True, capture_output=True)
    _configured[root] = build
    return build


def built(build: Path, target: str) -> Path:
    """BUILD with TARGET (and what it needs) built; returns BUILD."""
    subprocess.run(["cmake", "--build", str(build), "--parallel", "2", "--target", target],
                   check=True, capture_output=True)
    return build
