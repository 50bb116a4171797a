"""Installing from private conda channels with py-rattler's solver and installer.

Only the channels given are read, never a default one. Credentials come from ``credentials``:
each host gets only its own, and every message goes through ``redact``.
"""

from __future__ import annotations

import asyncio
import re
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Sequence

from lmsforge.channel import address as channel_address, credentials
from lmsforge.channel.address import ChannelAddress
from lmsforge.channel.credentials import redact
from lmsforge.channel.package import InstallResult
from lmsforge.errors import CheckFailed, LmsforgeError, UsageError
from lmsforge.options import CHANNEL_TIMEOUT_ENV, channel_timeout_s


def _gateway(cache_dir: Path | None, **config: object):
    import rattler
    from rattler.networking import AuthenticationMiddleware, Client

    client = Client(middlewares=[AuthenticationMiddleware()])
    default = rattler.SourceConfig(**config) if config else None  # type: ignore[arg-type]
    return rattler.Gateway(cache_dir=cache_dir, default_config=default, client=client), client


def addresses_for(channels: Sequence[str | Path]) -> list[ChannelAddress]:
    """The channels to read from, parsed and checked (a folder must already be a channel)."""
    if not channels:
        raise UsageError("no channel given; pass the channel to install from")
    addresses = [channel_address.parse(c) for c in channels]
    for address in addresses:
        if address.folder and not (address.folder / "noarch" / "repodata.json").is_file():
            raise UsageError(f"channel {address.folder} is not a conda channel "
                             "(no noarch/repodata.json); publish to it first")
    return addresses


def check_answering(addresses: Sequence[ChannelAddress]) -> None:
    """Fail in one line when a server channel does not answer within the channel timeout.

    rattler's client has no connect or read timeout of its own (only a limit on a whole request,
    which a large download would hit), so a server that accepts and never answers would hang the
    command for good. Each HTTP(S) channel is asked for its noarch index first, without
    credentials, with a connect and a read timeout: any answer at all (401, 404 included) is
    enough; failures other than a timeout are left for rattler to report in its own words."""
    timeout = channel_timeout_s()
    for address in addresses:
        url = address.read_url.rstrip("/")
        if address.folder is not None or not url.startswith(("http://", "https://")):
            continue
        request = urllib.request.Request(f"{url}/noarch/repodata.json",
                                         headers={"User-Agent": "lmsforge"})
        try:
            with urllib.request.urlopen(request, timeout=timeout):
                pass
        except urllib.error.HTTPError:
            pass  # an answer
        except (TimeoutError, socket.timeout) as exc:
            raise _silent(address, timeout) from exc
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, (TimeoutError, socket.timeout)):
                raise _silent(address, timeout) from None
        except (OSError, ValueError):
            pass  # refused, TLS, a reset: rattler says it in its own words


def _silent(address: ChannelAddress, timeout: float) -> LmsforgeError:
    return LmsforgeError(f"channel {address.shown} did not answer in {timeout:g} s; check the "
                         "URL, the server and any proxy on the way (or set "
                         f"{CHANNEL_TIMEOUT_ENV} to wait longer)")


def read_credentials(addresses: Sequence[ChannelAddress]) -> dict[str, credentials.Credential]:
    """What reading ADDRESSES may send: each server host's own credentials, nothing else."""
    servers = [a for a in addresses if a.folder is None and a.host]
    return credentials.for_hosts({a.host: a.token_kind for a in servers},
                                 same_credentials={a.host: a.hosts[1:] for a in servers})


def available(name: str, channels: Sequence[str | Path], platform: str,
              cache_dir: Path | None = None) -> list[tuple[str, str]]:
    """(version, build) of every NAME record the CHANNELS list for PLATFORM and noarch."""
    import rattler

    addresses = addresses_for(channels)
    creds = read_credentials(addresses)  # refused before any request
    with credentials.auth_file_for(creds):
        check_answering(addresses)
        gateway, _ = _gateway(cache_dir, cache_action="no-cache")
        try:
            result = asyncio.run(gateway.query([rattler.Channel(a.read_url) for a in addresses],
                                               [platform, "noarch"], [name], recursive=False))
        except Exception as exc:
            raise _read_error(exc, addresses, [name], set(creds)) from None
    return sorted({(str(r.version), str(r.build)) for records in result for r in records})


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
    addresses = addresses_for(channels)
    platform = platform or str(rattler.Subdir.current())
    virtuals = list(rattler.VirtualPackage.detect())
    for item in virtual_packages:
        name, _, version = item.partition("=")
        virtuals.append(rattler.GenericVirtualPackage(rattler.PackageName(name),
                                                      rattler.Version(version or "0"),
                                                      rattler.BuildString("0")))
    creds = read_credentials(addresses)  # refused before any request
    with credentials.auth_file_for(creds):
        check_answering(addresses)
        gateway, client = _gateway(cache_dir)
        try:
            records = asyncio.run(rattler.solve(
                sources=[rattler.Channel(a.read_url) for a in addresses], specs=list(specs),
                gateway=gateway, platforms=[platform, "noarch"], virtual_packages=virtuals))
        except Exception as exc:
            raise _read_error(exc, addresses, specs, set(creds)) from None
        try:
            asyncio.run(rattler.install(records, target_prefix=prefix, cache_dir=cache_dir,
                                        platform=rattler.Subdir(platform), show_progress=False,
                                        client=client))
        except Exception as exc:
            raise LmsforgeError(f"installing into {prefix} failed: {redact(_first_line(exc))}; "
                                "see the channel and the prefix") from None
    names = tuple(sorted(f"{r.name.normalized}={r.version}={r.build}" for r in records))
    return InstallResult(prefix, tuple(a.shown for a in addresses), platform, names,
                         time.monotonic() - start)


def _first_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:300] if text else type(exc).__name__


def _read_error(exc: Exception, addresses: Sequence[ChannelAddress],
                specs: Sequence[str], with_credentials: set[str] | None = None) -> LmsforgeError:
    """One line for a failed solve or query; names the channel at fault where rattler says."""
    text = redact(_first_line(exc))
    at_fault = [a for a in addresses if a.host and a.host in text] or list(addresses)
    shown = ", ".join(a.shown for a in at_fault)
    if re.search(r"\b(401|403)\b|nauthori[sz]ed|orbidden", text):
        hosts = ", ".join(sorted({a.host for a in at_fault if a.host}))
        if with_credentials is not None and not with_credentials & {a.host for a in at_fault}:
            return UsageError(f"channel {shown} needs credentials and lmsforge has none for "
                              f"{hosts}; add an entry to {credentials.AUTH_FILE_ENV}, or set "
                              f"{credentials.ENV_TOKEN} with {credentials.ENV_HOST}")
        return UsageError(f"channel {shown} refused the credentials; check the entry for "
                          f"{hosts} in {credentials.AUTH_FILE_ENV}, or {credentials.ENV_TOKEN} "
                          f"with {credentials.ENV_HOST}")
    if re.search(r"(?i)error sending request|connect|dns|resolve|timed? ?out|unreachable|refused",
                 text):
        return LmsforgeError(f"cannot reach channel {shown} ({text}); check the URL and the "
                             "network")
    if re.search(r"(?i)404|not found|could not find subdir", text) and \
            "cannot solve" not in text.lower():
        return UsageError(f"channel {shown} has no index ({text}); check the URL")
    return CheckFailed(f"cannot install {' '.join(specs)} from {shown}: {text}")
