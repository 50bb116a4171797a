"""The private channel as clusters run it: a real quetz server with an API key.

Publish with ``lmsforge publish`` (py-rattler-build's quetz uploader), install with py-rattler
using the key, run what was installed; a wrong or missing key is a one-line exit 2 that never
shows the key. The slow test builds the real PyTorch core package and runs the README's cluster
example against this server exactly as written, apart from the server's URL.

The first run on a machine makes quetz's venv in the shared test cache (about 90 s, from PyPI);
each test module then starts one server (about 15 s).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO_ROOT, real_test_cache
from fixtures import lmsforge
from lmsforge.packaging import rattler as build
from lmsforge.channel import credentials, installer
from quetz_server import QuetzServer, quetz_venv
from test_channel import tiny_packages  # noqa: F401 (a fixture)

CHANNEL = "lms"


@pytest.fixture(scope="module")
def quetz(tmp_path_factory) -> QuetzServer:
    venv = quetz_venv(real_test_cache())
    with QuetzServer(venv, tmp_path_factory.mktemp("quetz"), "qk-" + secrets.token_hex(12)) as q:
        q.create_channel(CHANNEL, private=True)
        yield q


@pytest.fixture(autouse=True)
def no_inherited_credentials(monkeypatch):
    for name in (credentials.AUTH_FILE_ENV, credentials.ENV_TOKEN, credentials.ENV_USER,
                 credentials.ENV_PASSWORD, credentials.ENV_HOST):
        monkeypatch.delenv(name, raising=False)


def _address(quetz: QuetzServer) -> str:
    return f"quetz+http://{quetz.host}:{quetz.port}/{CHANNEL}"


def test_publish_install_and_run_through_quetz(quetz, tiny_packages, tmp_path, monkeypatch):
    package = tiny_packages["1.0.0"]
    monkeypatch.setenv(credentials.ENV_TOKEN, quetz.api_key)
    first = lmsforge("publish", "--channel", _address(quetz), str(package))
    assert first.exit_code == 0, first.output
    assert f"added linux-64/{package.name}" in first.output
    again = lmsforge("publish", "--channel", _address(quetz), str(package))
    assert again.exit_code == 0 and "already there (identical)" in again.output, again.output
    assert quetz.api_key not in first.output + again.output

    monkeypatch.setenv(credentials.ENV_HOST, quetz.host)
    installed = installer.install(["lmsforge-tiny"], [_address(quetz)], tmp_path / "prefix",
                                cache_dir=tmp_path / "cache")
    assert any(p.startswith("lmsforge-tiny=1.0.0=") for p in installed.packages)
    run = subprocess.run([tmp_path / "prefix" / "bin" / "lmsforge-tiny"], capture_output=True,
                         text=True, check=True)
    assert run.stdout.strip() == "lmsforge-tiny 1.0.0"

    # what a conda user types: the key in the URL, no other configuration
    monkeypatch.delenv(credentials.ENV_TOKEN)
    conda_style = f"{quetz.base}/t/{quetz.api_key}/get/{CHANNEL}"
    again_installed = installer.install(["lmsforge-tiny"], [conda_style], tmp_path / "prefix2",
                                      cache_dir=tmp_path / "cache2")
    assert any(p.startswith("lmsforge-tiny=1.0.0=") for p in again_installed.packages)
    assert quetz.api_key not in repr(again_installed)


def test_the_channel_is_private(quetz, tmp_path, tiny_packages, monkeypatch):
    monkeypatch.setenv(credentials.ENV_TOKEN, quetz.api_key)
    assert lmsforge("publish", "--channel", _address(quetz),
                    str(tiny_packages["1.0.0"])).exit_code == 0
    monkeypatch.delenv(credentials.ENV_TOKEN)
    with pytest.raises(Exception, match="refused the credentials|needs credentials"):
        installer.install(["lmsforge-tiny"], [_address(quetz)], tmp_path / "prefix",
                        cache_dir=tmp_path / "cache")


@pytest.mark.parametrize("key", ["qk-wrong-0123456789", None])
def test_a_wrong_or_missing_key_is_a_one_line_exit_2(quetz, tiny_packages, tmp_path,
                                                     monkeypatch, key):
    if key:
        monkeypatch.setenv(credentials.ENV_TOKEN, key)
        monkeypatch.setenv(credentials.ENV_HOST, quetz.host)
    runs = [lmsforge("publish", "--channel", _address(quetz), str(tiny_packages["1.1.0"])),
            lmsforge("test", "--framework", "pytorch", "--tag", "v2.6.0", "--channel",
                     _address(quetz), "--cpu")]
    for run in runs:
        errors = [line for line in run.output.splitlines() if line.startswith("lmsforge:")]
        assert run.exit_code == 2 and len(errors) == 1, run.output
        assert re.search(r"refused the (credentials|API key)|needs credentials", errors[0])
        assert quetz.api_key not in run.output and (key or "\0") not in run.output
    monkeypatch.setenv(credentials.ENV_TOKEN, quetz.api_key)  # the refused upload left nothing
    monkeypatch.setenv(credentials.ENV_HOST, quetz.host)
    listed = installer.available("lmsforge-tiny", [_address(quetz)], "linux-64")
    assert "1.1.0" not in {version for version, _ in listed}


def test_a_channel_that_does_not_exist_is_named(quetz, tiny_packages, monkeypatch):
    monkeypatch.setenv(credentials.ENV_TOKEN, quetz.api_key)
    run = lmsforge("publish", "--channel", f"quetz+http://{quetz.host}:{quetz.port}/nochan",
                   str(tiny_packages["1.0.0"]))
    assert run.exit_code == 2, run.output
    assert "does not exist" in run.output and quetz.api_key not in run.output


# --- the README's cluster example, with the real core package -----------------------------------

README_HOST = "conda.example.org"
README_KEY = "<your quetz API key>"


def readme_cluster_example() -> list[str]:
    """The command lines of the README's cluster example (the ```sh block after its heading)."""
    text = (REPO_ROOT / "README.md").read_text()
    section = text[text.index("**On the cluster.**"):]
    block = section[section.index("```sh") + len("```sh"):section.index("```", 6 +
                                                                      section.index("```sh"))]
    return [line.split("  #")[0].strip() for line in block.strip().splitlines()
            if line.strip() and not line.lstrip().startswith("#")]


