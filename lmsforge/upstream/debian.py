"""Debian packages: build inputs installed with apt, and source packages' ``.orig`` tarballs.

Source downloads never touch apt's configuration:

apt is pointed at a private sources file (``deb-src`` for bookworm, trixie and sid, with the same
mirror and keyring as the machine's own Debian entry) and a private lists folder, so neither
``/etc/apt`` nor ``/var/lib/apt/lists`` change. Success is judged by the archive's sha256, not by
apt's exit code: some source packages (TensorFlow 2.14.1) answer 404 for the ``.dsc`` while the
tarball arrives.

apt-get runs with the parent-death signal set: if lmsforge is killed, apt-get goes with it instead
of holding the lock on the lists folder (and dpkg's) for the next run.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from pathlib import Path
from typing import Callable, Sequence

from lmsforge.children import die_with_parent
from lmsforge.errors import EXIT_FAILED, LmsforgeError, UsageError
from lmsforge.upstream.sources import DebianPackage

DEFAULT_MIRROR = "http://deb.debian.org/debian"
DEFAULT_KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
SUITES = "bookworm trixie sid"
LOCK_RETRIES = 30  # x 2 s: another apt (not ours: ours take a cache lock first) may hold it
LOCK_BUSY = ("Could not get lock", "Unable to lock", "is another process using it")


def run_apt(args: Sequence[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run apt-get; it dies with lmsforge, and a lock held by another apt is waited for."""
    for attempt in range(LOCK_RETRIES):
        proc = subprocess.run(["apt-get", *args], capture_output=True, text=True,
                              preexec_fn=die_with_parent, **kwargs)  # type: ignore[call-overload]
        if proc.returncode == 0 or not any(busy in proc.stderr for busy in LOCK_BUSY):
            return proc
        time.sleep(2)
    return proc


def machine_debian_entry() -> tuple[str, str]:
    """The (URIs, Signed-By) of the machine's own Debian entry, or Debian's defaults."""
    for sources in sorted(Path("/etc/apt/sources.list.d").glob("*.sources")):
        for stanza in sources.read_text(errors="replace").split("\n\n"):
            uris = re.search(r"^URIs:\s*(\S+)", stanza, re.M)
            signed = re.search(r"^Signed-By:\s*(\S+)", stanza, re.M)
            if uris and uris.group(1).rstrip("/").endswith("/debian"):
                return uris.group(1), signed.group(1) if signed else DEFAULT_KEYRING
    return DEFAULT_MIRROR, DEFAULT_KEYRING


def download_orig(package: DebianPackage, archive_name: str, apt_state: Path, into: Path,
                  hold: Sequence[int] = ()) -> Path:
    """Run apt's source download of PACKAGE into INTO; return the path of ARCHIVE_NAME there.
    HOLD: descriptors the apt that writes into INTO keeps open (INTO's lock: Cache.held_lock)."""
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
    update = run_apt([*options, "update"])
    if update.returncode != 0:
        raise LmsforgeError(
            f"apt-get update for Debian sources at {uris} failed "
            f"({_last_line(update.stderr)}); check the network or pass --archive FILE",
            EXIT_FAILED)
    into.mkdir(parents=True, exist_ok=True)
    spec = f"{package.package}={package.version}"
    fetched = run_apt([*options, "source", "--download-only", spec], cwd=into,
                      pass_fds=tuple(hold))
    archive = into / archive_name
    if not archive.is_file():
        raise LmsforgeError(
            f"apt-get source {spec} did not deliver {archive_name} "
            f"({_last_line(fetched.stderr or fetched.stdout)}); check the network or pass the "
            "file with --archive FILE", EXIT_FAILED)
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


def ensure_packages(packages: Sequence[str], why: str,
                    say: Callable[[str], None] | None = None) -> None:
    """Install missing build inputs with apt when root (saying so in one line, never silently);
    otherwise say exactly what to install."""
    missing = missing_packages(tuple(dict.fromkeys(packages)))
    if not missing:
        return
    wanted = " ".join(missing)
    if os.geteuid() != 0:
        raise LmsforgeError(f"{why}: run `sudo apt-get install {wanted}`")
    if say is None:
        from lmsforge.ui import say
    say(f"installing Debian packages {wanted} ({why}) with apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["install", "-y", "-q", "--no-install-recommends", *missing]
    proc = run_apt(install, env=env)
    if proc.returncode != 0 and _lists_missing_or_stale(proc.stderr):
        # A fresh CI image often has no package lists yet, or lists older than its mirror.
        run_apt(["update", "-q"], env=env)
        proc = run_apt(install, env=env)
    if proc.returncode != 0:
        raise LmsforgeError(f"`apt-get {' '.join(install)}` failed "
                            f"({_last_line(proc.stderr)}); install {wanted} by hand")


def _lists_missing_or_stale(stderr: str) -> bool:
    lists = Path("/var/lib/apt/lists")
    have_lists = lists.is_dir() and any(lists.glob("*_Packages*"))
    return not have_lists or "apt-get update" in stderr
