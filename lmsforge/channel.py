"""Private conda channels: publish packages to them, install from them (py-rattler).

Publishing to a folder channel never loses or corrupts what is there:

* every package is checked whole before anything is touched (a corrupt file is refused);
* the channel folder must be empty, new, or already a channel (``noarch/repodata.json``); any other
  folder is someone else's and is refused;
* one publisher at a time: ``<channel>/.lmsforge-publish.lock`` (an OS file lock, released when the
  process dies, so it never goes stale);
* the new index is built in a staging folder inside the channel (hard links of the packages, so it
  is cheap) and each index file is moved into place with an atomic rename; readers see the old
  index or the new one, never a half-written file. Packages land under their final names by
  rename too, and an existing file is never overwritten with different bytes.

HTTP targets take packages by ``PUT <url>/<subdir>/<file>`` (the protocol of Artifactory-style
conda repositories, which index on the server). Installing uses py-rattler's solver and installer
with only the channels given, never a default one.

Credentials come from one place: rattler's auth file (``RATTLER_AUTH_FILE``, a JSON map of host to
``BearerToken`` / ``CondaToken`` / ``BasicHTTP``), or, for a single channel, the environment
(``LMSFORGE_CHANNEL_TOKEN``, or ``LMSFORGE_CHANNEL_USER`` with ``LMSFORGE_CHANNEL_PASSWORD``), which
is turned into a private auth file for the call. They are never printed: every message that can
carry a URL or a server's answer goes through ``redact``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import re
import shutil
import tarfile
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

import filelock

from lmsforge.upstream import sha256_of
from lmsforge.errors import CheckFailed, LmsforgeError, UsageError

LOCK_NAME = ".lmsforge-publish.lock"
STAGING_PREFIX = ".lmsforge-staging-"
PARTIAL_PREFIX = ".lmsforge-partial-"
DEFAULT_LOCK_TIMEOUT_S = 600.0
HTTP_TIMEOUT_S = 60
PACKAGE_SUFFIXES = (".conda", ".tar.bz2")
CHANNEL_FILE_MODE = 0o644  # a channel is meant to be served: readable by a web server's user
ENV_TOKEN = "LMSFORGE_CHANNEL_TOKEN"
ENV_USER = "LMSFORGE_CHANNEL_USER"
ENV_PASSWORD = "LMSFORGE_CHANNEL_PASSWORD"
AUTH_FILE_ENV = "RATTLER_AUTH_FILE"


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


@dataclass(frozen=True)
class InstallResult:
    prefix: Path
    channels: tuple[str, ...]  # redacted
    platform: str
    packages: tuple[str, ...]  # "name=version=build" of every installed record
    seconds: float


# --- credentials and redaction ------------------------------------------------------------------


def _auth_file_entries() -> dict[str, object]:
    path = os.environ.get(AUTH_FILE_ENV)
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        raise UsageError(f"{AUTH_FILE_ENV} names an unreadable or invalid auth file; "
                         "fix it (a JSON map of host to credentials) or unset it") from None
    return data if isinstance(data, dict) else {}


def _secrets() -> list[str]:
    found: list[str] = []
    for value in (os.environ.get(ENV_TOKEN), os.environ.get(ENV_PASSWORD)):
        if value:
            found.append(value)
    with contextlib.suppress(UsageError):
        for entry in _auth_file_entries().values():
            _collect_strings(entry, found)
    return [s for s in found if len(s) >= 4]


def _collect_strings(value: object, into: list[str]) -> None:
    if isinstance(value, str):
        into.append(value)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key != "username":
                _collect_strings(item, into)


_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
_URL_TOKEN = re.compile(r"/t/[^/\s]+")
_AUTH_HEADER = re.compile(r"(?i)(authorization:\s*\w+\s+)\S+")


def redact(text: str) -> str:
    """TEXT with every credential we know of, and every URL user:password or /t/<token>, hidden."""
    text = _URL_USERINFO.sub(r"\g<scheme>***@", text)
    text = _URL_TOKEN.sub("/t/***", text)
    text = _AUTH_HEADER.sub(r"\1***", text)
    for secret in sorted(_secrets(), key=len, reverse=True):
        text = text.replace(secret, "***")
    return text


def _host_of(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc.rsplit("@", 1)[-1]


def _credentials_for(url: str) -> dict[str, object] | None:
    """The auth-file entry for URL's host (exact host:port, host, or a ``*.`` glob), else env."""
    host_port = _host_of(url)
    host = host_port.split(":")[0]
    entries = _auth_file_entries()
    for key in (host_port, host):
        if key in entries:
            return entries[key]  # type: ignore[return-value]
    for key, value in entries.items():
        if key.startswith("*.") and host.endswith(key[1:]):
            return value  # type: ignore[return-value]
    token = os.environ.get(ENV_TOKEN)
    if token:
        return {"BearerToken": token}
    user, password = os.environ.get(ENV_USER), os.environ.get(ENV_PASSWORD)
    if user and password:
        return {"BasicHTTP": {"username": user, "password": password}}
    return None


