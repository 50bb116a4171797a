"""Credentials: which host gets what, and that no form of a secret survives ``redact``."""

from __future__ import annotations

import base64
import json
import os
import urllib.parse
from pathlib import Path

import pytest

from lmsforge.channel import credentials
from lmsforge.errors import UsageError

TOKEN = "tok-5f1e9a7c2b"
PASSWORD = "pw/8d3c+61e0 x"  # a slash, a plus and a space: the characters URLs mangle


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in (credentials.AUTH_FILE_ENV, credentials.ENV_TOKEN, credentials.ENV_USER,
                 credentials.ENV_PASSWORD, credentials.ENV_HOST):
        monkeypatch.delenv(name, raising=False)


def _auth_file(tmp_path: Path, monkeypatch, entries: dict) -> Path:
    path = tmp_path / "auth.json"
    path.write_text(json.dumps(entries))
    monkeypatch.setenv(credentials.AUTH_FILE_ENV, str(path))
    return path


def test_env_token_belongs_to_the_named_host_only(monkeypatch):
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
    monkeypatch.setenv(credentials.ENV_HOST, "conda.example.org")
    chosen = credentials.for_hosts({"conda.example.org": "BearerToken",
                                    "conda.anaconda.org": "BearerToken"})
    assert chosen == {"conda.example.org": {"BearerToken": TOKEN}}


def test_env_token_takes_the_kind_the_server_needs(monkeypatch):
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
    chosen = credentials.for_hosts({"quetz.example.org": "CondaToken"},
                                   env_default_host="quetz.example.org")
    assert chosen == {"quetz.example.org": {"CondaToken": TOKEN}}


def test_env_token_without_a_host_is_refused_when_reading(monkeypatch):
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
    with pytest.raises(UsageError, match="LMSFORGE_CHANNEL_HOST is not") as info:
        credentials.for_hosts({"a.example.org": "BearerToken", "b.example.org": "BearerToken"})
    assert TOKEN not in str(info.value)
    assert credentials.for_hosts({}) == {}  # folders only: nothing to refuse


def test_env_host_must_be_a_bare_host(monkeypatch):
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
    for bad in ("https://conda.example.org", "conda.example.org/lms", f"u:{TOKEN}@h"):
        monkeypatch.setenv(credentials.ENV_HOST, bad)
        with pytest.raises(UsageError, match="must be a host name") as info:
            credentials.for_hosts({"conda.example.org": "BearerToken"})
        assert TOKEN not in str(info.value)
    monkeypatch.setenv(credentials.ENV_HOST, "conda.example.org:8443")  # rattler keys by host
    assert credentials.for_hosts({"conda.example.org": "BearerToken"}) == {
        "conda.example.org": {"BearerToken": TOKEN}}


def test_auth_file_entries_match_like_rattler(tmp_path, monkeypatch):
    _auth_file(tmp_path, monkeypatch, {"*.example.org": {"BearerToken": "glob"},
                                       "exact.example.org": {"CondaToken": "exact"},
                                       "10.0.0.1": {"BearerToken": "ip"}})
    chosen = credentials.for_hosts({"exact.example.org": "BearerToken",
                                    "deep.conda.example.org": "BearerToken",
                                    "example.com": "BearerToken", "10.0.0.1": "BearerToken",
                                    "0.0.1": "BearerToken"})
    assert chosen == {"exact.example.org": {"CondaToken": "exact"},
                      "deep.conda.example.org": {"BearerToken": "glob"},
                      "10.0.0.1": {"BearerToken": "ip"}}


def test_env_shortcut_wins_over_the_auth_file_for_its_host(tmp_path, monkeypatch):
    _auth_file(tmp_path, monkeypatch, {"h.example.org": {"BearerToken": "from-file"},
                                       "other.example.org": {"BearerToken": "other"}})
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
    monkeypatch.setenv(credentials.ENV_HOST, "h.example.org")
    assert credentials.for_hosts({"h.example.org": "BearerToken",
                                  "other.example.org": "BearerToken"}) == {
        "h.example.org": {"BearerToken": TOKEN}, "other.example.org": {"BearerToken": "other"}}


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"h": {"Password": "x"}}',
                                     '{"h": {"BasicHTTP": {"username": "u"}}}',
                                     '{"h": {"BearerToken": 5}}',
                                     '{"h": {"S3Credentials": {"access_key_id": "x"}}}',
                                     '{"h": {"S3Credentials": "x"}}',
                                     '{"h": {"BearerToken": "x", "CondaToken": "x"}}'])
