"""What a core package needs from the machine it is installed on, and the licence texts of what it
carries that is not PyTorch's.

A conda client installs a package wherever its declared needs are met. So the C library the
binaries were linked against is declared (``__glibc >=`` the toolchain's glibc, as conda-forge
declares its sysroot's), and every shared library a binary loads must be in the package or be
one the system always has (``SYSTEM_LIBRARIES``; the driver's ``libcuda`` is covered by
``__cuda``). The audit after each build checks both against the binaries themselves
(``elf_needs``), so a new dependency of the series cannot slip into a package undeclared.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lmsforge.errors import LmsforgeError

# Libraries every Linux system with a glibc and a C++ runtime has, plus the driver's, which
# only a host with the NVIDIA driver has (the CUDA variants require ``__cuda``).
SYSTEM_LIBRARIES = re.compile(
    r"^(libc|libm|libdl|librt|libpthread|libutil|libresolv|ld64|ld-linux[-\w.]*|libstdc\+\+|"
    r"libgcc_s|libcuda|libnvidia-ml)\.so(\.\d+)*$")

# The Debian packages whose code a core package carries, by what it carries of each: the
# library itself (libcpuinfo, copied in), code compiled in (fmt, header-only), code linked into
# the test programs (googletest).
BUNDLED_DEBIAN_PACKAGES = {"cpuinfo": "libcpuinfo0", "fmt": "libfmt-dev",
                           "googletest": "libgtest-dev"}


def glibc_of(compiler: str) -> str:
    """The version (``2.36``) of the C library COMPILER links against: the host's for the native
    compiler, the cross sysroot's for a cross compiler."""
    found = subprocess.run([compiler, "-print-file-name=libc.so.6"], capture_output=True,
                           text=True)
    path = Path(found.stdout.strip())
    try:
        data = path.read_bytes() if found.returncode == 0 and path.is_absolute() else b""
    except OSError:
        data = b""
    match = re.search(rb"release version (\d+\.\d+)", data)
    if not match:
        raise LmsforgeError(f"cannot tell which glibc {compiler} links against (no version in "
                            f"{path}); the package could not declare it. Check the compiler")
    return match.group(1).decode()


def debian_licenses(sysroot: Path | None) -> dict[str, Path]:
    """The Debian copyright file of each bundled package, name -> path: from the cross sysroot
    when there is one (its packages are what a cross build carries), else the host's."""
    found = {}
    for name, package in BUNDLED_DEBIAN_PACKAGES.items():
        candidates = [root / "usr" / "share" / "doc" / package / "copyright"
                      for root in ([sysroot] if sysroot else []) + [Path("/")]]
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            raise LmsforgeError(f"no licence text for {name} (Debian package {package}: "
                                f"{candidates[0]} is missing); reinstall {package}")
        found[name] = path
    return found


def cuda_runtime_license(home: Path) -> Path:
    """The licence of the CUDA runtime in the toolkit at HOME (NVIDIA's EULA, which lets
    applications redistribute libcudart)."""
    candidates = [home / "EULA.txt", home / "doc" / "EULA.txt",
                  *sorted(home.glob("dist-info/nvidia_cuda_runtime-*/licenses/*"))]
    path = next((c for c in candidates if c.is_file()), None)
    if path is None:
        raise LmsforgeError(f"no licence text for the CUDA runtime in {home} (EULA.txt); a "
                            "CUDA package carries libcudart and must carry its licence")
    return path


@dataclass(frozen=True)
class ElfNeeds:
    libraries: tuple[str, ...]  # DT_NEEDED sonames
    glibc: str | None  # the highest GLIBC_x.y symbol version referenced, if any


def elf_needs(data: bytes) -> ElfNeeds:
    """The shared libraries and the glibc version the ELF file DATA needs (binutils' readelf,
    which reads every architecture's files)."""
    with tempfile.NamedTemporaryFile() as handle:
        handle.write(data)
        handle.flush()
        shown = subprocess.run(["readelf", "--dynamic", "--version-info", "--wide",
                                handle.name], capture_output=True, text=True)
    if shown.returncode != 0:
        raise LmsforgeError(f"readelf could not read a packaged binary: {shown.stderr.strip()}")
    libraries = tuple(re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", shown.stdout))
    versions = {tuple(int(x) for x in v.split(".")) for v in
                re.findall(r"\bGLIBC_(\d+\.\d+(?:\.\d+)?)\b", shown.stdout)}
    glibc = ".".join(map(str, max(versions))) if versions else None
    return ElfNeeds(libraries, glibc)


def version_key(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))
