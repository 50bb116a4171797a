"""A private sysroot of Debian packages built for another architecture (cross-compilation inputs).

Cross builds need the *target's* headers and libraries (ppc64el fmt, cpuinfo, googletest). Debian
has them as multiarch packages, but installing ``:ppc64el`` packages would mean
``dpkg --add-architecture`` — a change to the machine every other build on it sees. Instead apt is
pointed at private state (sources, lists, caches, an empty dpkg status) in the lmsforge cache,
downloads the packages there (``apt-get download``, no dependency resolution, so the list names
runtime libraries too) and ``dpkg-deb -x`` unpacks them into a folder that only our builds read.
The sources are the machine's own Debian mirror, keyring and release, so the libraries match the
Debian cross compiler. The sysroot appears under its final name by an atomic rename, with a
manifest of the exact package versions, which builds record in package metadata.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from lmsforge import ui
from lmsforge.cache import Cache
from lmsforge.errors import LmsforgeError, UsageError
from lmsforge.upstream import debian

MANIFEST = "lmsforge-sysroot.json"


@dataclass(frozen=True)
class Sysroot:
    path: Path
    arch: str  # Debian architecture, e.g. ppc64el
    suites: tuple[str, ...]
    packages: Mapping[str, str]  # package -> exact Debian version unpacked

    def describe(self) -> str:
        return ", ".join(f"{name} {version}" for name, version in sorted(self.packages.items()))


def host_release() -> str:
    """The machine's Debian release codename (the cross compiler's release)."""
    try:
        text = Path("/etc/os-release").read_text()
    except OSError:
        text = ""
    for line in text.splitlines():
        if line.startswith("VERSION_CODENAME="):
            codename = line.split("=", 1)[1].strip().strip('"')
            if codename:
                return codename
    raise UsageError("cannot tell this machine's Debian release (/etc/os-release has no "
                     "VERSION_CODENAME); cross builds need a Debian host")


def sysroot_dir(cache_root: Path, arch: str, packages: Sequence[str], release: str) -> Path:
    key = hashlib.sha256(" ".join([release, *sorted(packages)]).encode()).hexdigest()[:12]
    return cache_root / "build-inputs" / f"sysroot-{arch}-{release}-{key}"


def cached(cache_root: Path, arch: str, packages: Sequence[str]) -> Sysroot | None:
    """The sysroot for ARCH and PACKAGES if an earlier run made it, else None."""
    path = sysroot_dir(cache_root, arch, packages, host_release())
    return _load(path)


def ensure(cache_root: Path, arch: str, packages: Sequence[str], why: str) -> Sysroot:
    """The sysroot holding PACKAGES for ARCH, downloading and unpacking it on first use."""
    release = host_release()
    path = sysroot_dir(cache_root, arch, packages, release)
    found = _load(path)
    if found:
        return found
    for tool in ("apt-get", "dpkg-deb"):
        if shutil.which(tool) is None:
            raise UsageError(f"{tool} not found: {why} needs Debian's {arch} packages "
                             f"({' '.join(packages)}); build on a Debian host")
    cache = Cache(cache_root)
    with cache.lock(path.name):
        found = _load(path)
        if found:
            return found
        ui.say(f"downloading Debian {arch} packages for {why} into {path} (private; the "
               f"machine's apt and dpkg are not changed): {' '.join(packages)}")
        cache.partial.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=f"sysroot-{arch}-", dir=cache.partial) as tmp:
            staging = Path(tmp) / "sysroot"
            versions = _download_and_unpack(Path(tmp), staging, arch, packages, release,
                                            cache_root / "apt" / f"binary-{arch}")
            (staging / MANIFEST).write_text(json.dumps(
                {"arch": arch, "suites": _suites(release), "packages": versions},
                indent=2, sort_keys=True) + "\n")
            path.parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging, path)
    found = _load(path)
    assert found is not None
    return found


def _suites(release: str) -> list[str]:
    return [release, f"{release}-updates"]


def _load(path: Path) -> Sysroot | None:
    try:
        data = json.loads((path / MANIFEST).read_text())
        return Sysroot(path, data["arch"], tuple(data["suites"]), dict(data["packages"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _download_and_unpack(work: Path, staging: Path, arch: str, packages: Sequence[str],
                         release: str, apt_state: Path) -> dict[str, str]:
    options = _apt_options(apt_state, arch, release)
    update = subprocess.run(["apt-get", *options, "update"], capture_output=True, text=True)
    if update.returncode != 0:
        raise LmsforgeError(f"apt-get update for Debian {arch} packages failed "
                            f"({_last_line(update.stderr)}); check the network and run "
                            "again")
    debs = work / "debs"
    debs.mkdir()
    fetched = subprocess.run(["apt-get", *options, "download", *packages], cwd=debs,
                             capture_output=True, text=True)
    if fetched.returncode != 0:
        raise LmsforgeError(f"apt-get download of Debian {arch} packages failed "
                            f"({_last_line(fetched.stderr)}); check that {release} has "
                            f"{' '.join(packages)} for {arch}")
    versions = {}
    staging.mkdir()
    for deb in sorted(debs.glob("*.deb")):
        fields = subprocess.run(["dpkg-deb", "-f", str(deb), "Package", "Version"],
                                capture_output=True, text=True, check=True).stdout
        info = dict(line.split(": ", 1) for line in fields.strip().splitlines())
        versions[info["Package"]] = info["Version"]
        unpacked = subprocess.run(["dpkg-deb", "-x", str(deb), str(staging)],
                                  capture_output=True, text=True)
        if unpacked.returncode != 0:
            raise LmsforgeError(f"dpkg-deb -x {deb.name} failed "
                                f"({_last_line(unpacked.stderr)}); run again")
    missing = sorted(set(packages) - set(versions))
    if missing:
        raise LmsforgeError(f"apt-get download delivered no {' '.join(missing)} for {arch}; "
                            f"check that {release} has them")
    return versions


def _apt_options(apt_state: Path, arch: str, release: str) -> list[str]:
    """apt options that keep every file apt reads or writes inside APT_STATE."""
    uris, keyring = debian.machine_debian_entry()
    (apt_state / "lists" / "partial").mkdir(parents=True, exist_ok=True)
    (apt_state / "cache" / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    sources = apt_state / "lmsforge.sources"
    sources.write_text(f"Types: deb\nURIs: {uris}\nSuites: {' '.join(_suites(release))}\n"
                       f"Components: main\nSigned-By: {keyring}\n")
    return [
        "-o", f"Dir::Etc::SourceList={sources}",
        "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", "Dir::Etc::Preferences=/dev/null",
        "-o", "Dir::Etc::PreferencesParts=/dev/null",
        "-o", f"Dir::State::Lists={apt_state / 'lists'}",
        "-o", f"Dir::Cache={apt_state / 'cache'}",
        "-o", "Dir::State::status=/dev/null",
        "-o", f"APT::Architecture={arch}",
        "-o", f"APT::Architectures={arch}",
        "-o", "APT::Sandbox::User=root",
        "-q",
    ]


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"
