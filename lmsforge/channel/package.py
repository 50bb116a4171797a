"""Conda package files: reading one whole, and what publishing or installing packages returns."""

from __future__ import annotations

import tarfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from lmsforge.errors import UsageError
from lmsforge.upstream.tree import sha256_of

PACKAGE_SUFFIXES = (".conda", ".tar.bz2")


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
    return PackageInfo(path=path.resolve(), name=index.name.normalized, version=str(index.version),
                       build=index.build, subdir=index.subdir or "noarch", sha256=sha256_of(path))