def test_malformed_auth_file_is_one_line_without_secrets(tmp_path, monkeypatch, content):
    path = tmp_path / "auth.json"
    path.write_text(content.replace("x", TOKEN))
    monkeypatch.setenv(credentials.AUTH_FILE_ENV, str(path))
    with pytest.raises(UsageError) as info:
        credentials.for_hosts({"h": "BearerToken"})
    assert "\n" not in str(info.value) and TOKEN not in str(info.value)


def test_private_auth_file_holds_only_what_was_chosen_and_goes_away(tmp_path, monkeypatch):
    user_file = _auth_file(tmp_path, monkeypatch, {"a.example.org": {"BearerToken": "a"},
                                                   "b.example.org": {"BearerToken": "b"}})
    chosen = credentials.for_hosts({"a.example.org": "BearerToken"})
    with credentials.auth_file_for(chosen) as path:
        assert os.environ[credentials.AUTH_FILE_ENV] == str(path)
        assert path.stat().st_mode & 0o777 == 0o600
        assert json.loads(path.read_text()) == {"a.example.org": {"BearerToken": "a"}}
    assert not path.exists()
    assert os.environ[credentials.AUTH_FILE_ENV] == str(user_file)


S3_ENTRY = {"S3Credentials": {"access_key_id": "AKID-9c1d", "secret_access_key": "s3-sec-7a2b",
                                "session_token": "s3-sess-5e4f"}}
FUTURE_ENTRY = {"SomeNewerKind": {"refresh_token": "future-tok-3c8d"}}


def test_every_kind_of_rattler_entry_passes_through(tmp_path, monkeypatch):
    """rattler's auth format has four kinds; none may make a command fail, and each reaches the
    private file of a command whose channel is on its host, unchanged. The file is shared with
    pixi and rattler-build: an entry of a kind we cannot hand to rattler fails only a command
    that would use it, and its secrets are hidden all the same."""
    _auth_file(tmp_path, monkeypatch, {"my-bucket": S3_ENTRY,
                                       "quetz.example.org": {"CondaToken": TOKEN},
                                       "new.example.org": FUTURE_ENTRY,
                                       "unused-bucket": {"S3Credentials": {
                                           "access_key_id": "a", "secret_access_key": "b-unused",
                                           "session_token": None}}})
    chosen = credentials.for_hosts({"quetz.example.org": "CondaToken",
                                    "my-bucket": "BearerToken"})
    assert chosen == {"quetz.example.org": {"CondaToken": TOKEN}, "my-bucket": S3_ENTRY}
    with credentials.auth_file_for(chosen) as path:
        assert json.loads(path.read_text()) == chosen
    # a kind this rattler cannot read: refused in one line only where it would be handed over
    with pytest.raises(UsageError, match="'new.example.org' must be one of .*S3Credentials"):
        credentials.for_hosts({"new.example.org": "BearerToken"})
    shown = credentials.redact("s3-sec-7a2b s3-sess-5e4f future-tok-3c8d b-unused AKID-9c1d")
    assert shown == "*** *** *** *** ***"


