"""Credentials go only to the host they belong to, and no output or log ever shows them.

Two real servers on two loopback hosts: the private channel on 127.0.0.1 (token required) and a
public mirror on 127.0.0.2 that logs every Authorization header it gets. Then the command line
with hostile channel strings, on every failure path, with the token in the environment and in
the auth file: stdout, stderr and ``last-error.log`` must never contain it.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from channel_server import ChannelServer
from fixtures import lmsforge
from lmsforge.channel import address as channel_address, credentials, installer, publisher
from test_channel import TOKEN, tiny_packages, write_auth_file  # noqa: F401 (a fixture)
from test_test_command import build_stand_in

OTHER_TOKEN = "tok-other-9e8d7c6b"  # in the auth file, for a host no channel here uses


@pytest.fixture(autouse=True)
def no_inherited_credentials(monkeypatch):
    for name in (credentials.AUTH_FILE_ENV, credentials.ENV_TOKEN, credentials.ENV_USER,
                 credentials.ENV_PASSWORD, credentials.ENV_HOST):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(scope="module")
def stand_in(tmp_path_factory) -> Path:
    return build_stand_in(tmp_path_factory.mktemp("stand-in"), "v2.6.0")


@pytest.fixture
def private_and_mirror(tmp_path, stand_in, tiny_packages):
    """The core stand-in on the private server, an unrelated package on the public mirror."""
    private, mirror = tmp_path / "private", tmp_path / "mirror"
    publisher.publish([stand_in], private)
    publisher.publish([tiny_packages["1.0.0"]], mirror)
    with ChannelServer(private, token=TOKEN, host="127.0.0.1") as a, \
            ChannelServer(mirror, host="127.0.0.2", name="mirror") as b:
        yield a, b


def _assert_token_stayed_home(private: ChannelServer, mirror: ChannelServer) -> None:
    assert f"Bearer {TOKEN}" in private.authorizations
    assert any("repodata" in path for _, path, _ in mirror.requests)  # it was read
    assert mirror.authorizations == []  # not the token, not any header at all
    assert TOKEN not in mirror.raw_log


def test_env_token_reaches_its_host_and_never_the_mirror(private_and_mirror, tmp_path,
                                                         monkeypatch):
    private, mirror = private_and_mirror
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
    monkeypatch.setenv(credentials.ENV_HOST, "127.0.0.1")
    result = lmsforge("test", "--framework", "pytorch", "--tag", "v2.6.0",
                      "--channel", private.url, "--channel", mirror.url,
                      "--prefix", str(tmp_path / "prefix"), "--cpu")
    assert result.exit_code == 0, result.output
    assert TOKEN not in result.output
    installed = installer.install(["pytorch-lms-core", "lmsforge-tiny"], [private.url, mirror.url],
                                tmp_path / "both", cache_dir=tmp_path / "cache")
    assert {p.split("=")[0] for p in installed.packages} == {"pytorch-lms-core", "lmsforge-tiny"}
    _assert_token_stayed_home(private, mirror)


def test_auth_file_token_reaches_its_host_and_never_the_mirror(private_and_mirror, tmp_path,
                                                               monkeypatch):
    private, mirror = private_and_mirror
    path = write_auth_file(tmp_path / "auth.json", private.url, {"BearerToken": TOKEN})
    entries = json.loads(path.read_text())
    entries["*.example.org"] = {"BearerToken": OTHER_TOKEN}
    path.write_text(json.dumps(entries))
    monkeypatch.setenv(credentials.AUTH_FILE_ENV, str(path))
    installed = installer.install(["pytorch-lms-core", "lmsforge-tiny"], [private.url, mirror.url],
                                tmp_path / "prefix", cache_dir=tmp_path / "cache")
    assert len(installed.packages) == 2
    _assert_token_stayed_home(private, mirror)
    assert OTHER_TOKEN not in private.raw_log + mirror.raw_log


def test_env_token_without_its_host_is_refused_and_nothing_is_sent(private_and_mirror, tmp_path,
                                                                   monkeypatch):
    private, mirror = private_and_mirror
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
    result = lmsforge("test", "--framework", "pytorch", "--tag", "v2.6.0",
                      "--channel", private.url, "--channel", mirror.url, "--cpu")
    assert result.exit_code == 2, result.output
    assert "LMSFORGE_CHANNEL_HOST is not" in result.output and TOKEN not in result.output
    assert private.requests == [] and mirror.requests == []


def test_publish_binds_the_env_token_to_its_target_only(private_and_mirror, tiny_packages,
                                                        monkeypatch):
    private, mirror = private_and_mirror
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
    result = lmsforge("publish", "--channel", private.url, str(tiny_packages["1.1.0"]))
    assert result.exit_code == 0, result.output
    assert "added linux-64/" in result.output and TOKEN not in result.output
    assert mirror.requests == []


# --- hostile channel strings on the command line -------------------------------------------------

HOSTILE = [
    f"http://127.0.0.1:9/t/{TOKEN}/lms ",  # trailing space (the leak in the evidence, row 48)
    f"http://127.0.0.1:9/t/{TOKEN}/l ms",
    f"http://127.0.0.1:99999/t/{TOKEN}/lms",
    f"http://127.0.0.1:port/t/{TOKEN}/lms",
    f"http://forge:{TOKEN}@127.0.0.1:9/lms",
    f"http://127.0.0.1:9/lms?token={TOKEN}",
    f"http://[::1/t/{TOKEN}/lms",
    f"quetz+http://forge:{TOKEN}@127.0.0.1:9/lms",
    f"quetz://127.0.0.1:9/t/{TOKEN}/lms",
    f"ftp://127.0.0.1/t/{TOKEN}/lms",
    f"http://127.0.0.1:9/t/{TOKEN}/get/lms",  # well-formed, nothing listens: cannot reach
    f"s3://bucket-{TOKEN}/lms",
]


@pytest.mark.parametrize("url", HOSTILE)
def test_no_failure_path_shows_the_token(url, tmp_path, monkeypatch, tiny_packages,
                                         isolated_env):
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
    monkeypatch.setenv(credentials.ENV_HOST, "127.0.0.1")
    monkeypatch.setenv(credentials.AUTH_FILE_ENV, str(write_auth_file(
        tmp_path / "auth.json", "http://elsewhere.example.org", {"BearerToken": OTHER_TOKEN})))
    runs = [lmsforge("publish", "--channel", url, str(tiny_packages["1.0.0"])),
            lmsforge("test", "--framework", "pytorch", "--tag", "v2.6.0", "--channel", url,
                     "--cpu")]
    log = isolated_env / "logs" / "last-error.log"
    for run in runs:
        assert run.exit_code in (1, 2), run.output
        assert "internal error" not in run.output and "Traceback" not in run.output
        errors = [line for line in run.output.splitlines() if line.startswith("lmsforge:")]
        assert len(errors) == 1 and errors[0].startswith("lmsforge: error: "), run.output
        assert TOKEN not in run.output and OTHER_TOKEN not in run.output
    assert not log.exists() or TOKEN not in log.read_text()


def test_internal_error_line_and_log_are_redacted(tmp_path, monkeypatch, tiny_packages,
                                                  isolated_env):
    """A bug whose message carries a URL with a token: the handler's line and log hide it."""
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)

    def broken_publish(packages, target):
        raise ValueError(f"boom at http://h/t/{TOKEN}/lms and Bearer {TOKEN}")

    monkeypatch.setattr(publisher, "publish", broken_publish)
    result = lmsforge("publish", "--channel", "http://h/lms", str(tiny_packages["1.0.0"]))
    log = isolated_env / "logs" / "last-error.log"
    assert result.exit_code == 1 and "internal error" in result.output
    assert TOKEN not in result.output
    assert "boom at http://h/t/***/lms" in log.read_text() and TOKEN not in log.read_text()


