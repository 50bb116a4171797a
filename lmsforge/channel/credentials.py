"""Channel credentials: where they come from, which host gets them, and hiding them in output.

One source, in rattler's own format: the auth file named by ``RATTLER_AUTH_FILE`` (a JSON map of
host, or ``*.domain`` glob, to ``{"BearerToken": …}``, ``{"CondaToken": …}``,
``{"BasicHTTP": {"username": …, "password": …}}`` or ``{"S3Credentials": {"access_key_id": …,
"secret_access_key": …, "session_token": … or null}}``): rattler's four kinds, all passed
through as they are. An entry of a kind this rattler does not know (a newer one, or a typo) is
refused only when a command would hand it to rattler (its host is one of the command's
channels); the file is shared with pixi and rattler-build, so entries for other hosts are not
ours to judge.

The environment variables are a shortcut for ONE host: ``LMSFORGE_CHANNEL_TOKEN`` (or
``LMSFORGE_CHANNEL_USER`` + ``LMSFORGE_CHANNEL_PASSWORD``) belong to the host named by
``LMSFORGE_CHANNEL_HOST``; only ``lmsforge publish`` may leave that unset, and then they belong
to the one channel it publishes to. For that host the shortcut wins over an auth-file entry.

Every command hands rattler (and rattler-build) a private auth file, mode 0600, that holds entries
for the hosts of that command's channels and nothing else, so a token is sent only to the host it
was given for and never to a mirror or conda-forge next to it. A hosted service that uploads on
one host and serves downloads from another (prefix.dev and ``repo.prefix.dev``, anaconda.org and
``conda.anaconda.org``) is one channel: its credential is filed under both hosts. Every line we
print or log goes through ``redact``.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import tempfile
import urllib.parse
from pathlib import Path
from typing import Iterator, Mapping, Sequence

from lmsforge.errors import UsageError

AUTH_FILE_ENV = "RATTLER_AUTH_FILE"
ENV_TOKEN = "LMSFORGE_CHANNEL_TOKEN"
ENV_USER = "LMSFORGE_CHANNEL_USER"
ENV_PASSWORD = "LMSFORGE_CHANNEL_PASSWORD"
ENV_HOST = "LMSFORGE_CHANNEL_HOST"
BEARER, CONDA_TOKEN, BASIC, S3 = "BearerToken", "CondaToken", "BasicHTTP", "S3Credentials"
KINDS = (BEARER, CONDA_TOKEN, BASIC, S3)  # rattler's ``Authentication``
MIN_SECRET_LENGTH = 4  # shorter strings would blank out ordinary words in every message

Credential = dict  # one auth-file value, e.g. {"BearerToken": "…"}


# --- the sources --------------------------------------------------------------------------------


def auth_file_entries() -> dict[str, Credential]:
    """The user's auth file (``RATTLER_AUTH_FILE``), checked; {} when none is set."""
    path = os.environ.get(AUTH_FILE_ENV)
    if not path:
        return {}
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        raise UsageError(f"{AUTH_FILE_ENV} names an unreadable or invalid file; fix it (a JSON "
                         "map of host to credentials, see docs/channel.md) or unset it") from None
    if not isinstance(data, dict):
        raise UsageError(f"{AUTH_FILE_ENV}: the file must be a JSON map of host to credentials "
                         "(see docs/channel.md)")
    for host, entry in data.items():
        if not _valid_entry(entry):
            raise _bad_entry(host)
    return data


def _bad_entry(host: str) -> UsageError:
    return UsageError(f"{AUTH_FILE_ENV}: the entry for {host!r} must be one of "
                      f"{', '.join(KINDS)}, written as rattler writes it (see docs/channel.md)")


def _valid_entry(entry: object) -> bool:
    if not isinstance(entry, dict) or len(entry) != 1:
        return False
    [(kind, value)] = entry.items()
    if kind == BASIC:
        return isinstance(value, dict) and all(isinstance(value.get(k), str)
                                               for k in ("username", "password"))
    if kind == S3:
        return isinstance(value, dict) and \
            all(isinstance(value.get(k), str) for k in ("access_key_id", "secret_access_key")) \
            and isinstance(value.get("session_token"), (str, type(None)))
    if kind in KINDS:
        return isinstance(value, str)
    return isinstance(kind, str) and isinstance(value, (str, dict))  # judged when used: for_hosts


def env_credential(token_kind: str) -> Credential | None:
    """The environment shortcut as an auth-file value: a token of TOKEN_KIND, or user+password."""
    token = os.environ.get(ENV_TOKEN)
    if token:
        return {token_kind: token}
    user, password = os.environ.get(ENV_USER), os.environ.get(ENV_PASSWORD)
    if user and password:
        return {BASIC: {"username": user, "password": password}}
    if user or password:
        raise UsageError(f"set both {ENV_USER} and {ENV_PASSWORD}, or neither")
    return None


def env_host(default: str | None = None) -> str | None:
    """The one host the environment credentials belong to: ``LMSFORGE_CHANNEL_HOST``, else
    DEFAULT (the publish target; None for commands that read from several channels)."""
    named = os.environ.get(ENV_HOST, "").strip()
    if not named:
        return default
    if "://" in named or "/" in named or "@" in named or not _HOST.fullmatch(named):
        raise UsageError(f"{ENV_HOST} must be a host name such as conda.example.org (no scheme, "
                         "path or credentials)")
    return named.rsplit(":", 1)[0] if named.count(":") == 1 else named  # rattler keys by host


_HOST = re.compile(r"[A-Za-z0-9.\-\[\]:]+")


