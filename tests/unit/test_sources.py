"""upstream.yaml declarations, including the real ones shipped in patches/."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsforge.errors import UsageError
from lmsforge.series import catalogue
from lmsforge.upstream import sources

REPO = Path(__file__).resolve().parents[2]


def test_bundled_declarations_name_the_debian_archives():
    pytorch = sources.load_sources(REPO / "patches" / "pytorch" / "upstream.yaml")
    v260 = pytorch.tags["v2.6.0"]
    assert v260.commit == "2236df1770800ffea5697b11b0bb0d910b2e59e1"
    assert v260.archive is not None and v260.archive.debian is not None
    assert v260.archive.sha256 == \
        "099a9601bc40d67656e75735c44abedb0fbe92d08817852ab7472eebb7e6ddff"
    assert v260.archive.debian.version == "2.6.0+dfsg-7"
    assert not v260.archive.complete  # no third_party/: no full build from it
    assert pytorch.tags["v1.13.1"].archive.top == "pytorch-1.13.1"
    tf = sources.load_sources(REPO / "patches" / "tensorflow" / "upstream.yaml")
    assert tf.tags["v2.14.1"].archive.debian.version == "2.14.1+dfsg-3.1"
    assert tf.tags["v2.14.1"].commit is None  # only an abbreviation is known


def test_ibm_era_tags_are_known_but_have_no_series():
    patches = REPO / "patches"
    pytorch = catalogue.sources_for(patches, "pytorch")
    with pytest.raises(UsageError) as info:
        catalogue.series_folder(patches, pytorch, "v1.4.0")
    message = str(info.value)
    assert message.startswith("no LMS series for v1.4.0 yet; series exist for ")
    assert "create one with `lmsforge port --framework pytorch --from " in message
    assert message.endswith("on a host that can fetch the tag")


@pytest.mark.parametrize("text, expected", [
    ("framework: x\n", "git.url: missing"),
    ("git: {url: u}\n", "framework: missing"),
    ("framework: x\ngit: {url: u}\ntags:\n  v1: {commit: abc}\n", "full 40-digit commit"),
    ("framework: x\ngit: {url: u}\ntags:\n  v1: {archive: {name: a, sha256: zz, top: t}}\n",
     "expected 64 hex digits"),
    ("framework: [\n", "not valid YAML"),
])
def test_bad_declarations_are_named(tmp_path, text, expected):
    path = tmp_path / "upstream.yaml"
    path.write_text(text)
    with pytest.raises(UsageError, match=expected):
        sources.load_sources(path)