def _auth_header(credentials: dict[str, object] | None) -> dict[str, str]:
    if not credentials:
        return {}
    if "BearerToken" in credentials:
        return {"Authorization": f"Bearer {credentials['BearerToken']}"}
    if "BasicHTTP" in credentials:
        basic = credentials["BasicHTTP"]
        assert isinstance(basic, dict)
        pair = f"{basic.get('username', '')}:{basic.get('password', '')}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
    return {}  # CondaToken lives in the URL (/t/<token>/), which rattler adds itself


@contextlib.contextmanager
def _auth_env_for(urls: Sequence[str]) -> Iterator[None]:
    """Make rattler see env credentials: a private auth file for the HTTP channels, this call only."""
    if os.environ.get(AUTH_FILE_ENV) or not (os.environ.get(ENV_TOKEN) or os.environ.get(ENV_USER)):
        yield
        return
    entries = {}
    for url in urls:
        if url.startswith(("http://", "https://")):
            credentials = _credentials_for(url)
            if credentials:
                entries[_host_of(url).split(":")[0]] = credentials  # rattler keys by host
    with tempfile.TemporaryDirectory(prefix="lmsforge-auth-") as folder:
        path = Path(folder) / "auth.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as stream:
            json.dump(entries, stream)
        os.environ[AUTH_FILE_ENV] = str(path)
        try:
            yield
        finally:
            del os.environ[AUTH_FILE_ENV]


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


# --- folder channels ----------------------------------------------------------------------------


def is_http(channel: str) -> bool:
    return channel.startswith(("http://", "https://"))


def channel_folder(channel: str | Path) -> Path:
    text = str(channel)
    if text.startswith("file://"):
        return Path(urllib.parse.unquote(urllib.parse.urlsplit(text).path))
    return Path(text).expanduser()


def channel_url(channel: str | Path) -> str:
    """A URL rattler accepts: HTTP URLs as given, folders as file:// URIs."""
    text = str(channel)
    if is_http(text) or text.startswith("file://"):
        return text
    return Path(text).expanduser().resolve().as_uri()


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
    """Add PACKAGES to CHANNEL (a folder, file:// URI or HTTP URL) and re-index it."""
    if not packages:
        raise UsageError("no packages given; name the .conda files to publish")
    infos = [read_package(Path(p)) for p in packages]
    if is_http(str(channel)):
        return _publish_http(infos, str(channel))
    return publish_to_folder(infos, channel_folder(channel), lock_timeout_s=lock_timeout_s)


