"""The simulator's timing model on the real benchmarks (slow: builds the patched c10_cuda and
both benchmarks for lmsforge's simulated CUDA runtime, then runs them in their short mode).

What is asserted is what the model makes deterministic, never a wall-clock speed: the simulated
figures are the same on every run, whatever the seed of the adversarial scheduler; raw copies
take what the calibration table says; the oversubscription benchmark reports bound efficiency
for k = 1, 2, 4, 8 with the H100's balance of compute and copies, and at least
MIN_BOUND_EFFICIENCY of it where LMS pages at k = 2, 4, 8.

The series as landed stops the oversubscription benchmark at its first reclaim inside the
allocator (K2 of ../shared/evidence/h100-2026-11-22, owned by issue 12 part 1): that test
xfails naming the bug, recognised by its exact message, and nothing else.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from lmsforge.verify.pytorch_c10 import build, sim_level

pytestmark = pytest.mark.slow

# The least bound efficiency the simulated oversubscription benchmark must reach at k = 2, 4
# and 8: issue 15's goal. On-demand LMS reaches 0.59-0.70 (an H100 reached 0.61-0.70); with the
# policies ahead of need the series reaches 0.901 / 0.963 / 0.984 (docs/core-sim.md).
MIN_BOUND_EFFICIENCY = 0.9
FACTORS = [1, 2, 4, 8]
# Two runs whose real-time scheduling differs: no delays, and seeded adversarial delays
# (shortened: their length is no part of what is checked).
RUNS = ({"LMS_SIM_SEED": "0"}, {"LMS_SIM_SEED": "3", "LMS_SIM_MAX_DELAY_US": "400"})
KNOWN_SERIES_BUG = ("params.err == cudaSuccess && params.block != nullptr",
                    "K2: the allocator asserts after a reclaim (issue 12 part 1)")


@pytest.fixture(scope="module")
def programs(pytorch_v260_mutation_worktree: tuple[Path, Path],
             tmp_path_factory: pytest.TempPathFactory, real_cache_dir: Path) -> Path:
    """The benchmarks built for the simulator from the bundled series, in the work tree and
    build folder (and with the cache) the other slow tests of the series share."""
    tree, build_dir = pytorch_v260_mutation_worktree
    subprocess.run(["git", "checkout", "--quiet", "--", "."], cwd=tree, check=True)
    build.build(tree, build_dir, [*build.SIM_LIBRARIES, *build.SIM_BENCHMARKS],
                cache_root=real_cache_dir, log=tmp_path_factory.mktemp("sim-bench") / "build.log")
    return build_dir / "bench"


def _run(program: Path, out: Path, env: dict[str, str]) -> tuple[str, dict[str, Any] | None]:
    proc = subprocess.run([str(program), "--short", "--out", str(out)], capture_output=True,
                          text=True, timeout=600,
                          env={**os.environ, **sim_level.SIM_ENV, **env})
    output = proc.stdout + proc.stderr
    print(output)
    if proc.returncode != 0:
        return output, None
    return output, json.loads(out.read_text())


def _results(programs: Path, name: str, folder: Path) -> list[dict[str, Any]]:
    runs = []
    for number, env in enumerate(RUNS):
        output, data = _run(programs / name, folder / f"{name}-{number}.json", env)
        if data is None:
            message, bug = KNOWN_SERIES_BUG
            if message in output:
                pytest.xfail(f"{name} stops with '{message}': {bug}")
            pytest.fail(f"{name} failed under {env}: {output[-2000:]}")
        runs.append(data)
    return runs


@pytest.fixture(scope="module")
def copy_runs(programs: Path, tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _results(programs, "lms_bench_copy_sim", tmp_path_factory.mktemp("copy"))


@pytest.fixture(scope="module")
def oversub_runs(programs: Path,
                 tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    return _results(programs, "lms_bench_oversub_sim", tmp_path_factory.mktemp("oversub"))


def _timed(data: dict[str, Any]) -> list[Any]:
    """Every timed figure of a result, in order."""
    figures = []
    for row in data["results"]:
        for key, value in sorted(row.items()):
            if isinstance(value, dict) and "samples_ms" in value:
                figures.append((key, value["samples_ms"]))
            elif isinstance(value, dict) and "step_samples_ms" in value:
                figures.append((key, value["step_samples_ms"], value["forward_ms"]))
        figures.append(row.get("bound_efficiency"))
    return figures


def _calibration(data: dict[str, Any]) -> dict[str, Any]:
    return {key: entry["value"]
            for key, entry in data["timing"]["calibration"]["values"].items()}


def _assert_simulated(data: dict[str, Any]) -> None:
    assert data["simulated"] is True and data["data_ok"] is True
    assert "cuda_sim" in data["device"]["name"]
    assert data["timing"]["clock"] == "virtual"
    assert data["timing"]["calibration"]["name"] == "h100-2026-11-22"


def test_copy_results_say_they_are_simulated_with_virtual_time(
        copy_runs: list[dict[str, Any]]):
    _assert_simulated(copy_runs[0])


def test_copy_figures_are_the_same_under_any_scheduling(copy_runs: list[dict[str, Any]]):
    first, second = copy_runs
    assert _timed(first) == _timed(second)
    assert len(_timed(first)) > 0


def test_raw_copies_take_the_calibrated_time(copy_runs: list[dict[str, Any]]):
    data = copy_runs[0]
    table = _calibration(data)
    for row in data["results"]:
        for key, direction in (("raw_d2h", "d2h"), ("raw_h2d", "h2d")):
            # Back to back on one stream, the link moves one copy after the other: each
            # takes its latency plus its bytes at the link's rate; the first one waits at most
            # for its cudaMemcpyAsync call.
            one_us = (table[f"{direction}_latency_us"] +
                      row["size"] / table[f"{direction}_gbps"] / 1e3)
            least_ms = row["count"] * one_us / 1e3
            most_ms = least_ms + table["memcpy_call_us"] / 1e3
            measured = row[key]["median_ms"]  # written with 6 significant digits
            assert least_ms * (1 - 1e-5) <= measured <= most_ms * (1 + 1e-5), (key, row["size"])


def test_oversubscription_reports_simulated_bound_efficiency_per_k(
        oversub_runs: list[dict[str, Any]]):
    first, second = oversub_runs
    _assert_simulated(first)
    assert _timed(first) == _timed(second)
    assert [row["k"] for row in first["results"]] == FACTORS
    assert first["settings"]["rounds"] == 64 and first["settings"]["data_rounds"] == 2
    for row in first["results"]:
        assert row["data_ok"] and row["matches_oracle"], row
        assert row["oracle"] is not None
        assert 0 < row["bound_efficiency"] <= 1.0 + 1e-9, row
        if row["k"] > 1:
            assert row["lms"]["out_bytes_per_step"] > 0
            assert row["bound_efficiency"] >= MIN_BOUND_EFFICIENCY, row
