"""What builds the ``core`` profile for each target platform on this host, and what that needs.

* linux-64 builds natively: the host's C++ compiler and the Debian build inputs the c10 harness
  declares; a CUDA variant uses the host CUDA toolkit (``CUDA_HOME``, else ``/usr/local/cuda``).
* linux-ppc64le is cross-compiled from linux-64 with Debian's cross compiler
  (``g++-powerpc64le-linux-gnu``) against a private sysroot of Debian's ppc64el build inputs
  (``sysroot.py``), through a CMake toolchain file. CPU variant only: this host has no ppc64le
  CUDA toolkit (NVIDIA's ppc64le redistributables stop at 12.4 and are not reachable here).

Every input is declared once, in ``DECLARED``: ``prepare`` installs the missing host Debian
packages (as root, with one line naming them; otherwise it says what to install) and fetches the
sysroot before anything is built, and ``lmsforge doctor`` prints the same declarations.
"""

from __future__ import annotations

import contextlib
import json
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from lmsforge.errors import LmsforgeError, UsageError
from lmsforge.packaging import runtime_needs, sysroot
from lmsforge.upstream import debian
from lmsforge.verify.pytorch_c10 import inputs as c10_inputs

HOST_PLATFORM = "linux-64"


@dataclass(frozen=True)
class PlatformInputs:
    """The declared build inputs of the core profile for one target platform."""

    platform: str
    debian_packages: tuple[str, ...]  # host (amd64) packages, installed with apt
    compiler: str  # the C++ compiler command
    cross_triplet: str | None = None  # GNU triplet of a cross build
    cmake_processor: str | None = None  # CMAKE_SYSTEM_PROCESSOR of a cross build
    target_arch: str | None = None  # Debian architecture of the sysroot
    sysroot_packages: tuple[str, ...] = ()  # target packages unpacked into the sysroot


# linux-64 builds the same c10 as the verify levels: their Debian packages, named once in
# verify/pytorch_c10/inputs.py (lmsforge/verify/inputs.py declares the levels' other inputs).
DECLARED = {
    "linux-64": PlatformInputs("linux-64", c10_inputs.DEBIAN_PACKAGES, "c++"),
    "linux-ppc64le": PlatformInputs(
        "linux-ppc64le", ("g++-powerpc64le-linux-gnu",), "powerpc64le-linux-gnu-g++",
        cross_triplet="powerpc64le-linux-gnu", cmake_processor="ppc64le", target_arch="ppc64el",
        # apt-get download resolves no dependencies: libcpuinfo-dev's library is libcpuinfo0.
        sysroot_packages=(*c10_inputs.DEBIAN_PACKAGES, "libcpuinfo0")),
}


@dataclass(frozen=True)
class CudaToolkit:
    home: Path
    version: tuple[int, ...]

    @property
    def short(self) -> str:
        return ".".join(map(str, self.version[:2]))

    def matches(self, variant: str) -> bool:
        return self.version[:2] == tuple(int(x) for x in variant.split("."))[:2]


@dataclass(frozen=True)
class Toolchain:
    platform: str
    compiler: str  # first line of the compiler's --version
    cross_from: str | None
    sysroot: sysroot.Sysroot | None
    cmake_toolchain_file: Path | None
    glibc: str = ""  # of the C library the compiler links against: the packages' floor
    licenses: dict[str, Path] = field(default_factory=dict)  # of what the packages carry

    def metadata(self) -> dict[str, str]:
        """What package metadata records about how it was built."""
        record = {"platform": self.platform,
                  "toolchain": self.compiler + (f" (cross from {self.cross_from})"
                                                if self.cross_from else " (native)")}
        if self.glibc:
            record["glibc"] = self.glibc
        if self.sysroot:
            record["sysroot"] = f"Debian {' '.join(self.sysroot.suites)} {self.sysroot.arch}: " \
                                f"{self.sysroot.describe()}"
        return record


def check_host(platform: str) -> None:
    """Refuse, before anything happens, a platform this host cannot build the core profile for."""
    import rattler

    host = str(rattler.Platform.current())
    if platform not in DECLARED:
        raise UsageError(f"unknown platform {platform}; choose one of: {', '.join(DECLARED)}")
    if host != HOST_PLATFORM:
        raise UsageError(f"lmsforge builds core packages on a {HOST_PLATFORM} host (natively, "
                         f"or cross to linux-ppc64le); this host is {host}")


