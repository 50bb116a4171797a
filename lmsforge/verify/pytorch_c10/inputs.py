"""The build inputs of the c10 build that are not in the PyTorch tree (``environment.md``).

Debian packages are checked with dpkg and installed with apt-get only when running as root;
``nvml.h`` comes from the PyPI wheel ``nvidia-nvml-dev``, unpacked into the lmsforge cache rather
than installed, because nothing else on the machine should start depending on it. On a host
without a CUDA toolkit, the CUDA headers and ``libcudart`` come the same way from NVIDIA's
``nvidia-cuda-runtime`` and ``nvidia-cuda-crt`` wheels (c10_cuda is plain C++ against the runtime
API: it needs no nvcc). The level declarations that name these are in ``lmsforge/verify/inputs.py``.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from lmsforge.cache import Cache
from lmsforge.upstream import debian
from lmsforge.errors import LmsforgeError

DEBIAN_PACKAGES = ("libfmt-dev", "libcpuinfo-dev", "libgtest-dev")
NVML_WHEEL = "nvidia-nvml-dev"
NVML_VERSION = "13.5.37"
DEFAULT_CUDA_HOME = Path("/usr/local/cuda")
# CUDA 13.0, the toolkit this project's hosts have: runtime API headers + libcudart, crt/, and
# CCCL (nv/target, cuda/std), which cuda_fp16.h includes.
CUDA_WHEELS = (("nvidia-cuda-runtime", "13.0.96"), ("nvidia-cuda-crt", "13.0.88"),
               ("nvidia-cuda-cccl", "13.0.85"))
# Named after its wheels, so a changed list makes a new folder instead of reusing an old one.
CUDA_WHEEL_ROOT = ("cuda-13.0-from-wheels-"
                   + hashlib.sha256(repr(CUDA_WHEELS).encode()).hexdigest()[:8])
CUDA_WHEEL_PREFIX = "nvidia/cu13/"
CUDART = "libcudart.so.13"


def cuda_home() -> Path:
    return Path(os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or DEFAULT_CUDA_HOME)


def ensure_debian_packages(packages: tuple[str, ...] = DEBIAN_PACKAGES) -> None:
    debian.ensure_packages(packages, "the c10 build needs Debian packages")


def toolkit_present() -> bool:
    return (cuda_home() / "include" / "cuda_runtime_api.h").is_file()


def cached_cuda_root(cache_root: Path) -> Path | None:
    """Where CUDA headers and libcudart are now: the host toolkit, else the wheels' copy."""
    if toolkit_present():
        return cuda_home()
    root = cache_root / "build-inputs" / CUDA_WHEEL_ROOT
    return root if (root / "lib64" / "libcudart.so").exists() else None


def ensure_cuda_toolkit(cache_root: Path | None = None) -> Path:
    """A CUDA root (``include/``, ``lib64/libcudart.so``): the host toolkit, else from wheels."""
    from lmsforge.cache import default_cache_dir

    cache_root = cache_root or default_cache_dir()
    found = cached_cuda_root(cache_root)
    if found is not None:
        return found
    from lmsforge import ui

    specs = ", ".join(f"{name}=={version}" for name, version in CUDA_WHEELS)
    ui.say(f"no CUDA toolkit at {cuda_home()}: taking CUDA headers and libcudart from PyPI "
           f"({specs}) into {cache_root / 'build-inputs'}")
    target = cache_root / "build-inputs" / CUDA_WHEEL_ROOT
    cache = Cache(cache_root)
    with cache.lock(CUDA_WHEEL_ROOT), cache.scratch("cuda-wheels") as tmp:
        if (target / "lib64" / "libcudart.so").exists():
            return target
        root = tmp / "root"
        for name, version in CUDA_WHEELS:
            wheel = _download_wheel(tmp / name, f"{name}=={version}")
            with zipfile.ZipFile(wheel) as archive:
                for member in archive.namelist():
                    if member.startswith(CUDA_WHEEL_PREFIX + "include/") or \
                            member == f"{CUDA_WHEEL_PREFIX}lib/{CUDART}":
                        archive.extract(member, tmp / "unpacked")
        unpacked = tmp / "unpacked" / CUDA_WHEEL_PREFIX
        root.mkdir()
        (unpacked / "include").rename(root / "include")
        (root / "lib64").mkdir()
        (unpacked / "lib" / CUDART).rename(root / "lib64" / CUDART)
        (root / "lib64" / "libcudart.so").symlink_to(CUDART)
        if not (root / "include" / "cuda_runtime_api.h").is_file():
            raise LmsforgeError(f"the wheels {specs} hold no cuda_runtime_api.h; install a CUDA "
                                "toolkit or set CUDA_HOME")
        target.parent.mkdir(parents=True, exist_ok=True)
        root.rename(target)
    return target


def cached_nvml_include_dir(cache_root: Path) -> Path | None:
    """The folder with ``nvml.h`` if it is here already: the toolkit's own, else the wheel's."""
    toolkit_include = cuda_home() / "include"
    if (toolkit_include / "nvml.h").is_file():
        return toolkit_include
    return _find_header(cache_root / "build-inputs" / f"{NVML_WHEEL}-{NVML_VERSION}")


def nvml_include_dir(cache_root: Path) -> Path:
    """A folder with ``nvml.h``: the CUDA toolkit's own if it has one, else the wheel's."""
    found = cached_nvml_include_dir(cache_root)
    if found:
        return found
    target = cache_root / "build-inputs" / f"{NVML_WHEEL}-{NVML_VERSION}"
    cache = Cache(cache_root)
    with cache.lock(f"{NVML_WHEEL}-{NVML_VERSION}"):
        found = _find_header(target)
        if found:
            return found
        with cache.scratch("nvml") as tmp:
            wheel = _download_wheel(tmp, f"{NVML_WHEEL}=={NVML_VERSION}")
            unpacked = tmp / "unpacked"
            with zipfile.ZipFile(wheel) as archive:
                headers = [name for name in archive.namelist()
                           if name.startswith("nvidia/") and name.endswith(".h")]
                archive.extractall(unpacked, headers)
            if not _find_header(unpacked):
                raise LmsforgeError(f"{wheel.name} holds no nvml.h; "
                                    f"pass a folder with nvml.h in CUDA_HOME/include instead")
            target.parent.mkdir(parents=True, exist_ok=True)
            unpacked.rename(target)
    found = _find_header(target)
    assert found is not None
    return found


def _find_header(root: Path) -> Path | None:
    headers = sorted(root.glob("nvidia/*/include/nvml.h")) if root.is_dir() else []
    return headers[0].parent if headers else None


def _download_wheel(into: Path, spec: str) -> Path:
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                           "--only-binary", ":all:", spec, "-d", str(into)],
                          capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        raise LmsforgeError(f"`pip download {spec}` failed ({_last_line(proc.stderr)}); "
                            "check that the package index is reachable")
    return wheels[0]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
