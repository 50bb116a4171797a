"""Every bundled series on its real upstream tree through core-cpu, and proof the tests can fail."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lmsforge.frameworks import pytorch
from lmsforge.series import manifest as series_mod
from lmsforge.verify.levels import FAIL, PASS, LevelContext

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
SERIES = REPO / "patches" / "pytorch" / "v2.6.0"
MUTATIONS = REPO / "tests" / "data" / "mutations" / "pytorch-v2.6.0"


# The PyTorch series' assertions on the levels up to core-cpu are made in test_core_sim.py; both
# frameworks' core-sim in test_core_sim.py and test_tensorflow_core_sim.py, on the same one
# verify run per series.
@pytest.mark.parametrize("framework, tag", [("tensorflow", "v2.14.1")])
def test_bundled_series_verify_through_core_cpu(bundled_verification, framework, tag):
    """What CI proves for every series: apply, compile and the CPU core tests on the real tree."""
    run = bundled_verification(framework, tag)
    assert run.exit_code == 0, run.output
    levels = run.levels
    assert [levels[name]["status"] for name in ("apply", "compile", "core-cpu")] == [PASS] * 3
    assert levels["core-cpu"]["facts"]["tests_passed"] > 0
    assert levels["core-cpu"]["facts"]["tests_failed"] == 0
    assert "tests passed" in levels["core-cpu"]["detail"]
    series = series_mod.load(REPO / "patches" / framework / tag)
    assert run.entry["series_hash"] == series.content_hash()


@pytest.mark.parametrize("mutation", sorted(p.name for p in MUTATIONS.glob("*.patch")))
def test_a_broken_lms_core_fails_the_core_cpu_level(pytorch_v260_mutable, mutation):
    """Corrupting the host copy or skipping a pin must make level core-cpu fail."""
    tree, build_dir = pytorch_v260_mutable
    subprocess.run(["git", "apply", str(MUTATIONS / mutation)], cwd=tree, check=True)
    ctx = LevelContext("pytorch", "v2.6.0", tree, "v2.6.0", build_dir)
    try:
        result = pytorch.run_level("core-cpu", ctx)
    finally:
        subprocess.run(["git", "checkout", "--quiet", "--", "."], cwd=tree, check=True)
    print(result.detail)
    assert result.status == FAIL
    # Either tests fail by assertion, or the broken core crashes the test program: both are
    # the suite catching the mutation (a build failure would not be).
    assert result.facts.get("tests_failed", 0) > 0 or "killed by" in result.detail
