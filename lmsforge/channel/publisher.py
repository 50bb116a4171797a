"""Publishing packages to a private conda channel: a folder, or a conda server (``upload``).

Publishing to a folder channel never loses or corrupts what is there:

* every package is checked whole before anything is touched (a corrupt file is refused);
* the channel folder must be empty, new, or already a channel (``noarch/repodata.json``); any other
  folder is someone else's and is refused;
* one publisher at a time: ``<channel>/.lmsforge-publish.lock`` (an OS file lock, released when the
  process dies, so it never goes stale);
* the new index is built in a staging folder inside the channel (hard links of the packages, so it
  is cheap), merged with the channel's own metadata (hot-fixed records, the ``removed`` list, the
  index files other tools write: ``index``), and each index file is moved into place with
  an atomic rename; readers see the old index or the new one, never a half-written file. Packages
  land under their final names by rename too, world-readable (0644: a channel is meant to be
  served), and an existing file is never overwritten with different bytes.

Conda servers (quetz, Artifactory, prefix.dev, anaconda.org) get packages through
py-rattler-build's uploaders (``upload``); ``address`` says which server a ``--channel`` names.
Every message goes through ``credentials.redact``.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Sequence

import filelock

from lmsforge.channel import address as channel_address, index as channel_index, upload
from lmsforge.channel.credentials import redact
from lmsforge.channel.package import PACKAGE_SUFFIXES, PackageInfo, PublishResult, read_package
from lmsforge.errors import LmsforgeError, UsageError
from lmsforge.upstream.tree import sha256_of

LOCK_NAME = ".lmsforge-publish.lock"
STAGING_PREFIX = ".lmsforge-staging-"
PARTIAL_PREFIX = ".lmsforge-partial-"
DEFAULT_LOCK_TIMEOUT_S = 600.0
CHANNEL_FILE_MODE = 0o644  # a channel is meant to be served: readable by a web server's user
CHANNEL_DIR_MODE = 0o755
STALE_INDEXES = ("repodata_shards.msgpack.zst",)  # we do not write it; left alone it would hide
# new packages from readers that try it first (rattler, pixi)


def _check_channel_folder(folder: Path) -> None:
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"channel {folder} is a file, not a folder; pick a channel folder")
    if folder.is_dir():
        entries = [e for e in folder.iterdir() if not e.name.startswith(".lmsforge-")]
        if entries and not (folder / "noarch" / "repodata.json").is_file():
            raise UsageError(f"channel {folder} is not empty and not a conda channel "
                             "(no noarch/repodata.json); pick an empty folder or an existing channel")
    probe_dir = folder if folder.is_dir() else _nearest_existing(folder)
    if not os.access(probe_dir, os.W_OK | os.X_OK):
        raise UsageError(f"channel {folder} is not writable by this user; "
                         "fix its permissions or publish elsewhere")
    for subdir in _channel_subdirs(folder):
        if not os.access(subdir, os.W_OK | os.X_OK):
            raise UsageError(f"channel {folder}: {subdir.name}/ is not writable by this user; "
                             "fix its permissions (or ask its owner) and publish again")


def _channel_subdirs(folder: Path) -> list[Path]:
    """The platform folders of a channel: those holding packages or an index."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir()
                  if p.is_dir() and not p.name.startswith(".")
                  and ((p / "repodata.json").exists() or any(p.glob("*.conda"))
                       or any(p.glob("*.tar.bz2"))))


def check_publishable(folder: Path) -> None:
    """Refuse, before any work is done, a folder channel that ``publish`` would refuse."""
    _check_channel_folder(folder.resolve())


def _nearest_existing(path: Path) -> Path:
    for parent in [path, *path.parents]:
        if parent.exists():
            return parent
    return Path("/")


def _writable_or_fail(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=PARTIAL_PREFIX):
            pass
    except OSError as exc:
        raise UsageError(f"channel {folder} is not writable ({exc.strerror}); "
                         "fix its permissions or publish elsewhere") from None