def publish_to_folder(infos: Sequence[PackageInfo], folder: Path, *,
                      lock_timeout_s: float = DEFAULT_LOCK_TIMEOUT_S) -> PublishResult:
    start = time.monotonic()
    folder = folder.resolve()
    _check_channel_folder(folder)
    _writable_or_fail(folder)
    lock = filelock.FileLock(str(folder / LOCK_NAME), timeout=lock_timeout_s)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise LmsforgeError(f"another publisher holds the lock on channel {folder} "
                            f"({LOCK_NAME}) after {lock_timeout_s:.0f}s; wait for it and run "
                            "again") from None
    try:
        _check_channel_folder(folder)  # a publisher before us may have changed it
        added, unchanged = _plan(infos, folder)
        staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=folder))
        try:
            _stage(folder, staging, infos)
            _index(staging)
            _commit(folder, staging, infos)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    finally:
        lock.release()
    return PublishResult(str(folder), tuple(added), tuple(unchanged), time.monotonic() - start)


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
    for subdir in folder.iterdir():
        if not subdir.is_dir() or subdir.name.startswith(".") or subdir.name == "noarch":
            continue
        if any(subdir.glob("*.conda")) or any(subdir.glob("*.tar.bz2")) or \
                (subdir / "repodata.json").exists():
            (staging / subdir.name).mkdir()
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


def _commit(folder: Path, staging: Path, infos: Sequence[PackageInfo]) -> None:
    """Move new packages, then each index file, into place by atomic rename."""
    new_subdirs = {info.subdir for info in infos} | {"noarch"}
    for subdir in sorted(new_subdirs):
        (folder / subdir).mkdir(exist_ok=True)
    for info in infos:
        target = folder / info.subdir / info.filename
        if not target.exists():
            partial = target.with_name(PARTIAL_PREFIX + info.filename)
            os.link(staging / info.subdir / info.filename, partial)
            os.replace(partial, target)
    for subdir in staging.iterdir():
        for produced in subdir.iterdir():
            if produced.is_file() and not produced.name.endswith(PACKAGE_SUFFIXES):
                produced.chmod(CHANNEL_FILE_MODE)
                os.replace(produced, folder / subdir.name / produced.name)
        stale_shards = folder / subdir.name / "repodata_shards.msgpack.zst"
        if stale_shards.exists():  # an index we did not rewrite must not hide the new packages
            os.remove(stale_shards)


# --- HTTP targets -------------------------------------------------------------------------------


def _publish_http(infos: Sequence[PackageInfo], url: str) -> PublishResult:
    start = time.monotonic()
    headers = _auth_header(_credentials_for(url))
    added = []
    for info in infos:
        target = f"{url.rstrip('/')}/{info.subdir}/{urllib.parse.quote(info.filename)}"
        request = urllib.request.Request(target, data=info.path.read_bytes(), method="PUT",
                                         headers={**headers, "X-Checksum-Sha256": info.sha256,
                                                  "Content-Type": "application/octet-stream"})
        _http_call(request, url, "publish to")
        added.append(f"{info.subdir}/{info.filename}")
    return PublishResult(redact(url), tuple(added), (), time.monotonic() - start)


def _http_call(request: urllib.request.Request, channel: str, doing: str) -> bytes:
    try:
        with urllib.request.urlopen(request, timeout=HTTP_TIMEOUT_S) as response:
            return response.read()
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise UsageError(f"channel {redact(channel)} refused the credentials (HTTP {exc.code}); "
                             f"check the entry for {_host_of(channel)} in {AUTH_FILE_ENV} or "
                             f"{ENV_TOKEN}") from None
        if exc.code == 409:
            raise UsageError(f"channel {redact(channel)} already has "
                             f"{redact(request.full_url.rsplit('/', 1)[-1])} with different "
                             "contents; bump the build number") from None
        raise LmsforgeError(f"could not {doing} channel {redact(channel)} (HTTP {exc.code}); "
                            "check the URL and the server") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise LmsforgeError(f"cannot reach channel {redact(channel)} ({redact(str(reason))}); "
                            "check the URL and the network") from None


