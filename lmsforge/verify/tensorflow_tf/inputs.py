"""The TensorFlow levels' build inputs from outside the TensorFlow tree (``environment.md``).

Headers, absl, Eigen, protobuf and ``libtensorflow_framework.so.2`` come from the official
``tensorflow==2.14.1`` wheel, downloaded once into ``<cache>/wheels`` and unpacked there (only
``tensorflow/include`` and the framework library), never installed. protoc, googletest and
googlemock come from Debian and are installed with apt-get only when running as root.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from lmsforge.cache import Cache
from lmsforge.upstream import debian
from lmsforge.errors import LmsforgeError

TF_VERSION = "2.14.1"
# Any CPython wheel of the release carries the same headers and framework library.
WHEEL_GLOB = f"tensorflow-{TF_VERSION}-cp3*-manylinux*x86_64.whl"
WHEEL_PYTHON = "3.11"
WHEEL_PLATFORM = "manylinux_2_17_x86_64"
FRAMEWORK_LIBRARY = "libtensorflow_framework.so.2"
UNPACK_MARKER = ".unpacked"

PROTOC_PACKAGES = ("protobuf-compiler",)
GTEST_PACKAGES = ("libgtest-dev", "libgmock-dev")


def wheels_dir(cache_root: Path) -> Path:
    return cache_root / "wheels"


def tensorflow_wheel(cache_root: Path) -> Path:
    """The tensorflow==2.14.1 wheel in the cache, downloaded with pip if it is not there yet."""
    folder = wheels_dir(cache_root)
    found = sorted(folder.glob(WHEEL_GLOB))
    if found:
        return found[0]
    folder.mkdir(parents=True, exist_ok=True)
    with Cache(cache_root).lock(f"wheel-tensorflow-{TF_VERSION}"):
        found = sorted(folder.glob(WHEEL_GLOB))
        if found:
            return found[0]
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--python-version", WHEEL_PYTHON, "--platform", WHEEL_PLATFORM,
               "-d", str(folder), f"tensorflow=={TF_VERSION}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(folder.glob(WHEEL_GLOB))
        if proc.returncode != 0 or not found:
            raise LmsforgeError(f"could not download tensorflow=={TF_VERSION} "
                                f"({_last_line(proc.stderr)}); check that PyPI is reachable "
                                f"or put the wheel into {folder}")
        return found[0]


def unpacked_wheel(cache_root: Path) -> Path:
    """A folder with the wheel's ``tensorflow/include`` and framework library, unpacked once."""
    target = wheels_dir(cache_root) / f"tensorflow-{TF_VERSION}"
    if (target / UNPACK_MARKER).is_file():
        return target
    wheel = tensorflow_wheel(cache_root)
    cache = Cache(cache_root)
    with cache.lock(f"unpack-tensorflow-{TF_VERSION}"), cache.scratch("unpack-tf") as work:
        if (target / UNPACK_MARKER).is_file():
            return target
        partial = work / "unpacked"
        with zipfile.ZipFile(wheel) as archive:
            wanted = [name for name in archive.namelist()
                      if name.startswith("tensorflow/include/")
                      or name == f"tensorflow/{FRAMEWORK_LIBRARY}"]
            archive.extractall(partial, members=wanted)
        (partial / UNPACK_MARKER).write_text(wheel.name + "\n")
        shutil.rmtree(target, ignore_errors=True)
        partial.rename(target)
    return target


NUMPY_VERSION = "1.26.4"  # the NumPy 1.x API TensorFlow 2.14 was built against


def numpy_include(cache_root: Path) -> Path:
    """NumPy's C headers (for tfe_wrapper.cc), from a pinned wheel: the same on every host,
    whatever NumPy (if any) the running Python has."""
    target = wheels_dir(cache_root) / f"numpy-{NUMPY_VERSION}"
    include = target / "numpy" / "core" / "include"
    if (target / UNPACK_MARKER).is_file():
        return include
    folder = wheels_dir(cache_root)
    folder.mkdir(parents=True, exist_ok=True)
    with Cache(cache_root).lock(f"wheel-numpy-{NUMPY_VERSION}"):
        if (target / UNPACK_MARKER).is_file():
            return include
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
               "--python-version", WHEEL_PYTHON, "--platform", WHEEL_PLATFORM,
               "-d", str(folder), f"numpy=={NUMPY_VERSION}"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        found = sorted(folder.glob(f"numpy-{NUMPY_VERSION}-*.whl"))
        if proc.returncode != 0 or not found:
            raise LmsforgeError(f"could not download numpy=={NUMPY_VERSION} "
                                f"({_last_line(proc.stderr)}); check that PyPI is reachable")
        with Cache(cache_root).scratch("unpack-numpy") as work:
            partial = work / "unpacked"
            with zipfile.ZipFile(found[0]) as archive:
                archive.extractall(partial, [n for n in archive.namelist()
                                             if n.startswith("numpy/core/include/")])
            (partial / UNPACK_MARKER).write_text(found[0].name + "\n")
            shutil.rmtree(target, ignore_errors=True)
            partial.rename(target)
    return include