def publish(packages: Sequence[Path], channel: str | Path, *,
            lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> PublishResult:
    """Add PACKAGES to CHANNEL (a folder, ``file://`` URI or server address, see
    ``channel_address``) and re-index it."""
    address = channel_address.parse(channel)
    if not packages:
        raise UsageError("no packages given; name the .conda files to publish")
    infos = _one_per_name([read_package(Path(p)) for p in packages])
    if address.folder is None:
        return upload.publish_to_server(infos, address)
    return publish_to_folder(infos, address.folder, lock_timeout_s=lock_timeout_s)


def _one_per_name(infos: Sequence[PackageInfo]) -> list[PackageInfo]:
    """INFOS with a file given twice counted once; two different files under one name (they would
    land on one path in the channel, the second one dropped) are refused."""
    chosen: dict[tuple[str, str], PackageInfo] = {}
    for info in infos:
        key = (info.subdir, info.filename)
        first = chosen.setdefault(key, info)
        if first.sha256 != info.sha256:
            raise UsageError(f"two different files are named {info.filename} ({first.path} and "
                             f"{info.path}); publish one of them, or bump the build number of "
                             "the other")
    return list(chosen.values())


def _check_indexes(folder: Path) -> None:
    """Refuse a channel whose index files do not read back as an index, before anything is
    staged: merging into one would fail half-way, or lose what it holds."""
    for subdir in _channel_subdirs(folder) + [folder / "noarch"]:
        index = subdir / "repodata.json"
        if not index.is_file():
            continue
        try:
            data = json.loads(index.read_bytes().decode("utf-8"))
            problem = "" if isinstance(data, dict) else "not a JSON object"
            for key in ("packages", "packages.conda"):
                if not problem and not isinstance(data.get(key, {}), dict):
                    problem = f"its {key!r} is not a JSON object"
        except UnicodeDecodeError:
            problem = "not UTF-8 text"
        except ValueError as exc:
            problem = f"not valid JSON: {getattr(exc, 'msg', 'unreadable')} at byte " \
                      f"{getattr(exc, 'pos', 0)}"
        if problem:
            raise UsageError(f"channel {folder}: {subdir.name}/repodata.json is not a valid index "
                             f"({problem}); restore it from a backup, or replace it with {{}} "
                             "to re-index from the package files")


def publish_to_folder(infos: Sequence[PackageInfo], folder: Path, *,
                      lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> PublishResult:
    start = time.monotonic()
    folder = folder.resolve()
    _check_channel_folder(folder)
    _writable_or_fail(folder)
    # group-writable, so the publishers of a shared channel can all take it
    lock = filelock.FileLock(str(folder / LOCK_NAME), timeout=lock_timeout_s, mode=0o664)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise LmsforgeError(f"another publisher holds the lock on channel {folder} "
                            f"({LOCK_NAME}) after {lock_timeout_s:.0f}s; wait for it and run "
                            "again") from None
    except PermissionError:
        raise UsageError(f"channel {folder}: its lock file {LOCK_NAME} belongs to another user "
                         "and is not writable by this one; ask its owner to make it "
                         "group-writable (chmod g+w)") from None
    try:
        _sweep_leftovers(folder)
        _check_channel_folder(folder)  # a publisher before us may have changed it
        _check_indexes(folder)
        added, unchanged = _plan(infos, folder)
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=folder))
        try:
            _stage(folder, staging, infos)
            _index(staging)
            warnings = channel_index.drop_misplaced(staging)
            obsolete = channel_index.merge_into_staging(folder, staging)
            _commit(folder, staging, infos, obsolete)
        except OSError as exc:  # a folder that changed owner or filled up while we worked
            raise LmsforgeError(f"publishing to channel {folder} failed ({exc.strerror}: "
                                f"{exc.filename}); the index was left as it was") from None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        lock.release()
    return PublishResult(str(folder), tuple(added), tuple(unchanged), time.monotonic() - start,
                         warnings=tuple(warnings))


def _sweep_leftovers(folder: Path) -> None:
    """Remove what a publisher killed with SIGKILL (or a power cut) left: staging folders and
    half-linked packages exist only while their publisher holds the lock, which we hold now."""
    for entry in folder.glob(STAGING_PREFIX + "*"):
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
    for entry in folder.glob(f"*/{PARTIAL_PREFIX}*"):
        if entry.is_file() and not entry.is_symlink():
            entry.unlink(missing_ok=True)


