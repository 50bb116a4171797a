"""Level core-sim on the real PyTorch series (slow: real builds, many seeds).

The unchanged CUDA tests and both benchmarks run against lmsforge's simulated CUDA runtime.
Every PyTorch series must pass `lmsforge verify --level core-sim` under several seeds (6 in CI,
for its time budget; the series owners run 20) with every test running; and each mutation that removes a wait the CUDA backend needs must make the level fail
by wrong data (failed assertions), not by a crash.

The CLI runs share the verify build folder of the real cache with test_bundled_series.py, and
the mutations share its git worktree and build folder, so c10 and c10_cuda are compiled once;
core-sim adds the simulator and relinks.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from fixtures import lmsforge
from lmsforge.frameworks import pytorch
from lmsforge.verify.levels import FAIL, PASS, LevelContext, LevelResult

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
MUTATIONS = REPO / "tests" / "data" / "mutations" / "pytorch-v2.6.0-sim"
SERIES_SEEDS = 6  # 20 seeds took 532 s of CI's 45 minutes for the two series; 6 take ~160 s
MUTATION_SEEDS = 2
# The tests that see the data a mutation corrupts (both mutations make more tests fail).
EXPECTED_FAILURES = {
    "drop-record-stream-wait.patch": {"LargeModelSupportCudaTest.PageOutWaitsForRecordStreamUses",
                                      "LargeModelSupportCudaTest."
                                      "PageOutWaitsForAKernelReadingOnAnotherStream"},
    "drop-page-in-wait.patch": {"LargeModelSupportCudaTest.ReclaimsUnderTheLimitAndKeepsData",
                                "LargeModelSupportCudaTest."
                                "APrefetchedStorageIsWaitedForByItsFirstUser"},
    # A page-out started ahead of need gives its block back before its copy finished.
    "skip-page-out-ahead-wait.patch": {"LargeModelSupportCudaTest."
                                       "AnAllocationRacingAPageOutAheadWaitsForItsCopy"},
}

# tag -> (exit code, {level: result}) of one `lmsforge verify` per session
_verified: dict[str, tuple[int, dict[str, dict]]] = {}


def _verify(real_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory,
            tag: str) -> tuple[int, dict[str, dict]]:
    """`lmsforge verify --level core-sim` of the bundled series, once per session."""
    if tag not in _verified:
        report = tmp_path_factory.mktemp("core-sim-report") / "verify.json"
        result = lmsforge("--cache-dir", str(real_cache_dir), "verify", "--framework",
                          "pytorch", "--tag", tag, "--level", "core-sim", "--sim-seeds",
                          str(SERIES_SEEDS), "--report", str(report))
        print(result.stdout)
        assert report.is_file(), result.output
        (entry,) = json.loads(report.read_text())["series"]
        _verified[tag] = (result.exit_code, {r["level"]: r for r in entry["results"]})
    return _verified[tag]


@pytest.mark.parametrize("tag", ["v2.6.0", "v1.13.1"])
def test_the_series_passes_core_sim_under_several_seeds(real_cache_dir: Path,
                                                   tmp_path_factory: pytest.TempPathFactory,
                                                   tag: str) -> None:
    exit_code, levels = _verify(real_cache_dir, tmp_path_factory, tag)
    sim = levels["core-sim"]
    assert exit_code == 0, sim["detail"]
    assert [levels[name]["status"] for name in ("apply", "compile", "core-cpu", "core-sim")] == \
        [PASS] * 4
    seeds = sim["facts"]["seeds"]
    assert [run["seed"] for run in seeds] == list(range(1, SERIES_SEEDS + 1))
    for run in seeds:
        assert run["ok"] and run["failed"] == 0 and run["skipped"] == 0, run
        assert run["passed"] == seeds[0]["passed"] > 0
    assert sim["facts"]["simulated"] is True and sim["facts"]["gpu"] is False
    assert "not a GPU result" in sim["detail"]
    if tag == "v1.13.1":  # the benchmarks follow c10's 2.x statistics API
        assert "CachingDeviceAllocator.h" in sim["facts"]["benchmarks_not_built"]
        return
    for name in ("copy-engine", "oversubscription"):
        bench = sim["facts"]["benchmarks"][name]
        assert bench["ok"], bench
        data = json.loads(Path(bench["result"]).read_text())
        assert data["simulated"] is True and data["data_ok"] is True
        assert "cuda_sim" in data["device"]["name"]
        # The report carries the simulated figures, labelled (timing model, docs/core-sim.md).
        figures = bench["figures"]
        assert figures["simulated"] is True and figures["clock"] == "virtual"
    efficiency = sim["facts"]["benchmarks"]["oversubscription"]["figures"]["bound_efficiency"]
    assert list(efficiency) == ["1", "2", "4", "8"]
    assert "simulated bound efficiency" in sim["detail"]
    ratios = sim["facts"]["benchmarks"]["copy-engine"]["figures"]["ratio_out"]
    assert set(ratios) == {str(size << 10) for size in (4, 64, 1024, 16384)}
    # A page-out moves the bytes a raw copy moves: faster means it copied nothing (the benchmark's
    # storages must be written between repeats, or clean reclaim skips their copies).
    assert all(ratio <= 1.05 for ratio in ratios.values()), ratios


@pytest.fixture(scope="module")
def mutated_tree(pytorch_v260_lms_tree: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    tree = tmp_path_factory.getbasetemp() / "pt260-mutated"
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--quiet", "--detach", str(tree), "HEAD"],
                       cwd=pytorch_v260_lms_tree, check=True)
    subprocess.run(["git", "checkout", "--quiet", "--", "."], cwd=tree, check=True)
    return tree


@pytest.mark.parametrize("mutation", sorted(p.name for p in MUTATIONS.glob("*.patch")))
def test_a_missing_wait_fails_core_sim_with_wrong_data(
        real_cache_dir: Path, tmp_path_factory: pytest.TempPathFactory, mutated_tree: Path,
        mutation: str) -> None:
    # Meaningful only when the unmutated series passes.
    _, levels = _verify(real_cache_dir, tmp_path_factory, "v2.6.0")
    assert levels["core-sim"]["status"] == PASS, levels["core-sim"]["detail"]
    subprocess.run(["git", "apply", str(MUTATIONS / mutation)], cwd=mutated_tree, check=True)
    ctx = LevelContext("pytorch", "v2.6.0", mutated_tree, "v2.6.0",
                       tmp_path_factory.getbasetemp() / "pt260-mutated-build",
                       sim_seeds=MUTATION_SEEDS)
    try:
        result: LevelResult = pytorch.run_level("core-sim", ctx)
    finally:
        subprocess.run(["git", "checkout", "--quiet", "--", "."], cwd=mutated_tree, check=True)
    print(result.detail)
    assert result.status == FAIL
    assert "replay: LMS_SIM_DEVICES=2 LMS_SIM_SEED=" in result.detail
    seeds = result.facts["seeds"]
    for run in seeds:
        # Every seed ran to its report and failed on the data: nothing crashed.
        assert "failed" in run and run["failed"] > 0, run
    failures = set().union(*(run["failures"] for run in seeds))
    assert failures >= EXPECTED_FAILURES[mutation], seeds
