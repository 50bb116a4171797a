"""What a ``--channel`` value names: a folder, or a conda server and the protocol it speaks.

The server forms follow ``rattler-build publish --to``, so one string serves ``publish`` and
``test``:

=====================================  ==================================================  =========
``--channel``                          installs from (rattler)                             uploads
=====================================  ==================================================  =========
``DIR``, ``file:///DIR``               the folder                                          folder
``quetz://HOST[:PORT]/CHANNEL``        ``https://HOST/get/CHANNEL``                        quetz API
``artifactory://HOST[:PORT]/PATH/CH``  ``https://HOST/PATH/CH``                            PUT
``https://prefix.dev/CHANNEL``         ``https://repo.prefix.dev/CHANNEL``                 prefix API
``https://anaconda.org/OWNER[/LABEL]`` ``https://conda.anaconda.org/OWNER[/label/LABEL]``  anaconda
``http(s)://HOST/PATH/CHANNEL``        the URL                                             PUT
``s3://BUCKET/PATH``                   the URL                                             —
=====================================  ==================================================  =========

``quetz+http://`` and ``artifactory+http://`` are the same servers without TLS (a server on the
build host or inside the cluster). "PUT" is the Artifactory protocol
(``PUT <channel>/<subdir>/<file>``; the server indexes), which any generic conda repository
takes. Credentials never belong in the string; they come from ``lmsforge.channel.credentials``.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from lmsforge.channel.credentials import BEARER, CONDA_TOKEN, redact
from lmsforge.errors import UsageError

FOLDER, QUETZ, ARTIFACTORY, PREFIX, ANACONDA, S3 = (
    "folder", "quetz", "artifactory", "prefix.dev", "anaconda.org", "s3")
# the hosted services: where packages are uploaded, and where they are downloaded from
PREFIX_UPLOAD_BASE, PREFIX_READ_ROOT = "https://prefix.dev/", "https://repo.prefix.dev"
ANACONDA_UPLOAD_BASE, ANACONDA_READ_ROOT = "https://anaconda.org/", "https://conda.anaconda.org"
_SERVER_SCHEMES = {"quetz": QUETZ, "artifactory": ARTIFACTORY}


@dataclass(frozen=True)
class ChannelAddress:
    server: str  # FOLDER, QUETZ, ARTIFACTORY, PREFIX, ANACONDA, S3
    read_url: str  # what rattler installs from: file:// URI for folders
    host: str = ""  # the host credentials are looked up for; "" for folders
    upload_base: str = ""  # the server's URL for uploads (ends with "/")
    upload_channel: str = ""  # the channel (quetz, prefix.dev), path segment (PUT), owner/label
    token_kind: str = BEARER  # what a bare token from the environment is for this server

    @property
    def shown(self) -> str:
        return redact(self.read_url)

    @property
    def folder(self) -> Path | None:
        if self.server != FOLDER:
            return None
        return Path(urllib.parse.unquote(urllib.parse.urlsplit(self.read_url).path))

    @property
    def hosts(self) -> tuple[str, ...]:
        """Every host this channel's credentials are filed under: ``host`` (where they are looked
        up and uploads go), then the host downloads go to, which differs for prefix.dev
        (``repo.prefix.dev``) and anaconda.org (``conda.anaconda.org``); rattler sends a
        credential only to the host it is filed under (or a ``*.`` glob of it)."""
        if not self.host:
            return ()
        read_host = urllib.parse.urlsplit(self.read_url).hostname or self.host
        return tuple(dict.fromkeys((self.host, read_host)))

    @property
    def has_url_credentials(self) -> bool:
        parts = urllib.parse.urlsplit(self.read_url)
        return bool(parts.username or parts.password or "/t/" in parts.path)


def parse(text: str | Path) -> ChannelAddress:
    """The address TEXT names; a one-line ``UsageError`` for anything malformed."""
    text = str(text)
    if not text.strip():
        raise UsageError("empty channel; pass a folder or a URL (see docs/channel.md)")
    scheme = text.split("://", 1)[0].lower() if "://" in text else ""
    if not scheme:
        return _folder(Path(text).expanduser())
    if scheme == "file":
        return _folder(_file_path(text))
    parts = _split(text)
    if scheme == "s3":
        return ChannelAddress(S3, text.rstrip("/"), parts.hostname or "")
    base_scheme, _, transport = scheme.partition("+")
    if base_scheme in _SERVER_SCHEMES:
        if transport not in ("", "http"):
            raise UsageError(f"channel {redact(text)}: use {base_scheme}:// (HTTPS) or "
                             f"{base_scheme}+http:// (plain HTTP)")
        return _server(_SERVER_SCHEMES[base_scheme], "http" if transport else "https", parts,
                       text)
    if scheme in ("http", "https"):
        return _http(scheme, parts, text)
    raise UsageError(f"channel {redact(text)}: unknown scheme {scheme}://; use a folder, "
                     "file://, http(s)://, quetz://, artifactory:// or s3:// (docs/channel.md)")


def _folder(path: Path) -> ChannelAddress:
    return ChannelAddress(FOLDER, path.resolve().as_uri())


def _file_path(text: str) -> Path:
    """The folder a ``file://`` URL names. Only ``file:///abs`` (or ``file://localhost/abs``)
    names a local folder: in ``file://lms-channel`` the name is the URL's host part, and its
    path is empty, which would be the current folder."""
    parts = urllib.parse.urlsplit(text)
    if parts.netloc.lower() not in ("", "localhost"):
        raise UsageError(f"channel {redact(text)}: a file:// URL with a host part "
                         f"({redact(parts.netloc)}); write file:///abs/path or a plain path")
    if not parts.path:
        raise UsageError(f"channel {redact(text)}: a file:// URL without a path; write "
                         "file:///abs/path or a plain path")
    return Path(urllib.parse.unquote(parts.path))


def _split(text: str) -> urllib.parse.SplitResult:
    """TEXT split into URL parts, refusing what HTTP clients would choke on later."""
    if re.search(r"[\s\x00-\x1f\x7f]", text):
        raise UsageError(f"channel {redact(text)!r} contains spaces or control characters; "
                         "quote the URL correctly (spaces must be %20)")
    try:
        parts = urllib.parse.urlsplit(text)
    except ValueError:  # an unclosed IPv6 bracket
        raise UsageError(f"channel {redact(text)}: malformed host; write IPv6 hosts as "
                         "[::1]") from None
    try:
        port = parts.port
    except ValueError:
        raise UsageError(f"channel {redact(text)}: invalid port; use HOST:PORT with a port "
                         "number from 1 to 65535") from None
    if not parts.hostname or port == 0:
        raise UsageError(f"channel {redact(text)}: no host (or port 0) in the URL")
    return parts


def _netloc(parts: urllib.parse.SplitResult) -> str:
    """host[:port] without any user:password."""
    return parts.netloc.rsplit("@", 1)[-1]


def _segments(parts: urllib.parse.SplitResult) -> list[str]:
    return [s for s in parts.path.split("/") if s]


def _server(server: str, scheme: str, parts: urllib.parse.SplitResult,
            text: str) -> ChannelAddress:
    segments = _segments(parts)
    if not segments or (server == QUETZ and len(segments) != 1):
        form = "quetz://HOST/CHANNEL" if server == QUETZ else "artifactory://HOST/PATH/CHANNEL"
        raise UsageError(f"channel {redact(text)}: name the channel, as in {form}")
    if parts.username or parts.password:
        raise UsageError(f"channel {redact(text)}: credentials do not belong in the URL; put "
                         "them in RATTLER_AUTH_FILE or LMSFORGE_CHANNEL_TOKEN (docs/channel.md)")
    root = f"{scheme}://{_netloc(parts)}/"
    if server == QUETZ:
        return ChannelAddress(QUETZ, f"{root}get/{segments[0]}", parts.hostname or "",
                              root, segments[0], CONDA_TOKEN)
    parent = root + "".join(s + "/" for s in segments[:-1])
    return ChannelAddress(ARTIFACTORY, parent + segments[-1], parts.hostname or "", parent,
                          segments[-1], BEARER)


def _http(scheme: str, parts: urllib.parse.SplitResult, text: str) -> ChannelAddress:
    host = parts.hostname or ""
    segments = _segments(parts)
    if host in ("prefix.dev", "repo.prefix.dev") and len(segments) == 1:
        return ChannelAddress(PREFIX, f"{PREFIX_READ_ROOT}/{segments[0]}", "prefix.dev",
                              PREFIX_UPLOAD_BASE, segments[0], BEARER)
    if host == "anaconda.org" and 1 <= len(segments) <= 2:
        owner, label = segments[0], (segments[1] if len(segments) == 2 else "")
        read = f"{ANACONDA_READ_ROOT}/{owner}" + (f"/label/{label}" if label else "")
        return ChannelAddress(ANACONDA, read, "anaconda.org", ANACONDA_UPLOAD_BASE,
                              f"{owner}/{label}" if label else owner, CONDA_TOKEN)
    read = urllib.parse.urlunsplit((scheme, parts.netloc, parts.path.rstrip("/"), parts.query,
                                    ""))
    if not segments:
        return ChannelAddress(ARTIFACTORY, read, host)  # installable; publish asks for a path
    parent = f"{scheme}://{_netloc(parts)}/" + "".join(s + "/" for s in segments[:-1])
    return ChannelAddress(ARTIFACTORY, read, host, parent, segments[-1], BEARER)

