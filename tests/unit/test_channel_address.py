"""What a ``--channel`` string names, and one-line refusals of malformed ones."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import pytest

from lmsforge.channel import address as ca
from lmsforge.errors import UsageError

TOKEN = "tok-5f1e9a7c2b"


@pytest.mark.parametrize("text, server, read_url, host, base, name, kind", [
    ("quetz://conda.example.org/lms", ca.QUETZ, "https://conda.example.org/get/lms",
     "conda.example.org", "https://conda.example.org/", "lms", "CondaToken"),
    ("quetz+http://127.0.0.1:8000/lms/", ca.QUETZ, "http://127.0.0.1:8000/get/lms",
     "127.0.0.1", "http://127.0.0.1:8000/", "lms", "CondaToken"),
    ("artifactory://art.example.org/artifactory/api/conda/lms", ca.ARTIFACTORY,
     "https://art.example.org/artifactory/api/conda/lms", "art.example.org",
     "https://art.example.org/artifactory/api/conda/", "lms", "BearerToken"),
    ("https://conda.example.org/lms", ca.ARTIFACTORY, "https://conda.example.org/lms",
     "conda.example.org", "https://conda.example.org/", "lms", "BearerToken"),
    ("https://prefix.dev/lms-forge", ca.PREFIX, "https://repo.prefix.dev/lms-forge",
     "prefix.dev", "https://prefix.dev/", "lms-forge", "BearerToken"),
    ("https://anaconda.org/lab/dev", ca.ANACONDA, "https://conda.anaconda.org/lab/label/dev",
     "anaconda.org", "https://anaconda.org/", "lab/dev", "CondaToken"),
])
def test_server_addresses(text, server, read_url, host, base, name, kind):
    address = ca.parse(text)
    assert (address.server, address.read_url, address.host, address.upload_base,
            address.upload_channel, address.token_kind) == (server, read_url, host, base, name,
                                                            kind)


@pytest.mark.parametrize("text, hosts", [
    ("https://prefix.dev/lms", ("prefix.dev", "repo.prefix.dev")),
    ("https://repo.prefix.dev/lms", ("prefix.dev", "repo.prefix.dev")),
    ("https://anaconda.org/lab", ("anaconda.org", "conda.anaconda.org")),
    ("https://anaconda.org/lab/dev", ("anaconda.org", "conda.anaconda.org")),
    ("quetz://conda.example.org/lms", ("conda.example.org",)),
    ("https://conda.example.org/lms", ("conda.example.org",)),
    ("s3://bucket/lms", ("bucket",)),
])
def test_credentials_are_filed_under_every_host_of_a_channel(text, hosts, tmp_path):
    """Uploads go to ``host``, downloads to the read URL's host; for the hosted services they
    differ, and rattler sends a credential only to the host it is filed under."""
    from lmsforge.channel import installer

    address = ca.parse(text)
    assert address.hosts == hosts
    assert urllib.parse.urlsplit(address.read_url).hostname == hosts[-1]
    assert ca.parse(tmp_path).hosts == ()
    assert set(installer.read_credentials([address])) == set()  # nothing set: nothing filed


def test_folders_and_file_uris(tmp_path):
    for text in (str(tmp_path / "ch"), (tmp_path / "ch").as_uri()):
        address = ca.parse(text)
        assert address.server == ca.FOLDER and address.folder == tmp_path / "ch"
        assert address.read_url == (tmp_path / "ch").as_uri()
    assert ca.parse(Path("rel")).folder == Path("rel").resolve()


def test_conda_style_token_url_installs_but_is_marked():
    address = ca.parse(f"https://conda.example.org/t/{TOKEN}/get/lms")
    assert address.has_url_credentials and TOKEN not in address.shown
    assert not ca.parse("https://conda.example.org/get/lms").has_url_credentials


@pytest.mark.parametrize("text, says", [
    ("", "empty channel"),
    ("   ", "empty channel"),
    (f"http://127.0.0.1:8080/t/{TOKEN}/lms ", "spaces or control characters"),
    (f"http://h/t/{TOKEN}/l\tms", "spaces or control characters"),
    (f"http://h:99999/t/{TOKEN}/lms", "invalid port"),
    (f"http://h:port/t/{TOKEN}/lms", "invalid port"),
    ("http:///lms", "no host"),
    (f"http://[::1/t/{TOKEN}/lms", "malformed host"),
    ("http://h:0/lms", "no host"),
    (f"ftp://h/t/{TOKEN}/lms", "unknown scheme"),
    ("quetz://h", "name the channel"),
    ("quetz://h/a/b", "name the channel"),
    ("quetz+ftp://h/lms", r"quetz\+http://"),
    (f"quetz://u:{TOKEN}@h/lms", "credentials do not belong in the URL"),
    (f"artifactory://{TOKEN}@h/api/lms", "credentials do not belong in the URL"),
])
def test_malformed_channels_are_one_line_without_the_token(text, says):
    with pytest.raises(UsageError, match=says) as info:
        ca.parse(text)
    assert TOKEN not in str(info.value) and "\n" not in str(info.value)