def entry_for(host: str, entries: Mapping[str, Credential]) -> Credential | None:
    """ENTRIES' value for HOST as rattler chooses it: the exact host, then ``*.`` globs of each
    parent domain (``*.example.org`` for ``conda.example.org``)."""
    if host in entries:
        return entries[host]
    domain = host
    while domain and not _is_ip(host):
        if f"*.{domain}" in entries:
            return entries[f"*.{domain}"]
        domain = domain.partition(".")[2]
    return None


def _is_ip(host: str) -> bool:
    return bool(re.fullmatch(r"[\d.]+|\[[0-9a-fA-F:.]+\]", host))


def for_hosts(hosts: Mapping[str, str], *, env_default_host: str | None = None,
              same_credentials: Mapping[str, Sequence[str]] | None = None
              ) -> dict[str, Credential]:
    """The credentials this command may send: HOSTS maps each HTTP host of its channels to the
    token kind its server takes; hosts without credentials are left out. SAME_CREDENTIALS maps a
    host to the other hosts of the same channel (the download host of a hosted service): the
    credential found for any of them (the environment's when it is bound to one of them) is
    filed under all of them, unless one has an entry of its own."""
    entries = auth_file_entries()
    bound = env_host(env_default_host)
    chosen: dict[str, Credential] = {}
    for host, token_kind in hosts.items():
        group = list(dict.fromkeys([host, *(same_credentials or {}).get(host, ())]))
        from_env = env_credential(token_kind) if bound in group else None
        shared = from_env or next(
            (found for found in (entry_for(h, entries) for h in group) if found), None)
        for member in group:
            credential = from_env or entry_for(member, entries) or shared
            if credential:
                if next(iter(credential)) not in KINDS:
                    raise _bad_entry(member)
                chosen[member] = credential
    if bound is None and _env_is_set() and hosts:
        raise UsageError(f"{ENV_TOKEN}/{ENV_USER} are set but {ENV_HOST} is not; set it to the "
                         "host they belong to (credentials are never sent to every channel)")
    return chosen


def _env_is_set() -> bool:
    return bool(os.environ.get(ENV_TOKEN) or os.environ.get(ENV_USER))


@contextlib.contextmanager
def auth_file_for(credentials: Mapping[str, Credential]) -> Iterator[Path]:
    """A private auth file (0600) holding exactly CREDENTIALS, named by ``RATTLER_AUTH_FILE`` for
    the duration, so rattler sees no other credential of ours; removed afterwards."""
    saved = os.environ.get(AUTH_FILE_ENV)
    with tempfile.TemporaryDirectory(prefix="lmsforge-auth-") as folder:
        path = Path(folder) / "auth.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as stream:
            json.dump(dict(credentials), stream)
        os.environ[AUTH_FILE_ENV] = str(path)
        try:
            yield path
        finally:
            if saved is None:
                os.environ.pop(AUTH_FILE_ENV, None)
            else:
                os.environ[AUTH_FILE_ENV] = saved


def secret_of(credential: Credential) -> str:
    """The token, the password, or the S3 secret key of one credential."""
    [(kind, value)] = credential.items()
    if kind == BASIC:
        return value["password"]
    if kind == S3:
        return value["secret_access_key"]
    return value if isinstance(value, str) else ""


def _secret_values(credential: Credential) -> list[str]:
    """Every string in CREDENTIAL that is or may be secret: all but a Basic user name (an S3
    key id and session token too, and every string of a kind we do not know)."""
    [(_, value)] = credential.items()
    if isinstance(value, str):
        return [value]
    return [v for k, v in value.items() if isinstance(v, str) and k != "username"] \
        if isinstance(value, dict) else []


# --- redaction ----------------------------------------------------------------------------------


def secrets() -> list[str]:
    """Every secret we know of, in the forms it can appear in: plain, URL-quoted, and the base64
    of ``user:password`` that a Basic header carries. Never raises (used on error paths)."""
    found: list[str] = []
    for name in (ENV_TOKEN, ENV_PASSWORD):
        if os.environ.get(name):
            found.append(os.environ[name])
    pairs = []
    if os.environ.get(ENV_USER) and os.environ.get(ENV_PASSWORD):
        pairs.append((os.environ[ENV_USER], os.environ[ENV_PASSWORD]))
    with contextlib.suppress(Exception):
        for entry in auth_file_entries().values():
            [(kind, value)] = entry.items()
            found += _secret_values(entry)
            if kind == BASIC:
                pairs.append((value["username"], value["password"]))
    for user, password in pairs:
        found.append(base64.b64encode(f"{user}:{password}".encode()).decode())
    variants = set()
    for secret in found:
        variants.update({secret, urllib.parse.quote(secret, safe=""),
                         urllib.parse.quote_plus(secret)})
    return sorted((s for s in variants if len(s) >= MIN_SECRET_LENGTH), key=len, reverse=True)


_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^\s/?#@]*(?::[^\s@]*)?@")
_URL_TOKEN = re.compile(r"/t/[^/\s'\"]+")
_HEADER = re.compile(r"(?i)\b((?:authorization|x-api-key)['\"]?\s*[:=]\s*['\"]?(?:(?:bearer|basic|token)\s+)?)"
                     r"[^\s'\",}]+")
_QUERY_SECRET = re.compile(r"(?i)([?&;](?:access_?token|token|api_?key|key|password|secret)=)"
                           r"[^&#\s'\"]+")


def redact(text: str) -> str:
    """TEXT with every credential we know of hidden, and every URL user:password, /t/<token>,
    token-like query value and Authorization / X-API-Key header value replaced by ***."""
    text = _URL_USERINFO.sub(r"\g<scheme>***@", text)
    text = _URL_TOKEN.sub("/t/***", text)
    text = _HEADER.sub(r"\1***", text)
    text = _QUERY_SECRET.sub(r"\1***", text)
    for secret in secrets():
        text = text.replace(secret, "***")
    return text
