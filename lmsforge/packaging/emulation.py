"""Run programs built for another platform on this host with qemu-user.

``qemu-ppc64le -L <root>`` runs a linux-ppc64le program: qemu translates its instructions and
looks up the program's ELF interpreter (``/lib64/ld64.so.2``) and the libraries the loader opens
under ``<root>`` first. Debian's cross runtime (``libc6-ppc64el-cross``,
``libstdc++6-ppc64el-cross``, installed with the cross compiler) lays out exactly such a root at
``/usr/powerpc64le-linux-gnu``. The program's own libraries come from the conda prefix through
the RPATH rattler-build wrote. No binfmt_misc registration is used: that would change the machine
for every process on it.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from lmsforge.packaging import toolchain


@dataclass(frozen=True)
class Target:
    """What emulating one platform needs."""

    qemu: tuple[str, ...]  # qemu-user binaries that can run it, first found wins
    root: Path  # the target's loader, libc and libstdc++
    loader: str  # the ELF interpreter, relative to ROOT
    debian_packages: tuple[str, ...]  # where qemu and ROOT come from on Debian


TARGETS = {
    "linux-ppc64le": Target(("qemu-ppc64le", "qemu-ppc64le-static"),
                            Path("/usr/powerpc64le-linux-gnu"), "lib64/ld64.so.2",
                            ("qemu-user", "libc6-ppc64el-cross", "libstdc++6-ppc64el-cross")),
}


@dataclass(frozen=True)
class Emulator:
    platform: str
    qemu: Path
    root: Path

    def launcher(self) -> tuple[str, ...]:
        """The command words that go before a program of PLATFORM to run it here."""
        return (str(self.qemu), "-L", str(self.root))


def needed(platform: str) -> bool:
    """Whether programs of PLATFORM need emulation on this host."""
    return platform != toolchain.HOST_PLATFORM


def find(platform: str) -> Emulator | None:
    """The emulator for PLATFORM on this host, or None (``missing`` says why)."""
    target = TARGETS.get(platform)
    if target is None or not (target.root / target.loader).exists():
        return None
    for name in target.qemu:
        found = shutil.which(name)
        if found:
            return Emulator(platform, Path(found), target.root)
    return None


def missing(platform: str) -> str:
    """One line: what this host lacks to run PLATFORM's programs, and how to get it."""
    target = TARGETS.get(platform)
    if target is None:
        return f"lmsforge cannot emulate {platform}"
    lacking = []
    if not any(shutil.which(name) for name in target.qemu):
        lacking.append(f"no {target.qemu[0]} on PATH")
    if not (target.root / target.loader).exists():
        lacking.append(f"no {platform} runtime at {target.root}")
    return (f"{' and '.join(lacking) or 'nothing missing'} (Debian: apt-get install "
            f"{' '.join(target.debian_packages)})")