# The CUDA 11 runtime the wheel's StreamExecutor dlopens (libcudart.so.11.0), as
# tensorflow[and-cuda]==2.14.1 pins it. NVIDIA's licence (the wheel's License.txt, Attachment A)
# lets libcudart.so be redistributed unmodified with an application; it travels in the GPU bundle
# for nodes with a driver but no CUDA 11 runtime.
CUDA_RUNTIME_WHEEL = "nvidia-cuda-runtime-cu11"
CUDA_RUNTIME_VERSION = "11.8.89"
CUDA_RUNTIME_PLATFORM = "manylinux1_x86_64"
CUDA_RUNTIME_LIBRARY = "libcudart.so.11.0"
CUDA_RUNTIME_LICENSE = "License.txt"


def cuda_runtime(cache_root: Path) -> Path:
    """A folder with ``libcudart.so.11.0`` and NVIDIA's ``License.txt`` from the pinned wheel,
    downloaded and unpacked once."""
    target = wheels_dir(cache_root) / f"{CUDA_RUNTIME_WHEEL}-{CUDA_RUNTIME_VERSION}"
    if (target / UNPACK_MARKER).is_file():
        return target
    folder = wheels_dir(cache_root)
    folder.mkdir(parents=True, exist_ok=True)
    pattern = f"{CUDA_RUNTIME_WHEEL.replace('-', '_')}-{CUDA_RUNTIME_VERSION}-*.whl"
    with Cache(cache_root).lock(f"wheel-{CUDA_RUNTIME_WHEEL}-{CUDA_RUNTIME_VERSION}"):
        if (target / UNPACK_MARKER).is_file():
            return target
        if not sorted(folder.glob(pattern)):
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
                   "--python-version", WHEEL_PYTHON, "--platform", CUDA_RUNTIME_PLATFORM,
                   "-d", str(folder), f"{CUDA_RUNTIME_WHEEL}=={CUDA_RUNTIME_VERSION}"]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0 or not sorted(folder.glob(pattern)):
                raise LmsforgeError(f"could not download {CUDA_RUNTIME_WHEEL}=="
                                    f"{CUDA_RUNTIME_VERSION} ({_last_line(proc.stderr)}); check "
                                    f"that PyPI is reachable or put the wheel into {folder}")
        wheel = sorted(folder.glob(pattern))[0]
        with Cache(cache_root).scratch("unpack-cudart") as work:
            partial = work / "unpacked"
            partial.mkdir()
            with zipfile.ZipFile(wheel) as archive:
                for name in archive.namelist():
                    if name.endswith(("/" + CUDA_RUNTIME_LIBRARY, "/" + CUDA_RUNTIME_LICENSE)):
                        (partial / Path(name).name).write_bytes(archive.read(name))
            missing = [name for name in (CUDA_RUNTIME_LIBRARY, CUDA_RUNTIME_LICENSE)
                       if not (partial / name).is_file()]
            if missing:
                raise LmsforgeError(f"{wheel.name} has no {missing[0]}; delete it from "
                                    f"{folder} and run again")
            (partial / UNPACK_MARKER).write_text(wheel.name + "\n")
            shutil.rmtree(target, ignore_errors=True)
            partial.rename(target)
    return target


def include_dir(unpacked: Path) -> Path:
    return unpacked / "tensorflow" / "include"


def library_dir(unpacked: Path) -> Path:
    return unpacked / "tensorflow"


def cached_wheel_dir(cache_root: Path) -> Path | None:
    target = wheels_dir(cache_root) / f"tensorflow-{TF_VERSION}"
    return target if (target / UNPACK_MARKER).is_file() else None


def cached_numpy_dir(cache_root: Path) -> Path | None:
    target = wheels_dir(cache_root) / f"numpy-{NUMPY_VERSION}"
    return target if (target / UNPACK_MARKER).is_file() else None


def ensure_protoc() -> Path:
    debian.ensure_packages(PROTOC_PACKAGES, "regenerating config.pb.* needs protoc")
    protoc = shutil.which("protoc")
    if protoc is None:
        raise LmsforgeError("protoc not found: run `apt-get install protobuf-compiler`")
    return Path(protoc)


def ensure_gtest() -> None:
    debian.ensure_packages(GTEST_PACKAGES, "the LMS allocator test needs googletest and "
                                           "googlemock")


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "no output"
