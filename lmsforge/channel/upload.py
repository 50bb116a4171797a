"""Publishing to conda servers with py-rattler-build's uploaders, behind our one-line errors.

py-rattler-build 0.73.0 uploads to quetz, Artifactory (and any server taking
``PUT <channel>/<subdir>/<file>``), prefix.dev and anaconda.org; it has no S3 upload in its Python
API. Its errors carry no HTTP status (every refusal reads "Server responded with error"), so
before uploading we read the channel's index through rattler (with the same credentials): that
tells refused credentials (exit 2), a package already there with other bytes (exit 2) and one
already there unchanged (nothing to do) apart before anything is sent. Quetz answers a wrong key
on a public channel's index, so for quetz a refused upload is followed by one authenticated
request that tells a wrong key from a server error. After the upload we wait until the server's
index lists the new packages (quetz and Artifactory index in the background), so ``lmsforge test``
right after ``publish`` finds them.
"""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Sequence

from lmsforge.channel import credentials
from lmsforge.channel.address import ANACONDA, ARTIFACTORY, PREFIX, QUETZ, S3, ChannelAddress
from lmsforge.channel.credentials import AUTH_FILE_ENV, ENV_HOST, ENV_TOKEN, redact
from lmsforge.channel.installer import check_answering
from lmsforge.channel.package import PublishResult
from lmsforge.channel.upload_child import ERROR_MARKER
from lmsforge.errors import LmsforgeError, UsageError
from lmsforge.options import channel_timeout_s

INDEX_WAIT_S = 60.0


def publish_to_server(infos: Sequence, address: ChannelAddress, *,
                      index_wait_s: float = INDEX_WAIT_S):
    """Upload INFOS (``package.PackageInfo``) to the server ADDRESS names; a ``PublishResult``."""

    start = time.monotonic()
    _check_publishable(address)
    creds = credentials.for_hosts({address.host: address.token_kind},
                                  env_default_host=address.host,
                                  same_credentials={address.host: address.hosts[1:]})
    names = sorted({info.name for info in infos})
    subdirs = sorted({info.subdir for info in infos} | {"noarch"})
    with credentials.auth_file_for(creds) as auth_file:
        check_answering([address])
        there = _index_records(address, names, subdirs, has_credentials=bool(creds))
        added, unchanged = [], []
        for info in infos:
            rel = f"{info.subdir}/{info.filename}"
            if info.filename in there:
                if there[info.filename] != info.sha256:
                    raise UsageError(f"channel {address.shown} already has {rel} with different "
                                     "contents; bump the build number instead of replacing a "
                                     "published package")
                unchanged.append(rel)
            else:
                added.append(info)
        if added:
            _upload(address, [str(info.path) for info in added], str(auth_file), creds)
        indexed = _wait_for_index(address, added, names, subdirs, index_wait_s)
    return PublishResult(address.shown, tuple(f"{i.subdir}/{i.filename}" for i in added),
                         tuple(unchanged), time.monotonic() - start, indexed)


def _check_publishable(address: ChannelAddress) -> None:
    if address.server == S3:
        raise UsageError("py-rattler-build 0.73.0 has no S3 upload: publish to a folder channel "
                         "and copy it to the bucket (e.g. `aws s3 sync DIR s3://BUCKET/PATH`)")
    if address.has_url_credentials:
        raise UsageError(f"channel {address.shown}: credentials do not belong in the URL; put "
                         f"them in {AUTH_FILE_ENV} or {ENV_TOKEN} (docs/channel.md)")
    if not address.upload_channel:
        raise UsageError(f"channel {address.shown}: name the channel, as in "
                         "https://HOST/PATH/CHANNEL or quetz://HOST/CHANNEL")


def _index_records(address: ChannelAddress, names: Sequence[str],
                   subdirs: Sequence[str], *, has_credentials: bool = True) -> dict[str, str]:
    """File name -> sha256 of every record of NAMES the channel's index lists now (read through
    rattler, uncached, with the credentials in ``RATTLER_AUTH_FILE``)."""
    import rattler
    from rattler.networking import AuthenticationMiddleware, Client

    gateway = rattler.Gateway(default_config=rattler.SourceConfig(cache_action="no-cache",
                                                                  sharded_enabled=False),
                              client=Client(middlewares=[AuthenticationMiddleware()]))
    try:
        result = asyncio.run(gateway.query([rattler.Channel(address.read_url)], list(subdirs),
                                           list(names), recursive=False))
    except Exception as exc:
        text = redact(" ".join(str(exc).split()))
        if "could not find subdir 'noarch'" in text and address.server != QUETZ:
            return {}  # a new, empty repository
        raise _index_error(text, address, has_credentials) from None
    return {record.file_name: record.sha256.hex() if record.sha256 else ""
            for records in result for record in records}


