"""Library headers for syntax-compiling PyTorch translation units, from PyPI wheels.

Only headers are taken from each wheel: it is downloaded with ``pip download --no-deps`` and its
header files are unpacked into ``<cache>/build-inputs/<name>-<version>/``, never installed.
Python's own headers come from the running interpreter (Debian ``python3-dev``).
"""

from __future__ import annotations

import re
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from typing import NamedTuple

from lmsforge.cache import Cache
from lmsforge.errors import LmsforgeError

HEADER_SUFFIXES = (".h", ".hpp", ".hxx", ".cuh", ".inl", ".inc")


class HeaderWheel(NamedTuple):
    name: str
    version: str
    include: str  # the folder inside the wheel that goes on the include path


# Pinned so that a result can be cached and reproduced. cuDNN 9 for CUDA 13; the other CUDA
# libraries dropped the -cu13 suffix with CUDA 13 (the -cu13 names are empty placeholders).
WHEELS = (
    HeaderWheel("pybind11", "2.13.6", "pybind11/include"),
    HeaderWheel("nvidia-cudnn-cu13", "9.27.0.42", "nvidia/cudnn/include"),
    HeaderWheel("nvidia-cudnn-frontend", "1.32.0", "include"),
    HeaderWheel("nvidia-cublas", "13.10.0.20", "nvidia/cu13/include"),
    HeaderWheel("nvidia-cusparse", "12.9.4.2", "nvidia/cu13/include"),
    HeaderWheel("nvidia-cusolver", "12.4.1.2", "nvidia/cu13/include"),
    HeaderWheel("nvidia-curand", "10.4.4.72", "nvidia/cu13/include"),
    # nvrtc.h, which cudnn_frontend includes; this CUDA toolkit has none.
    HeaderWheel("nvidia-cuda-nvrtc", "13.5.37", "nvidia/cu13/include"),
)


# cuDNN 9 removed the v6/v7 RNN API (cudnnSetRNNDescriptor_v6, ...) that PyTorch calls unless
# built against cuDNN 9; a tree that knows cuDNN 9 says so in aten/src/ATen/cudnn/Descriptors.h
# (`CUDNN_VERSION >= 90000`, 2.6.0 does), one that does not (1.13.1) gets cuDNN 8's headers, as
# its own build would.
CUDNN_8 = HeaderWheel("nvidia-cudnn-cu12", "8.9.7.29", "nvidia/cudnn/include")
_KNOWS_CUDNN_9 = re.compile(r"CUDNN_VERSION\s*>=\s*9\d{4}\b")


def wheels_for(tree: Path) -> tuple[HeaderWheel, ...]:
    """WHEELS, with cuDNN 8 instead of 9 for a tree that predates cuDNN 9."""
    descriptors = tree / "aten/src/ATen/cudnn/Descriptors.h"
    if descriptors.is_file() and \
            not _KNOWS_CUDNN_9.search(descriptors.read_text(errors="replace")):
        return tuple(CUDNN_8 if w.name.startswith("nvidia-cudnn-cu") else w for w in WHEELS)
    return WHEELS


def python_include_dir() -> Path:
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        raise LmsforgeError(f"Python.h not found in {include}: install python3-dev")
    return include


def header_dirs(cache_root: Path, wheels: tuple[HeaderWheel, ...] = WHEELS) -> list[Path]:
    """The include folders of WHEELS, downloading and unpacking each once into the cache."""
    return [wheel_headers(cache_root, wheel) for wheel in wheels]


def cached_headers(cache_root: Path, wheel: HeaderWheel) -> Path | None:
    include = cache_root / "build-inputs" / f"{wheel.name}-{wheel.version}" / wheel.include
    return include if include.is_dir() else None


def wheel_headers(cache_root: Path, wheel: HeaderWheel) -> Path:
    target = cache_root / "build-inputs" / f"{wheel.name}-{wheel.version}"
    include = target / wheel.include
    if include.is_dir():
        return include
    cache = Cache(cache_root)
    with cache.lock(f"{wheel.name}-{wheel.version}"):
        if include.is_dir():
            return include
        with cache.scratch(f"wheel-{wheel.name}") as tmp:
            downloaded = _download(wheel, tmp)
            unpacked = tmp / "unpacked"
            with zipfile.ZipFile(downloaded) as archive:
                headers = [name for name in archive.namelist()
                           if name.startswith(wheel.include + "/")
                           and name.endswith(HEADER_SUFFIXES)]
                if not headers:
                    raise LmsforgeError(f"{downloaded.name} has no headers under {wheel.include}/")
                archive.extractall(unpacked, headers)
            target.parent.mkdir(parents=True, exist_ok=True)
            unpacked.rename(target)
    return include


def _download(wheel: HeaderWheel, into: Path) -> Path:
    spec = f"{wheel.name}=={wheel.version}"
    proc = subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary",
                           ":all:", spec, "-d", str(into)], capture_output=True, text=True)
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        lines = [line for line in proc.stderr.strip().splitlines() if line.strip()]
        raise LmsforgeError(f"`pip download {spec}` failed ({lines[-1] if lines else 'no output'});"
                            " check the package index")
    return wheels[0]