@pytest.mark.slow
def test_readme_cluster_example_against_quetz(quetz, core_package_builds, tmp_path):
    # The CPU package the README's build command made (test_core_package builds it once per
    # session), in a ./lms-channel of its own as the README's publish line expects.
    work, builds = core_package_builds
    assert builds["no-cuda"].returncode == 0, builds["no-cuda"].stderr
    [built] = (work / "lms-channel" / "linux-64").glob("pytorch-lms-core-*cpu_lms_*.conda")
    assert built.stat().st_mode & 0o777 == 0o644  # servable as built
    (tmp_path / "lms-channel" / "linux-64").mkdir(parents=True)
    shutil.copy2(built, tmp_path / "lms-channel" / "linux-64" / built.name)

    lines = readme_cluster_example()
    lmsforge_lines = [line for line in lines if not line.startswith("conda ")]
    script = "\n".join(["set -euo pipefail", *lmsforge_lines])
    script = script.replace(f"quetz://{README_HOST}", f"quetz+http://{quetz.host}:{quetz.port}")
    script = script.replace(README_HOST, quetz.host).replace(README_KEY, quetz.api_key)
    env = {k: v for k, v in os.environ.items()
           if k not in (credentials.ENV_TOKEN, credentials.ENV_HOST, credentials.AUTH_FILE_ENV)}
    env["PATH"] = f"{Path(sys.executable).parent}:{env['PATH']}"
    run = subprocess.run(["bash", "-c", script], cwd=tmp_path, env=env, capture_output=True,
                         text=True, timeout=1800)
    print(run.stdout, run.stderr)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "added linux-64/pytorch-lms-core-2.6.0-cpu_lms_" in run.stdout
    assert re.search(r"lms_core_tests: [1-9]\d* passed, 0 failed", run.stdout)
    assert quetz.api_key not in run.stdout + run.stderr

    # the cluster user's line needs conda and the full `pytorch` package, neither of which this
    # host has: install what the core profile published from the same URL with rattler instead
    [conda_line] = [line for line in lines if line.startswith("conda ")]
    conda_line = conda_line.replace(README_KEY, quetz.api_key)  # the placeholder has spaces
    private = conda_line.split("-c ")[1].split()[0]
    url = private.replace(f"https://{README_HOST}", quetz.base)
    installed = installer.install([build.CORE_PACKAGE], [url], tmp_path / "cluster",
                                cache_dir=tmp_path / "cache")
    assert any(p.startswith("pytorch-lms-core=2.6.0=cpu_lms_") for p in installed.packages)
    assert (tmp_path / "cluster" / "lib" / "libc10.so").is_file()
