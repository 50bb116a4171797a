"""The build inputs of the c10 build that are not in the PyTorch tree (``environment.md``).

Debian packages are checked with dpkg and installed with apt-get only when running as root;
``nvml.h`` comes from the PyPI wheel ``nvidia-nvml-dev``, unpacked into the lmsforge cache rather
than installed, because nothing else on the machine should start depending on it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from lmsforge.cache import Cache
from lmsforge import debian
from lmsforge.errors import LmsforgeError

DEBIAN_PACKAGES = ("libfmt-dev", "libcpuinfo-dev", "libgtest-dev")
NVML_WHEEL = "nvidia-nvml-dev"
NVML_VERSION = "13.5.37"
DEFAULT_CUDA_HOME = Path("/usr/local/cuda")


def cuda_home() -> Path:
    return Path(os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH") or DEFAULT_CUDA_HOME)


def ensure_debian_packages(packages: tuple[str, ...] = DEBIAN_PACKAGES) -> None:
    debian.ensure_packages(packages, "the c10 build needs Debian packages")


def ensure_cuda_toolkit() -> Path:
    home = cuda_home()
    if not (home / "include" / "cuda_runtime_api.h").is_file():
        raise LmsforgeError(f"no CUDA toolkit at {home}: install one or set CUDA_HOME")
    return home


def nvml_include_dir(cache_root: Path) -> Path:
    """A folder with ``nvml.h``: the CUDA toolkit's own if it has one, else the wheel's."""
    toolkit_include = cuda_home() / "include"
    if (toolkit_include / "nvml.h").is_file():
        return toolkit_include
    target = cache_root / "build-inputs" / f"{NVML_WHEEL}-{NVML_VERSION}"
    found = _find_header(target)
    if found:
        return found
    cache = Cache(cache_root)
    with cache.lock(f"{NVML_WHEEL}-{NVML_VERSION}"):
        found = _find_header(target)
        if found:
            return found
        cache.partial.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=cache.partial) as tmp:
            wheel = _download_wheel(Path(tmp))
            unpacked = Path(tmp) / "unpacked"
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


def _download_wheel(into: Path) -> Path:
    spec = f"{NVML_WHEEL}=={NVML_VERSION}"
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps",
                           "--only-binary", ":all:", spec, "-d", str(into)],
                          capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        raise LmsforgeError(f"`pip download {spec}` failed ({_last_line(proc.stderr)}); "
                            "check the package index or put nvml.h in CUDA_HOME/include")
    return wheels[0]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
