"""The real PyTorch v2.6.0 tree: downloaded once per machine with apt, verified, imported."""

from __future__ import annotations

import json
import shutil

import pytest

from fixtures import lmsforge

pytestmark = pytest.mark.slow

SHA = "099a9601bc40d67656e75735c44abedb0fbe92d08817852ab7472eebb7e6ddff"


@pytest.fixture
def real_cache(real_cache_dir, monkeypatch):
    monkeypatch.setenv("LMSFORGE_CACHE_DIR", str(real_cache_dir))
    return real_cache_dir


def test_fetch_pytorch_v260_prints_verified_identity(real_cache):
    if shutil.which("apt-get") is None and not (real_cache / "archives").exists():
        pytest.skip("needs apt-get (Debian) to download the archive")
    result = lmsforge("fetch", "--framework", "pytorch", "--tag", "v2.6.0")
    assert result.exit_code == 0, result.output
    assert f"sha256 {SHA} (verified)" in result.stdout
    identity = json.loads(lmsforge("fetch", "-f", "pytorch", "-t", "v2.6.0", "--json").stdout)
    assert identity["upstream_commit"] == "2236df1770800ffea5697b11b0bb0d910b2e59e1"
    assert identity["complete"] is False
    # The same archive always imports to the same commit, on every machine.
    assert identity["tree"] == "44a139f8fbcb45f6fb69c5959bc612be3d620833"
    assert identity["commit"] == "3192a5e9cd2d476df318e7936e671fa60c81a954"