def test_one_channel_on_two_hosts_gets_its_credential_on_both(tmp_path, monkeypatch):
    """A hosted service's upload and download hosts share the credential found for either, or a
    glob of either; a host with an entry of its own keeps it; other hosts get nothing."""
    same = {"prefix.dev": ["repo.prefix.dev"]}
    hosts = {"prefix.dev": "BearerToken", "conda.example.org": "BearerToken"}
    for key in ("prefix.dev", "repo.prefix.dev", "*.prefix.dev"):
        _auth_file(tmp_path, monkeypatch, {key: {"BearerToken": TOKEN}})
        assert credentials.for_hosts(hosts, same_credentials=same) == {
            "prefix.dev": {"BearerToken": TOKEN}, "repo.prefix.dev": {"BearerToken": TOKEN}}, key
    _auth_file(tmp_path, monkeypatch, {"prefix.dev": {"BearerToken": "up"},
                                       "repo.prefix.dev": {"BearerToken": "down"}})
    assert credentials.for_hosts(hosts, same_credentials=same) == {
        "prefix.dev": {"BearerToken": "up"}, "repo.prefix.dev": {"BearerToken": "down"}}
    monkeypatch.delenv(credentials.AUTH_FILE_ENV)
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
    for bound in ("prefix.dev", "repo.prefix.dev"):
        monkeypatch.setenv(credentials.ENV_HOST, bound)
        assert credentials.for_hosts(hosts, same_credentials=same) == {
            "prefix.dev": {"BearerToken": TOKEN}, "repo.prefix.dev": {"BearerToken": TOKEN}}


# --- redaction ----------------------------------------------------------------------------------

HOSTILE_TEXTS = [
    f"http://127.0.0.1:8080/t/{TOKEN}/lms /linux-64/repodata.json",
    f"InvalidURL('URL can\\'t contain control characters. \\'/t/{TOKEN}/lms /linux-64/x\\'')",
    f"https://forge:{TOKEN}@conda.example.org/lms",
    f"https://{TOKEN}@conda.example.org/lms",
    f"https://conda.example.org/lms?token={TOKEN}&x=1",
    f"https://conda.example.org/lms?api_key={TOKEN}",
    f"quetz+http://h:99999/t/{TOKEN}/get/lms",
    f"headers={{'Authorization': 'Bearer {TOKEN}', 'X-API-Key': '{TOKEN}'}}",
    f"Authorization: Basic {base64.b64encode(f'forge:{PASSWORD}'.encode()).decode()}",
    f"x-api-key={TOKEN}",
    f"password is {urllib.parse.quote(PASSWORD, safe='')} (quoted)",
    f"password is {urllib.parse.quote_plus(PASSWORD)} (form-quoted)",
    f"the token {TOKEN} in prose, and the password {PASSWORD} too",
    f"{base64.b64encode(f'forge:{PASSWORD}'.encode()).decode()} alone",
]


@pytest.mark.parametrize("text", HOSTILE_TEXTS)
def test_redact_leaves_no_form_of_a_secret(text, monkeypatch):
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
    monkeypatch.setenv(credentials.ENV_USER, "forge")
    monkeypatch.setenv(credentials.ENV_PASSWORD, PASSWORD)
    shown = credentials.redact(text)
    for secret in (TOKEN, PASSWORD, urllib.parse.quote(PASSWORD, safe=""),
                   base64.b64encode(f"forge:{PASSWORD}".encode()).decode()):
        assert secret not in shown, shown
    assert "***" in shown


def test_redact_hides_unknown_secrets_by_their_place(monkeypatch):
    shown = credentials.redact("GET https://u:unknown-pw@h/t/unknown-tok/x?token=unknown-q "
                               "Authorization: Bearer unknown-bearer")
    for secret in ("unknown-pw", "unknown-tok", "unknown-q", "unknown-bearer"):
        assert secret not in shown
    assert "https://***@h/t/***/x?token=***" in shown


def test_redact_hides_auth_file_secrets(tmp_path, monkeypatch):
    _auth_file(tmp_path, monkeypatch, {"h": {"BasicHTTP": {"username": "u", "password": "pw-f1"}},
                                       "q": {"CondaToken": "ct-f2"}})
    assert credentials.redact("pw-f1 and ct-f2 and u") == "*** and *** and u"


def test_redact_never_raises_on_a_broken_auth_file(tmp_path, monkeypatch):
    path = tmp_path / "auth.json"
    path.write_text("{broken")
    monkeypatch.setenv(credentials.AUTH_FILE_ENV, str(path))
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
    assert credentials.redact(f"x {TOKEN}") == "x ***"
