"""A real conda client installs the published core package (issue 27 item 3).

conda 24.7.1 (vendored by conda-lock 4.0.3, from PyPI; see tests/real_conda.py) creates fresh
prefixes with ``pytorch-lms-core==2.6.0`` from the channel the real core builds were published
into (the session's ``core_package_builds``), as a folder channel and over HTTP, with that
channel only. conda's solver, not lmsforge, has to pick the build: the CUDA 13.0 one when
``CONDA_OVERRIDE_CUDA=13.0`` says a driver is there, the CPU one when ``CONDA_OVERRIDE_CUDA=""``
says there is none. The CPU install's own LMS tests then run from the prefix.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

from channel_server import ChannelServer
from conftest import real_test_cache
from real_conda import Conda, conda_venv, installed_records

SPEC = "pytorch-lms-core==2.6.0"
# what "the driver" says -> the build conda must choose
DRIVERS = {"13.0": r"cuda130_lms_h[0-9a-f]+_\d+", "": r"cpu_lms_h[0-9a-f]+_\d+"}

timings: dict[str, float] = {}


@pytest.fixture(scope="module")
def venv() -> Path:
    start = time.monotonic()
    path = conda_venv(real_test_cache())
    timings["conda venv (made or reused)"] = time.monotonic() - start
    return path


@pytest.fixture(scope="module")
def channel(core_package_builds: tuple[Path, dict]) -> Path:
    work, builds = core_package_builds
    assert builds["no-cuda"].returncode == 0, builds["no-cuda"].stderr
    assert builds["readme"].returncode == 0, builds["readme"].stderr
    root = work / "lms-channel"
    builds_there = sorted(p.name for p in (root / "linux-64").glob("pytorch-lms-core-2.6.0-*"))
    assert any("-cpu_lms_" in n for n in builds_there), builds_there
    assert any("-cuda130_lms_" in n for n in builds_there), builds_there
    return root


@pytest.fixture(scope="module")
def http_channel(channel: Path):
    with ChannelServer(channel, name="lms") as server:
        yield server


@pytest.fixture(scope="module", autouse=True)
def report_timings():
    yield
    print("\nreal conda timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in timings.items()))


def create(venv: Path, home: Path, url: str, cuda: str, *specs: str):
    conda = Conda(venv, home / "conda")
    prefix = home / "prefix"
    start = time.monotonic()
    result = conda("create", "--yes", "--prefix", str(prefix), "--override-channels",
                   "--channel", url, *(specs or (SPEC,)), cuda=cuda)
    timings[f"create {url.split(':')[0]} cuda={cuda!r}"] = time.monotonic() - start
    return result, prefix


def check_install(result: subprocess.CompletedProcess, prefix: Path, url: str,
                  cuda: str) -> dict:
    assert result.returncode == 0, result.stdout + result.stderr
    records = installed_records(prefix)
    # one channel, no dependencies: the core package is all conda installed
    assert sorted(records) == ["pytorch-lms-core"], sorted(records)
    record = records["pytorch-lms-core"]
    assert record["version"] == "2.6.0"
    assert re.fullmatch(DRIVERS[cuda], record["build"]), (cuda, record["build"])
    assert record["url"].startswith(url.rstrip("/") + "/linux-64/"), record["url"]
    assert (prefix / "bin" / "lms_core_tests").is_file()
    assert (prefix / "lib" / "libc10.so").is_file()
    return record


@pytest.mark.parametrize("cuda", ["13.0", ""], ids=["driver", "no-driver"])
def test_conda_installs_the_build_for_the_driver_from_a_folder_channel(venv, channel, cuda,
                                                                       tmp_path):
    url = channel.as_uri()
    result, prefix = create(venv, tmp_path, url, cuda)
    check_install(result, prefix, url, cuda)
    if cuda == "":
        run_installed_lms_tests(prefix)


@pytest.mark.parametrize("cuda", ["13.0", ""], ids=["driver", "no-driver"])
def test_conda_installs_the_build_for_the_driver_over_http(venv, http_channel, cuda, tmp_path):
    seen = len(http_channel.requests)
    result, prefix = create(venv, tmp_path, http_channel.url, cuda)
    record = check_install(result, prefix, http_channel.url, cuda)
    served = http_channel.requests[seen:]
    # the package came over HTTP from this server (a fresh package cache per install)
    assert ("GET", f"/lms/linux-64/{record['fn']}", 200) in served, served
    assert any(p.startswith("/lms/linux-64/") and "repodata" in p and s == 200
               for m, p, s in served if m == "GET"), served
    if cuda == "":
        run_installed_lms_tests(prefix)


def test_without_a_driver_conda_refuses_the_cuda_build(venv, channel, tmp_path):
    # the CUDA build's __cuda dependency is what keeps it off a host without a driver
    result, prefix = create(venv, tmp_path, channel.as_uri(), "",
                            "pytorch-lms-core==2.6.0=cuda130_lms_*")
    assert result.returncode != 0, result.stdout
    assert "__cuda" in result.stdout + result.stderr, result.stdout + result.stderr
    assert not (prefix / "conda-meta").exists()


def run_installed_lms_tests(prefix: Path) -> None:
    start = time.monotonic()
    run = subprocess.run([str(prefix / "bin" / "lms_core_tests")], capture_output=True,
                         text=True, timeout=600)
    timings.setdefault("lms_core_tests", time.monotonic() - start)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    passed = re.search(r"\[  PASSED  \] (\d+) tests?\.", run.stdout)
    assert passed and int(passed.group(1)) > 0, run.stdout[-3000:]
    assert "[  FAILED  ]" not in run.stdout, run.stdout[-3000:]


@pytest.mark.parametrize("cuda", ["13.0", ""], ids=["cuda-pins", "cpu-pins"])
def test_the_pin_file_next_to_the_channel_installs_exactly_what_was_built(venv, channel, cuda,
                                                                           tmp_path):
    """`lmsforge build` writes a pin file per variant beside the channel; conda installs from it
    exactly the build it names (issue 27 item 2: a cluster pins what was tested)."""
    kind = "cuda_version-13.0" if cuda else "cuda_version-None"
    [pin_file] = (channel / "pins" / "linux-64").glob(f"pytorch-v2.6.0-core-{kind}.txt")
    [pinned] = [line for line in pin_file.read_text().splitlines()
                if line and not line.startswith("#")]
    name, version, build = re.fullmatch(r"([\w-]+)==([\w.]+)=(\S+)", pinned).groups()
    conda = Conda(venv, tmp_path / "conda")
    prefix = tmp_path / "prefix"
    result = conda("create", "--yes", "--prefix", str(prefix), "--override-channels",
                   "--channel", channel.as_uri(), "--file", str(pin_file), cuda=cuda)
    assert result.returncode == 0, result.stdout + result.stderr
    record = installed_records(prefix)[name]
    assert (record["version"], record["build"]) == (version, build)
