"""The real PyTorch `core` package: built by rattler-build from a real v2.6.0 tree, audited,
published to a folder channel and to an authenticated HTTP channel, installed from each into a
fresh prefix with py-rattler, and its LMS tests run from the installed package."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsforge import build, channel, recipes
from lmsforge.errors import UsageError
from test_channel import TOKEN, ChannelServer, write_auth_file


@pytest.fixture(scope="module")
def pytorch_tree(pytorch_v260_lms_tree: Path) -> Path:
    """The real PyTorch v2.6.0 tree with the LMS series applied (for the LMS tests to exist)."""
    return pytorch_v260_lms_tree


SERIES = recipes.SeriesIdentity(
    "pytorch", "v2.6.0", "a" * 64,
    {"kind": "archive", "archive": "pytorch_2.6.0+dfsg.orig.tar.xz",
     "sha256": "099a9601bc40d67656e75735c44abedb0fbe92d08817852ab7472eebb7e6ddff"})


def test_building_a_series_that_failed_verify_is_refused():
    with pytest.raises(UsageError, match="did not pass verify level apply"):
        build.check_verified("pytorch", "v2.6.0", "fail", "0020-hooks.patch does not apply")


def test_unsupported_variant_is_refused_before_anything_is_built(tmp_path):
    with pytest.raises(UsageError, match="CUDA 12.6 is not a valid variant"):
        recipes.render("pytorch", "v2.6.0", "core", "linux-ppc64le", tmp_path / "r",
                       series=SERIES, variants={"cuda_version": ["12.6"]})
    assert not (tmp_path / "r").exists()


def test_core_cuda_variant_needs_the_matching_host_toolkit(tmp_path):
    rendered = recipes.render("pytorch", "v2.6.0", "core", "linux-64", tmp_path / "r",
                              series=SERIES, variants={"cuda_version": ["12.4"]})
    found = build.host_cuda_version()
    if found and found[:2] == (12, 4):
        pytest.skip("this host has CUDA 12.4: the CUDA core variant would really build")
    with pytest.raises(UsageError, match="builds with the host CUDA toolkit"):
        build.build_variant(rendered, {"cuda_version": "12.4"}, tmp_path / "out")
    assert not list((tmp_path / "out").rglob("*.conda"))


@pytest.mark.slow
def test_core_package_built_published_installed_and_tested(pytorch_tree, tmp_path, monkeypatch,
                                                           capfd):
    rendered = recipes.render("pytorch", "v2.6.0", "core", "linux-64", tmp_path / "recipe",
                              series=SERIES, source_tree=pytorch_tree,
                              variants={"cuda_version": ["None"]})
    result = build.build_variant(rendered, {"cuda_version": "None"}, tmp_path / "out", jobs=2)
    [package] = result.packages
    print(f"\ncore package {package.path.name}: {package.size} bytes, "
          f"built in {result.seconds:.0f} s")
    assert package.name == "pytorch-lms-core" and package.build_string.startswith("cpu_lms_h")
    assert any("license files" in line for line in result.audit)
    assert any("all x86-64" in line for line in result.audit)
    identity = build.package_identity(package.path)
    assert identity["series_hash"] == "a" * 64
    assert identity["upstream_sha256"] == SERIES.upstream["sha256"]

    folder = tmp_path / "channel"
    channel.publish([package.path], folder)
    tested = build.test_installed_core([folder], tmp_path / "prefix-folder", gpu=False,
                                       cache_dir=tmp_path / "cache")
    _check_tests(tested)

    served = tmp_path / "served"
    with ChannelServer(served, token=TOKEN) as server:
        monkeypatch.setenv("RATTLER_AUTH_FILE", str(write_auth_file(
            tmp_path / "auth.json", server.url, {"BearerToken": TOKEN})))
        channel.publish([package.path], server.url)
        tested_http = build.test_installed_core([server.url], tmp_path / "prefix-http", gpu=False,
                                                cache_dir=tmp_path / "cache-http")
    _check_tests(tested_http)
    out, err = capfd.readouterr()
    assert TOKEN not in out + err
    print(out)


def _check_tests(tested: build.InstalledTestResult) -> None:
    assert tested.mode == "cpu" and tested.package.startswith("pytorch-lms-core=2.6.0=cpu_lms_")
    assert tested.identity["series_hash"] == "a" * 64
    [core] = tested.programs
    print(f"{tested.prefix.name}: {core.program}: {core.passed} passed, {core.failed} failed, "
          f"{core.skipped} skipped ({tested.why})")
    assert core.passed > 0 and core.failed == 0, core.failures
    assert (tested.prefix / "lib" / "libc10.so").is_file()
