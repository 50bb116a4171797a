"""Debian packages: build inputs installed with apt, and source packages' ``.orig`` tarballs.

Source downloads never touch apt's configuration:

apt is pointed at a private sources file (``deb-src`` for bookworm, trixie and sid, with the same
mirror and keyring as the machine's own Debian entry) and a private lists folder, so neither
``/etc/apt`` nor ``/var/lib/apt/lists`` change. Success is judged by the archive's sha256, not by
apt's exit code: some source packages (TensorFlow 2.14.1) answer 404 for the ``.dsc`` while the
tarball arrives.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from lmsforge.errors import LmsforgeError, UsageError
from lmsforge.sources import DebianPackage

DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
SUITES = "bookworm trixie sid"


def machine_debian_entry() -> tuple[str, str]:
    """The (URIs, Signed-By) of the machine's own Debian entry, or Debian's defaults."""
    for sources in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in sources.read_text(errors="replace").split("\n\n"):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            signed = re.search(r"^Signed-By:\s*(\S+)", stanza, re.M)
            if uris and uris.group(1).rstrip("/").endswith("/debian"):
                return uris.group(1), signed.group(1) if signed else DEFAULT_KEYRING
    return DEFAULT_MIRROR, DEFAULT_KEYRING


def download_orig(package: DebianPackage, archive_name: str, apt_state: Path, into: Path) -> Path:
    """Run apt's source download of PACKAGE into INTO; return the path of ARCHIVE_NAME there."""
    if shutil.which("apt-get") is None:
        raise UsageError(
            f"apt-get is not available to download {archive_name}; download it elsewhere and "
            "pass it with --archive FILE")
    uris, keyring = machine_debian_entry()
    lists = apt_state / "lists"
    (lists / "partial").mkdir(parents=True, exist_ok=True)
    sources_file = apt_state / "lmsforge.sources"
    sources_file.write_text(
        f"Types: deb-src\nURIs: {uris}\nSuites: {SUITES}\nComponents: main\nSigned-By: {keyring}\n")
    options = [
        "-o", f"Dir::Etc::SourceList={sources_file}",
        "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", f"Dir::State::Lists={lists}",
        "-o", "APT::Sandbox::User=root",
        "-q",
    ]
    update = subprocess.run(["apt-get", *options, "update"], capture_output=True, text=True)
    if update.returncode != 0:
        raise LmsforgeError(
            f"apt-get update for Debian sources at {uris} failed "
            f"({_last_line(update.stderr)}); check the network or pass --archive FILE", 2)
    into.mkdir(parents=True, exist_ok=True)
    spec = f"{package.package}={package.version}"
    fetched = subprocess.run(["apt-get", *options, "source", "--download-only", spec],
                             cwd=into, capture_output=True, text=True)
    archive = into / archive_name
    if not archive.is_file():
        raise LmsforgeError(
            f"apt-get source {spec} did not deliver {archive_name} "
            f"({_last_line(fetched.stderr or fetched.stdout)}); pass the file with --archive FILE", 2)
    return archive


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "no output"


def missing_packages(packages: tuple[str, ...]) -> list[str]:
    """Which of PACKAGES dpkg does not have installed (none on a host without dpkg)."""
    if shutil.which("dpkg-query") is None:
        return []  # not Debian: the build itself names whatever it cannot find
    missing = []
    for package in packages:
        proc = subprocess.run(["dpkg-query", "-W", "-f=${db:Status-Status}", package],
                              capture_output=True, text=True)
        if proc.stdout.strip() != "installed":
            missing.append(package)
    return missing


def ensure_packages(packages: tuple[str, ...], why: str) -> None:
    """Install missing build inputs with apt when root; otherwise say exactly what to install."""
    missing = missing_packages(packages)
    if not missing:
        return
    wanted = " ".join(missing)
    if os.geteuid() != 0:
        raise LmsforgeError(f"{why}: run `sudo apt-get install {wanted}`")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing]
    if subprocess.run(install, capture_output=True, env=env).returncode != 0:
        # A fresh CI image often has no package lists yet.
        subprocess.run(["apt-get", "update", "-q"], capture_output=True, env=env)
        proc = subprocess.run(install, capture_output=True, text=True, env=env)
        if proc.returncode != 0:
            raise LmsforgeError(f"`{' '.join(install)}` failed ({_last_line(proc.stderr)}); "
                                f"install {wanted} by hand")
