"""Conda package files: reading one whole, and what publishing or installing packages returns."""

from __future__ import annotations

import re
import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from lmsforge.errors import UsageError
from lmsforge.upstream.tree import sha256_of

PACKAGE_SUFFIXES = (".conda", ".tar.bz2")
# noarch, or <os>-<arch> as conda names platforms (linux-64, osx-arm64, emscripten-wasm32, zos-z):
# a package's subdir becomes a folder name in the channel, so nothing else may pass
SUBDIR = re.compile(r"noarch|[a-z][a-z0-9]*-[a-z0-9_]+")


@dataclass(frozen=True)
class PackageInfo:
    path: Path
    name: str
    version: str
    build: str
    subdir: str
    sha256: str

    @property
    def filename(self) -> str:
        return self.path.name


@dataclass(frozen=True)
class PublishResult:
    channel: str  # the folder, or the URL with credentials redacted
    added: tuple[str, ...]  # "<subdir>/<file>" newly in the channel
    unchanged: tuple[str, ...]  # already there with identical bytes
    seconds: float
    indexed: bool = True  # False: a server took the packages but does not list them yet
    warnings: tuple[str, ...] = ()  # about what the channel already held (a misplaced package)


@dataclass(frozen=True)
class InstallResult:
    prefix: Path
    channels: tuple[str, ...]  # redacted
    platform: str
    packages: tuple[str, ...]  # "name=version=build" of every installed record
    seconds: float


# --- packages -----------------------------------------------------------------------------------


def read_package(path: Path) -> PackageInfo:
    """Check a package file whole (every archive member's checksum) and read its index.json."""
    from rattler.package import IndexJson

    if not path.name.endswith(PACKAGE_SUFFIXES):
        raise UsageError(f"{path}: not a conda package (.conda or .tar.bz2); pass package files")
    if not path.is_file():
        raise UsageError(f"{path}: no such package file")
    try:
        if path.name.endswith(".conda"):
            with zipfile.ZipFile(path) as archive:
                bad = archive.testzip()
                names = archive.namelist()
            if bad is not None or not any(n.startswith("info-") for n in names):
                raise ValueError(bad or "no info- member")
        else:
            with tarfile.open(path, "r:bz2") as archive:
                for _member in archive:
                    pass
        index = IndexJson.from_package_archive(path)
    except PermissionError:
        raise UsageError(f"{path}: cannot read the package file (permission denied)") from None
    except Exception:
        raise UsageError(f"{path}: corrupt package file (its archive does not read back whole); "
                         "rebuild it") from None
    subdir = index.subdir or "noarch"
    if not SUBDIR.fullmatch(subdir):
        raise UsageError(f"{path}: its info/index.json names subdir {subdir!r}, which is not a "
                         "platform (noarch or <os>-<arch>, such as linux-64); the package is at "
                         "fault: rebuild it for a real platform")
    return PackageInfo(path=path.resolve(), name=index.name.normalized, version=str(index.version),
                       build=index.build, subdir=subdir, sha256=sha256_of(path))