# --- the hosted services: the token goes to the download host too, and nowhere else -------------

PREFIX_READ, ANACONDA_READ = "repo.prefix.dev", "conda.anaconda.org"


@pytest.fixture
def download_host(tmp_path, tiny_packages, monkeypatch):
    """One loopback server standing in, as an HTTP proxy, for both services' download hosts
    (rattler reads through ``HTTP_PROXY``; the read roots are switched to plain HTTP, the host
    names stay the real ones, which is all rattler keys credentials by). It yields a function
    that starts the server with the token required on one of the two hosts."""
    chan = tmp_path / "chan"
    publisher.publish([tiny_packages["1.0.0"]], chan)
    monkeypatch.setattr(channel_address, "PREFIX_READ_ROOT", f"http://{PREFIX_READ}")
    monkeypatch.setattr(channel_address, "ANACONDA_READ_ROOT", f"http://{ANACONDA_READ}")
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "HTTPS_PROXY",
                 "https_proxy"):
        monkeypatch.delenv(name, raising=False)
    servers = []

    def start(private_host: str, **token) -> ChannelServer:
        server = ChannelServer(chan, name="lms", private_host=private_host, **token).__enter__()
        servers.append(server)
        monkeypatch.setenv("HTTP_PROXY", server.proxy)
        monkeypatch.setenv("http_proxy", server.proxy)
        return server

    yield start
    for server in servers:
        server.__exit__(None, None, None)


def _by_host(server: ChannelServer) -> dict[str, list[dict]]:
    hosts: dict[str, list[dict]] = {}
    for entry in server.entries:
        hosts.setdefault(entry["host"], []).append(entry)
    return hosts


PREFIX_WAYS = {  # how a user gives a prefix.dev token: every way must reach repo.prefix.dev
    "auth file, upload host": ({"prefix.dev": {"BearerToken": TOKEN}}, None),
    "auth file, download host": ({PREFIX_READ: {"BearerToken": TOKEN}}, None),
    "environment, upload host": ({}, "prefix.dev"),
    "environment, download host": ({}, PREFIX_READ),
}


