"""`lmsforge test --tag T` solves for T's package up front.

The channel holds small stand-ins of ``pytorch-lms-core`` for v2.6.0 and v1.13.1, built by
rattler-build like the real one (same name, versions and build-string scheme, the identity file
in ``share/lmsforge/``), whose ``lms_core_tests`` is a tiny googletest-compatible program that
reports one passing test named after its version. What matters here is which package the command
picks, not what c10 does (``test_core_package.py`` and ``test_quetz.py`` run the real one).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures import lmsforge
from lmsforge.packaging import rattler as build
from lmsforge.channel import credentials, publisher

FAKE_RECIPE = """\
schema_version: 1
package:
  name: pytorch-lms-core
  version: "{version}"
source:
  path: {src}
build:
  number: 1000
  string: cpu_lms_h${{{{ hash }}}}_1000
  script:
    - mkdir -p $PREFIX/bin $PREFIX/share/lmsforge
    - install -m 755 lms_core_tests $PREFIX/bin/lms_core_tests
    - install -m 644 identity.json $PREFIX/share/lmsforge/pytorch-lms-core.json
about:
  license: MIT
  license_file: LICENSE
"""

# A googletest stand-in: writes the JSON report googletest writes for --gtest_output=json:PATH.
FAKE_GTEST = """\
#!/usr/bin/env python3
import json, sys
report = [a.split(":", 1)[1] for a in sys.argv[1:] if a.startswith("--gtest_output=json:")][0]
test = {{"name": "PackageVersionIs_{ident}", "status": "RUN", "result": "COMPLETED"}}
json.dump({{"testsuites": [{{"name": "StandIn", "testsuite": [test]}}]}}, open(report, "w"))
print("[  PASSED  ] 1 test.")
"""


def build_stand_in(out: Path, tag: str, series_hash: str = "0" * 64) -> Path:
    """A ``pytorch-lms-core`` package for TAG whose test program names its version."""
    import rattler_build as rb

    version = build.core_package_version(tag)
    src = out / f"src-{version}"
    src.mkdir(parents=True)
    (src / "lms_core_tests").write_text(FAKE_GTEST.format(ident=version.replace(".", "_")))
    (src / "identity.json").write_text(json.dumps({"framework": "pytorch", "tag": tag,
                                                   "series_hash": series_hash}))
    (src / "LICENSE").write_text("MIT\n")
    recipe = out / f"recipe-{version}" / "recipe.yaml"
    recipe.parent.mkdir()
    recipe.write_text(FAKE_RECIPE.format(version=version, src=src))
    [variant] = rb.Stage0Recipe.from_file(recipe).render()
    result = variant.run_build(output_dir=out / "build", channels=[(out / "build").as_uri()],
                               env_isolation=rb.EnvironmentIsolation.NONE)
    return Path(result.packages[0])


@pytest.fixture(scope="session")
def stand_ins(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("stand-ins")
    return {tag: build_stand_in(out, tag) for tag in ("v2.6.0", "v1.13.1")}


@pytest.fixture(autouse=True)
def no_inherited_credentials(monkeypatch):
    for name in (credentials.AUTH_FILE_ENV, credentials.ENV_TOKEN, credentials.ENV_USER,
                 credentials.ENV_PASSWORD, credentials.ENV_HOST):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def two_tag_channel(tmp_path, stand_ins) -> Path:
    chan = tmp_path / "chan"
    publisher.publish(list(stand_ins.values()), chan)
    return chan


@pytest.mark.parametrize("tag, version", [("v1.13.1", "1.13.1"), ("v2.6.0", "2.6.0")])
def test_each_tag_installs_and_tests_its_own_package(two_tag_channel, tmp_path, tag, version):
    result = lmsforge("test", "--framework", "pytorch", "--tag", tag, "--channel",
                      str(two_tag_channel), "--prefix", str(tmp_path / "prefix"), "--cpu")
    assert result.exit_code == 0, result.output
    assert f"pytorch-lms-core={version}=cpu_lms_h" in result.output
    assert "lms_core_tests: 1 passed, 0 failed" in result.output
    record = json.loads((tmp_path / "prefix" / "share" / "lmsforge" /
                         "pytorch-lms-core.json").read_text())
    assert record["tag"] == tag


def test_a_tag_the_channel_lacks_is_refused_before_installing(tmp_path, stand_ins):
    chan = tmp_path / "only-2.6.0"
    publisher.publish([stand_ins["v2.6.0"]], chan)
    prefix = tmp_path / "prefix"
    result = lmsforge("test", "--framework", "pytorch", "--tag", "v1.13.1", "--channel",
                      str(chan), "--prefix", str(prefix), "--cpu")
    assert result.exit_code == 2, result.output
    assert "no pytorch-lms-core for v1.13.1 (version 1.13.1)" in result.output
    assert "they have 2.6.0" in result.output
    assert not prefix.exists()


@pytest.mark.parametrize("tag, says", [("v1.4.0", "no LMS series for v1.4.0"),
                                       ("banana", "banana")])
def test_a_tag_without_a_series_is_refused_before_reading_the_channel(two_tag_channel, tmp_path,
                                                                      tag, says):
    prefix = tmp_path / "prefix"
    result = lmsforge("test", "--framework", "pytorch", "--tag", tag, "--channel",
                      str(two_tag_channel), "--prefix", str(prefix), "--cpu")
    assert result.exit_code == 2, result.output
    assert says in result.output and len(result.output.strip().splitlines()) == 1
    assert not prefix.exists()


def test_asking_for_the_gpu_tests_needs_a_cuda_build(two_tag_channel, tmp_path):
    result = lmsforge("test", "--framework", "pytorch", "--tag", "v2.6.0", "--channel",
                      str(two_tag_channel), "--prefix", str(tmp_path / "prefix"), "--gpu")
    assert result.exit_code == 2, result.output
    assert "no CUDA build of it" in result.output
    assert not (tmp_path / "prefix").exists()


def test_logs_of_a_temporary_prefix_are_kept_where_the_output_says(two_tag_channel, tmp_path):
    """Without --prefix the prefix is temporary and gone when the command returns; the log the
    output names must still be there (finding 12 of the 2026-11-26 hostile-inputs campaign)."""
    cache = tmp_path / "cache"
    result = lmsforge("--cache-dir", str(cache), "test", "--framework", "pytorch", "--tag",
                      "v2.6.0", "--channel", str(two_tag_channel), "--cpu")
    assert result.exit_code == 0, result.output
    [line] = [ln for ln in result.output.splitlines() if "lms_core_tests: 1 passed" in ln]
    log = Path(line.rsplit("(log ", 1)[1].rstrip(")"))
    assert log.is_file() and log.parent.parent == cache / "logs", line
    assert log.parent.name.startswith("test-pytorch-v2.6.0-")
    assert "[  PASSED  ] 1 test." in log.read_text()