def _index_error(text: str, address: ChannelAddress,
                 has_credentials: bool = True) -> LmsforgeError:
    """One line for a failure to read ADDRESS's index (TEXT is rattler's message, redacted)."""
    if _refused(text) and not has_credentials:
        return UsageError(f"channel {address.shown} needs credentials and lmsforge has none for "
                          f"{address.host}; add an entry to {AUTH_FILE_ENV}, or set {ENV_TOKEN} "
                          "(docs/channel.md)")
    if _refused(text):
        return UsageError(f"channel {address.shown} refused the credentials; check the entry for "
                          f"{address.host} in {AUTH_FILE_ENV}, or {ENV_TOKEN} with "
                          f"{ENV_HOST}={address.host}")
    if "could not find subdir 'noarch'" in text:
        return UsageError(f"channel {address.shown} does not exist (no noarch index); create it "
                          "on the server first")
    if _unreachable(text):
        return LmsforgeError(f"cannot reach channel {address.shown} ({text[:200]}); check the URL "
                             "and the network")
    return LmsforgeError(f"cannot read the index of channel {address.shown} ({text[:200]}); "
                         "check the URL and the server")


def _refused(text: str) -> bool:
    return bool(re.search(r"\b(401|403)\b|nauthori[sz]ed|orbidden", text))


def _unreachable(text: str) -> bool:
    return bool(re.search(r"(?i)error sending request|connect|dns|resolve|timed? ?out|"
                          r"unreachable|refused", text))


def _upload(address: ChannelAddress, files: list[str], auth_file: str,
            creds: dict[str, credentials.Credential]) -> None:
    base, channel = address.upload_base, address.upload_channel
    if address.server == QUETZ:
        function, args, kwargs = "upload_package_to_quetz", [files, base, channel], {}
    elif address.server == ARTIFACTORY:
        function, args, kwargs = "upload_package_to_artifactory", [files, base, channel], {}
    elif address.server == PREFIX:
        function, args, kwargs = "upload_package_to_prefix", [files, base, channel], {}
    elif address.server == ANACONDA:
        owner, _, label = channel.partition("/")
        function, args, kwargs = "upload_package_to_anaconda", [files, owner], {
            "channel": [label or "main"]}
    else:
        raise UsageError(f"channel {address.shown}: cannot publish to a {address.server} "
                         "channel")
    # In a child process: the uploaders hold the GIL for the whole upload (upload_child.py).
    call = {"function": function, "args": args, "kwargs": {**kwargs, "auth_file": auth_file}}
    proc = subprocess.run([sys.executable, "-m", "lmsforge.channel.upload_child", json.dumps(call)],
                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                          errors="replace")
    if proc.returncode != 0:
        said = [line[len(ERROR_MARKER):] for line in proc.stderr.splitlines()
                if line.startswith(ERROR_MARKER)]
        text = said[-1] if said else " ".join(proc.stderr.split()[-40:]) or \
            f"the uploader ended with exit {proc.returncode}"
        raise _upload_error(text, address, creds)


def _upload_error(text: str, address: ChannelAddress,
                  creds: dict[str, credentials.Credential]) -> LmsforgeError:
    text = redact(text)
    where = f"channel {address.shown}"
    if re.search(r"(?i)\bno\b.*\bwas given\b", text):  # "No quetz api key was given and ..."
        return UsageError(f"{where} needs credentials and none are set for {address.host}; add "
                          f"an entry to {AUTH_FILE_ENV} or set {ENV_TOKEN} (docs/channel.md)")
    if "is required for authentication" in text:
        kind = "CondaToken" if address.server in (QUETZ, ANACONDA) else "BearerToken"
        return UsageError(f"{where} takes a {kind}; change the entry for {address.host} in "
                          f"{AUTH_FILE_ENV} (or use {ENV_TOKEN})")
    if _unreachable(text) and "responded" not in text:
        return LmsforgeError(f"cannot reach {where} ({text[:200]}); check the URL and the "
                             "network")
    if address.server == QUETZ and _quetz_key_refused(address, creds):
        return UsageError(f"{where} refused the API key; check the entry for {address.host} in "
                          f"{AUTH_FILE_ENV}, or {ENV_TOKEN} with {ENV_HOST}={address.host}")
    return LmsforgeError(f"{where} refused the upload (py-rattler-build says: {text[:200]}); "
                         "check that the key may upload to this channel, and the server's log")


def _quetz_key_refused(address: ChannelAddress,
                       creds: dict[str, credentials.Credential]) -> bool:
    """True when quetz answers 401 to the key on an endpoint that needs a valid one."""
    credential = creds.get(address.host)
    if not credential:
        return True
    request = urllib.request.Request(f"{address.upload_base}api/api-keys",
                                     headers={"X-API-Key": credentials.secret_of(credential)})
    try:
        with urllib.request.urlopen(request, timeout=channel_timeout_s()):
            return False
    except urllib.error.HTTPError as exc:
        return exc.code == 401
    except OSError:
        return False


def _wait_for_index(address: ChannelAddress, added: Sequence, names: Sequence[str],
                    subdirs: Sequence[str], wait_s: float) -> bool:
    """Poll the server's index until it lists every package in ADDED; False after WAIT_S."""
    wanted = {info.filename: info.sha256 for info in added}
    deadline = time.monotonic() + wait_s
    while True:
        there = _index_records(address, names, subdirs)
        if all(there.get(name) == sha for name, sha in wanted.items()):
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.5)
