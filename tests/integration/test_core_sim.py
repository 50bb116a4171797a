"""Level core-sim on the real PyTorch v2.6.0 series (slow: real builds, many seeds).

The unchanged CUDA tests and both benchmarks run against lmsforge's simulated CUDA runtime; the
series must pass under 20 seeds with every test running, and each mutation that removes a wait
the CUDA backend needs must make the level fail by wrong data (failed assertions), not by a
crash. The tree is a git worktree shared with the core-cpu mutation tests
(test_bundled_series.py), so c10 is built once for both.

While the series still aborts with "Should never been called" (K1 of
../shared/evidence/review-pytorch-v2.6.0-series.md, fixed on the series' side, issue 12 part
1), these tests xfail naming it: that exact abort and nothing else.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from lmsforge.frameworks import pytorch
from lmsforge.verify.levels import FAIL, PASS, LevelContext, LevelResult

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MUTATIONS = REPO / "tests" / "data" / "mutations" / "pytorch-v2.6.0-sim"
SERIES_SEEDS = 20
MUTATION_SEEDS = 2
K1_ABORT = "Should never been called"
# The tests that see the data a mutation corrupts (both mutations make more tests fail).
EXPECTED_FAILURES = {
    "drop-record-stream-wait.patch": {"LargeModelSupportCudaTest.PageOutWaitsForRecordStreamUses",
                                      "LargeModelSupportCudaTest."
                                      "PageOutWaitsForAKernelReadingOnAnotherStream"},
    "drop-page-in-wait.patch": {"LargeModelSupportCudaTest.ReclaimsUnderTheLimitAndKeepsData"},
}


@pytest.fixture(scope="module")
def tree(pytorch_v260_lms_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.getbasetemp() / "pt260-mutated"
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--quiet", "--detach", str(tree), "HEAD"],
                       cwd=pytorch_v260_lms_tree, check=True)
    subprocess.run(["git", "checkout", "--quiet", "--", "."], cwd=tree, check=True)
    return tree


def _run(tree: Path, tmp_path_factory: pytest.TempPathFactory, seeds: int) -> LevelResult:
    ctx = LevelContext("pytorch", "v2.6.0", tree, "v2.6.0",
                       tmp_path_factory.getbasetemp() / "pt260-mutated-build", sim_seeds=seeds)
    result = pytorch.run_level("core-sim", ctx)
    print(result.detail)
    return result


def _aborts_with_k1(result: LevelResult, work: Path) -> bool:
    if result.status != FAIL:
        return False
    logs = [work / f"core-sim.seed-{run['seed']}.log" for run in result.facts.get("seeds", [])]
    return bool(logs) and all(log.is_file() and K1_ABORT in log.read_text() for log in logs)


@pytest.fixture(scope="module")
def series_result(tree: Path, tmp_path_factory: pytest.TempPathFactory) -> LevelResult:
    result = _run(tree, tmp_path_factory, SERIES_SEEDS)
    if _aborts_with_k1(result, tmp_path_factory.getbasetemp() / "pt260-mutated-build"):
        pytest.xfail(f"the series aborts with '{K1_ABORT}' (K1, issue 12 part 1)")
    return result


def test_the_series_passes_core_sim_under_20_seeds(series_result: LevelResult) -> None:
    assert series_result.status == PASS, series_result.detail
    seeds = series_result.facts["seeds"]
    assert [run["seed"] for run in seeds] == list(range(1, SERIES_SEEDS + 1))
    for run in seeds:
        assert run["ok"] and run["failed"] == 0 and run["skipped"] == 0, run
        assert run["passed"] == seeds[0]["passed"] > 0
    assert series_result.facts["simulated"] is True and series_result.facts["gpu"] is False
    assert "not a GPU result" in series_result.detail
    for name in ("copy-engine", "oversubscription"):
        bench = series_result.facts["benchmarks"][name]
        assert bench["ok"], bench
        data = json.loads(Path(bench["result"]).read_text())
        assert data["simulated"] is True and data["data_ok"] is True
        assert "cuda_sim" in data["device"]["name"]


@pytest.mark.parametrize("mutation", sorted(p.name for p in MUTATIONS.glob("*.patch")))
def test_a_missing_wait_fails_core_sim_with_wrong_data(
        series_result: LevelResult, tree: Path, tmp_path_factory: pytest.TempPathFactory,
        mutation: str) -> None:
    assert series_result.status == PASS, f"the unmutated series fails: {series_result.detail}"
    subprocess.run(["git", "apply", str(MUTATIONS / mutation)], cwd=tree, check=True)
    try:
        result = _run(tree, tmp_path_factory, MUTATION_SEEDS)
    finally:
        subprocess.run(["git", "checkout", "--quiet", "--", "."], cwd=tree, check=True)
    assert result.status == FAIL
    assert "replay: LMS_SIM_DEVICES=2 LMS_SIM_SEED=" in result.detail
    seeds = result.facts["seeds"]
    for run in seeds:
        # Every seed ran to its report and failed on the data: nothing crashed.
        assert "failed" in run and run["failed"] > 0, run
    failures = set().union(*(run["failures"] for run in seeds))
    assert failures >= EXPECTED_FAILURES[mutation], seeds
