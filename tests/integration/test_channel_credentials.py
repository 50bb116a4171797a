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
from lmsforge.channel import credentials, installer, publisher
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