def _plan(infos: Sequence[PackageInfo], folder: Path) -> tuple[list[str], list[str]]:
    added, unchanged = [], []
    for info in infos:
        target = folder / info.subdir / info.filename
        rel = f"{info.subdir}/{info.filename}"
        if target.exists():
            if sha256_of(target) != info.sha256:
                raise UsageError(f"channel {folder} already has {rel} with different contents; "
                                 "bump the build number instead of replacing a published package")
            unchanged.append(rel)
        else:
            added.append(rel)
    return added, unchanged


def _stage(folder: Path, staging: Path, infos: Sequence[PackageInfo]) -> None:
    """A copy of the channel in STAGING: hard links of every package, plus the new ones."""
    (staging / "noarch").mkdir()
    for subdir in _channel_subdirs(folder):
        (staging / subdir.name).mkdir(exist_ok=True)
    for subdir in staging.iterdir():
        source = folder / subdir.name
        if source.is_dir():
            for package in source.iterdir():
                if package.name.endswith(PACKAGE_SUFFIXES) and package.is_file():
                    _link_or_copy(package, subdir / package.name)
    for info in infos:
        target_dir = staging / info.subdir
        target_dir.mkdir(exist_ok=True)
        if not (target_dir / info.filename).exists():
            shutil.copy2(info.path, target_dir / info.filename)
            (target_dir / info.filename).chmod(CHANNEL_FILE_MODE)


def _link_or_copy(source: Path, target: Path) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _index(staging: Path) -> None:
    from rattler.index import index_fs

    try:
        asyncio.run(index_fs(staging, write_zst=True, write_shards=False, force=True))
    except Exception as exc:
        raise LmsforgeError(f"indexing the channel failed ({redact(str(exc)).splitlines()[0]}); "
                            "the channel was left unchanged") from None


def _commit(folder: Path, staging: Path, infos: Sequence[PackageInfo],
            obsolete: Sequence[Path] = ()) -> None:
    """Move new packages, then each index file, into place by atomic rename; OBSOLETE (copies of
    an index file in a format we do not write) are removed before the index files move."""
    new_subdirs = {info.subdir for info in infos} | {"noarch"}
    for subdir in sorted(new_subdirs):
        if not (folder / subdir).is_dir():
            (folder / subdir).mkdir()
            (folder / subdir).chmod(CHANNEL_DIR_MODE)
    for info in infos:
        target = folder / info.subdir / info.filename
        if not target.exists():
            partial = target.with_name(PARTIAL_PREFIX + info.filename)
            os.link(staging / info.subdir / info.filename, partial)
            os.replace(partial, target)
    for stale in obsolete:
        stale.unlink(missing_ok=True)
    for subdir in sorted(p for p in staging.iterdir() if p.is_dir()):
        for produced in subdir.iterdir():
            if produced.is_file() and not produced.name.endswith(PACKAGE_SUFFIXES):
                produced.chmod(CHANNEL_FILE_MODE)
                os.replace(produced, folder / subdir.name / produced.name)
        for stale in STALE_INDEXES:
            if (folder / subdir.name / stale).exists():
                os.remove(folder / subdir.name / stale)
    for produced in staging.iterdir():  # channel-wide files: channeldata.json
        if produced.is_file():
            produced.chmod(CHANNEL_FILE_MODE)
            os.replace(produced, folder / produced.name)


def make_servable(packages: Sequence[Path]) -> None:
    """Give PACKAGES (just built into a local channel) and the index files and folders next to
    them the modes a web server needs: rattler-build writes packages 0600."""
    for package in packages:
        folders = {package.parent, package.parent.parent / "noarch"}
        package.chmod(CHANNEL_FILE_MODE)
        for folder in folders:
            if folder.is_dir():
                folder.chmod(CHANNEL_DIR_MODE)
                for index in folder.glob("repodata*"):
                    index.chmod(CHANNEL_FILE_MODE)


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under FOLDER (relative path -> sha256), lock file excluded."""
    result = {}
    if folder.is_dir():
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.name != LOCK_NAME:
                result[str(path.relative_to(folder))] = sha256_of(path)
    return result