def prepare(platform: str, cache_root: Path, work_dir: Path) -> Toolchain:
    """Install or fetch every declared input of PLATFORM, then describe the toolchain."""
    declared = DECLARED[platform]
    debian.ensure_packages(declared.debian_packages, f"core builds for {platform}")
    compiler = _version_line(declared.compiler)
    if compiler is None:
        raise LmsforgeError(f"{declared.compiler} not found although its Debian package is "
                            f"installed; check PATH or install {declared.debian_packages[0]}")
    if declared.cross_triplet is None:
        return Toolchain(platform, compiler, None, None, None,
                         runtime_needs.glibc_of(declared.compiler),
                         runtime_needs.debian_licenses(None))
    assert declared.target_arch and declared.cmake_processor
    root = sysroot.ensure(cache_root, declared.target_arch, declared.sysroot_packages,
                          f"core builds for {platform}")
    work_dir.mkdir(parents=True, exist_ok=True)
    toolchain_file = work_dir / f"{platform}.toolchain.cmake"
    toolchain_file.write_text(cmake_toolchain(declared, root.path))
    return Toolchain(platform, compiler, HOST_PLATFORM, root, toolchain_file,
                     runtime_needs.glibc_of(declared.compiler),
                     runtime_needs.debian_licenses(root.path))


def glibc_for(platform: str) -> str | None:
    """The glibc floor a core build for PLATFORM declares, when its compiler is installed here
    (``render`` shows the packages ``build`` makes: the floor is part of their names' hash)."""
    declared = DECLARED.get(platform)
    if declared is None or shutil.which(declared.compiler) is None:
        return None
    try:
        return runtime_needs.glibc_of(declared.compiler)
    except LmsforgeError:
        return None


def cmake_toolchain(declared: PlatformInputs, root: Path) -> str:
    """A CMake toolchain file: the cross compiler, and libraries found only in the sysroot or
    the cross compiler's own tree (never the host's x86-64 ones)."""
    triplet = declared.cross_triplet
    return "\n".join([
        f"# Written by lmsforge: cross build for {declared.platform} from {HOST_PLATFORM}.",
        "set(CMAKE_SYSTEM_NAME Linux)",
        f"set(CMAKE_SYSTEM_PROCESSOR {declared.cmake_processor})",
        f"set(CMAKE_C_COMPILER {triplet}-gcc)",
        f"set(CMAKE_CXX_COMPILER {triplet}-g++)",
        f"set(CMAKE_LIBRARY_ARCHITECTURE {triplet})",
        f'set(CMAKE_FIND_ROOT_PATH "{root}" "/usr/{triplet}")',
        "set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)",
        "set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)",
        "",
    ])


def _version_line(command: str) -> str | None:
    if shutil.which(command) is None:
        return None
    proc = subprocess.run([command, "--version"], capture_output=True, text=True)
    lines = proc.stdout.strip().splitlines()
    return lines[0] if proc.returncode == 0 and lines else None


# --- CUDA ---------------------------------------------------------------------------------------


def host_cuda(platform: str) -> CudaToolkit | None:
    """The CUDA toolkit core CUDA variants for PLATFORM build with here, or None."""
    if platform != HOST_PLATFORM:
        return None  # no ppc64le CUDA toolkit on this host (module docstring)
    home = c10_inputs.cuda_home()
    if not (home / "include" / "cuda_runtime_api.h").is_file():
        return None
    version = cuda_version_at(home)
    return CudaToolkit(home, version) if version else None


def cuda_version_at(home: Path) -> tuple[int, ...] | None:
    """The version of the CUDA toolkit at HOME (version.json, else nvcc --version), or None."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        text = json.loads((home / "version.json").read_text())["cuda"]["version"]
        return tuple(int(x) for x in re.findall(r"\d+", text))
    nvcc = home / "bin" / "nvcc"
    if nvcc.is_file():
        proc = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True)
        match = re.search(r"release (\d+)\.(\d+)", proc.stdout)
        if match:
            return (int(match.group(1)), int(match.group(2)))
    return None
