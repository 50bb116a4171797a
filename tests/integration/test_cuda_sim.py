"""The simulated CUDA runtime's own tests (lmsforge/sim/tests/sim_test.cpp), built
with CMake and run twice: plainly and under a seed, which the adversarial tests need. Slow: it
compiles the simulator."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

import sim_build

from lmsforge.verify.pytorch_c10.gtest import parse_gtest_json

pytestmark = pytest.mark.slow

SEEDED_ONLY = {"Sim.SeededDelaysReorderWorkAcrossStreams"}


@pytest.fixture(scope="module")
def program(tmp_path_factory: pytest.TempPathFactory, real_cache_dir: Path) -> Path:
    build = sim_build.configured(tmp_path_factory.getbasetemp(), real_cache_dir)
    return sim_build.built(build, "lms_cuda_sim_tests") / "lms_cuda_sim_tests"


def _run(program: Path, tmp_path: Path, **env: str):
    report = tmp_path / "report.json"
    proc = subprocess.run([str(program), f"--gtest_output=json:{report}"], capture_output=True,
                          text=True, timeout=600, env={**os.environ, **env})
    return proc, parse_gtest_json(report.read_text())


def test_simulator_without_a_seed(program: Path, tmp_path: Path) -> None:
    proc, report = _run(program, tmp_path, LMS_SIM_SEED="0", LMS_SIM_DEVICES="2")
    assert proc.returncode == 0 and report.failed == 0, proc.stdout + proc.stderr
    assert set(report.skips) == SEEDED_ONLY
    assert report.passed >= 30


@pytest.mark.parametrize("seed", ["1", "29"])
def test_simulator_under_a_seed(program: Path, tmp_path: Path, seed: str) -> None:
    proc, report = _run(program, tmp_path, LMS_SIM_SEED=seed, LMS_SIM_DEVICES="3")
    assert proc.returncode == 0 and report.failed == 0, proc.stdout + proc.stderr
    assert report.skipped == 0
    # The adversarial test ran and saw work overtake across streams.
    assert "[       OK ] Sim.SeededDelaysReorderWorkAcrossStreams" in proc.stdout


def test_a_malformed_setting_is_named(program: Path, tmp_path: Path) -> None:
    proc = subprocess.run([str(program), "--gtest_filter=Sim.DeviceCount*"], capture_output=True,
                          text=True, timeout=60, env={**os.environ, "LMS_SIM_SEED": "twelve"})
    assert proc.returncode != 0
    assert "LMS_SIM_SEED='twelve' is not an integer" in proc.stderr


# Another GPU's costs (made up: half the H100's link, a slower host): the timing tests read
# the table in effect, so they must pass with it too, and the results say which table it was.
OTHER_GPU = """# a made-up GPU
name = made-up-gpu
d2h_gbps = 24.5
h2d_gbps = 23.9   # per direction
duplex_gbps = 21
launch_us = 5
memcpy_call_us = 4.5
pinned_alloc_free_us = 1M:400 64M:25000
"""


def test_timing_follows_an_override_file(program: Path, tmp_path: Path) -> None:
    table = tmp_path / "other.txt"
    table.write_text(OTHER_GPU)
    proc, report = _run(program, tmp_path, LMS_SIM_SEED="0", LMS_SIM_DEVICES="2",
                        LMS_SIM_CALIBRATION=str(table))
    assert proc.returncode == 0 and report.failed == 0, proc.stdout + proc.stderr
    assert '"name": "made-up-gpu"' in proc.stdout
    assert '"d2h_gbps": {"value": 24.5, "unit": "GB/s", "source": "override file"}' in proc.stdout
    assert '"event_record_us": {"value": 0.2, "unit": "us", "source": "calibration.txt' in \
        proc.stdout


@pytest.mark.parametrize("text, message", [
    ("d2h_gbps = fast\n", "line 1: d2h_gbps is not a positive number"),
    ("# ok\nwarp_speed = 9\n", "line 2: unknown key 'warp_speed'"),
    ("pinned_alloc_free_us = 64M:1 1M:2\n",
     "line 1: pinned_alloc_free_us is not a list of growing SIZE:MICROSECONDS points"),
    ("d2h_gbps 24\n", "line 1: expected `key = value`"),
])
def test_a_malformed_calibration_file_is_named(program: Path, tmp_path: Path, text: str,
                                               message: str) -> None:
    table = tmp_path / "bad.txt"
    table.write_text(text)
    proc = subprocess.run([str(program), "--gtest_filter=Timing.CalibrationInEffectIsReported"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LMS_SIM_CALIBRATION": str(table)})
    assert proc.returncode != 0
    assert f"LMS_SIM_CALIBRATION={table}, {message}" in proc.stderr


def test_only_a_polling_loop_catches_up_under_the_poll_clock(program: Path,
                                                             tmp_path: Path) -> None:
    """LMS_SIM_POLL_CLOCK=1 (the TensorFlow level's setting): one query does not make its
    thread wait (EventMgr::ThenExecute polls on its caller's thread), a polling loop catches
    up. The plain runs above check the same test without the setting."""
    proc = subprocess.run([str(program), "--gtest_filter=Timing.OnlyAPollingLoop*"],
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "LMS_SIM_POLL_CLOCK": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "[  PASSED  ] 1 test." in proc.stdout