# --- installing ---------------------------------------------------------------------------------


def _gateway(cache_dir: Path | None):
    from rattler import Gateway
    from rattler.networking import AuthenticationMiddleware, Client

    client = Client(middlewares=[AuthenticationMiddleware()])
    return Gateway(cache_dir=cache_dir, client=client), client


def install(specs: Sequence[str], channels: Sequence[str | Path], prefix: Path, *,
            platform: str | None = None, virtual_packages: Sequence[str] = (),
            cache_dir: Path | None = None) -> InstallResult:
    """Solve SPECS against exactly CHANNELS and install into PREFIX, which must not exist yet.

    VIRTUAL_PACKAGES are extra ``name=version`` virtual packages (e.g. ``__cuda=12.4`` to solve a
    GPU environment on a host without one); the host's own are detected and used as well.
    """
    import rattler

    start = time.monotonic()
    if prefix.exists() and any(prefix.iterdir()):
        raise UsageError(f"prefix {prefix} exists and is not empty; give a fresh folder")
    if not channels:
        raise UsageError("no channel given; pass the channel to install from")
    urls = [channel_url(c) for c in channels]
    for url in urls:
        if url.startswith("file://") and not (channel_folder(url) / "noarch" / "repodata.json").is_file():
            raise UsageError(f"channel {channel_folder(url)} is not a conda channel "
                             "(no noarch/repodata.json); publish to it first")
    platform = platform or str(rattler.Subdir.current())
    virtuals = list(rattler.VirtualPackage.detect())
    for item in virtual_packages:
        name, _, version = item.partition("=")
        virtuals.append(rattler.GenericVirtualPackage(rattler.PackageName(name),
                                                      rattler.Version(version or "0"),
                                                      rattler.BuildString("0")))
    with _auth_env_for(urls):
        gateway, client = _gateway(cache_dir)
        try:
            records = asyncio.run(rattler.solve(
                sources=[rattler.Channel(u) for u in urls], specs=list(specs), gateway=gateway,
                platforms=[platform, "noarch"], virtual_packages=virtuals))
        except Exception as exc:
            raise _solve_error(exc, urls, specs) from None
        try:
            asyncio.run(rattler.install(records, target_prefix=prefix, cache_dir=cache_dir,
                                        platform=rattler.Subdir(platform), show_progress=False,
                                        client=client))
        except Exception as exc:
            raise LmsforgeError(f"installing into {prefix} failed: "
                                f"{redact(_first_line(exc))}; see the channel and the prefix") from None
    names = tuple(sorted(f"{r.name.normalized}={r.version}={r.build}" for r in records))
    return InstallResult(prefix, tuple(redact(u) for u in urls), platform, names,
                         time.monotonic() - start)


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__


def _solve_error(exc: Exception, urls: Sequence[str], specs: Sequence[str]) -> LmsforgeError:
    text = redact(_first_line(exc))
    shown = ", ".join(redact(u) for u in urls)
    if re.search(r"\b(401|403)\b|nauthori[sz]ed|orbidden", text):
        return UsageError(f"channel {shown} refused the credentials; check its entry in "
                          f"{AUTH_FILE_ENV} or {ENV_TOKEN}")
    if re.search(r"(?i)connect|dns|resolve|timed? ?out|unreachable|refused", text):
        return LmsforgeError(f"cannot reach channel {shown} ({text}); check the URL and the network")
    if re.search(r"(?i)404|not found", text) and "cannot solve" not in text.lower():
        return LmsforgeError(f"channel {shown} has no index ({text}); check the URL")
    return CheckFailed(f"cannot install {' '.join(specs)} from {shown}: {text}")


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under FOLDER (relative path -> sha256), lock file excluded."""
    result = {}
    if folder.is_dir():
        for path in sorted(folder.rglob("*")):
            if path.is_file() and path.name != LOCK_NAME:
                result[str(path.relative_to(folder))] = sha256_of(path)
    return result