@pytest.mark.parametrize("way", PREFIX_WAYS)
@pytest.mark.parametrize("form", ["https://prefix.dev/lms", "https://repo.prefix.dev/lms"])
def test_prefix_dev_token_reaches_the_download_host_and_nothing_else(download_host, tmp_path,
                                                                    monkeypatch, tiny_packages,
                                                                    way, form):
    """Ecosystem review §1.7: the token was filed under prefix.dev only; rattler does not send
    it to repo.prefix.dev, so a private channel could not be read (nor published to: publish
    reads the index first). Beside it, an anaconda.org channel must get nothing."""
    entries, env_host = PREFIX_WAYS[way]
    if entries:
        path = tmp_path / "auth.json"
        path.write_text(json.dumps({**entries, "*.example.org": {"BearerToken": OTHER_TOKEN}}))
        monkeypatch.setenv(credentials.AUTH_FILE_ENV, str(path))
    else:
        monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
        monkeypatch.setenv(credentials.ENV_HOST, env_host)
    server = download_host(PREFIX_READ, token=TOKEN)

    found = installer.available("lmsforge-tiny", [form, "https://anaconda.org/lms"], "linux-64",
                                cache_dir=tmp_path / "cache")
    assert ("1.0.0", tiny_packages["1.0.0"].name.split("-")[-1][:-len(".conda")]) in found
    published = publisher.publish([tiny_packages["1.0.0"]], form)  # reads the index first
    assert published.unchanged and not published.added

    hosts = _by_host(server)
    assert set(hosts) == {PREFIX_READ, ANACONDA_READ}, hosts.keys()
    assert all(e["authorization"] == f"Bearer {TOKEN}" for e in hosts[PREFIX_READ])
    assert all(e["status"] != 401 for e in hosts[PREFIX_READ])  # 404s: files a folder lacks
    assert any(e["status"] == 200 and "repodata" in e["path"] for e in hosts[PREFIX_READ])
    assert all(e["authorization"] is None and e["conda_token"] is None
               for e in hosts[ANACONDA_READ])
    assert OTHER_TOKEN not in server.raw_log


@pytest.mark.parametrize("form", ["https://anaconda.org/lms", "https://anaconda.org/lms/dev"])
@pytest.mark.parametrize("key", ["anaconda.org", ANACONDA_READ])
def test_anaconda_org_token_reaches_the_download_host_and_nothing_else(download_host, tmp_path,
                                                                      monkeypatch, form, key):
    """The same for anaconda.org: a CondaToken keyed by anaconda.org (where rattler-build's
    uploader looks) must also be filed under conda.anaconda.org, where rattler puts it into the
    path (/t/<token>/); the prefix.dev channel read beside it gets nothing."""
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({key: {"CondaToken": TOKEN}}))
    monkeypatch.setenv(credentials.AUTH_FILE_ENV, str(path))
    server = download_host(ANACONDA_READ, conda_token=TOKEN)
    channel = "https://anaconda.org/lms"  # the server holds the channel under /lms/ (no label)

    found = installer.available("lmsforge-tiny", [channel, "https://prefix.dev/lms"], "linux-64",
                                cache_dir=tmp_path / "cache")
    assert found

    hosts = _by_host(server)
    assert set(hosts) == {PREFIX_READ, ANACONDA_READ}, hosts.keys()
    assert all(e["conda_token"] == TOKEN and e["status"] != 401 for e in hosts[ANACONDA_READ])
    assert any(e["status"] == 200 and "repodata" in e["path"] for e in hosts[ANACONDA_READ])
    assert all(e["authorization"] is None and e["conda_token"] is None
               for e in hosts[PREFIX_READ])
    assert installer.read_credentials([channel_address.parse(form)]) == {
        "anaconda.org": {"CondaToken": TOKEN}, ANACONDA_READ: {"CondaToken": TOKEN}}


S3_SECRET = "s3-secret-4d1f8a2b"


def test_an_s3_entry_in_the_auth_file_does_not_lock_lmsforge_out(private_and_mirror, tmp_path,
                                                                 monkeypatch):
    """Ecosystem review §1.7: one auth file shared with pixi/rattler-build for an S3 channel
    (rattler's ``S3Credentials`` kind) made every command exit 2. It must pass through: the
    command runs, the private server gets its token, and the S3 secret is never shown."""
    private, mirror = private_and_mirror
    path = write_auth_file(tmp_path / "auth.json", private.url, {"BearerToken": TOKEN})
    entries = json.loads(path.read_text())
    entries["s3-bucket.example.org"] = {"S3Credentials": {
        "access_key_id": "AKIDEXAMPLE", "secret_access_key": S3_SECRET, "session_token": None}}
    path.write_text(json.dumps(entries))
    monkeypatch.setenv(credentials.AUTH_FILE_ENV, str(path))
    result = lmsforge("test", "--framework", "pytorch", "--tag", "v2.6.0",
                      "--channel", private.url, "--channel", mirror.url,
                      "--prefix", str(tmp_path / "prefix"), "--cpu")
    assert result.exit_code == 0, result.output
    assert S3_SECRET not in result.output and TOKEN not in result.output
    _assert_token_stayed_home(private, mirror)
    assert S3_SECRET not in private.raw_log + mirror.raw_log
    assert credentials.redact(f"x {S3_SECRET} y") == "x *** y"
