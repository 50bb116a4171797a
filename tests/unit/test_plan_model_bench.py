"""The model-level benchmarks' reading of a replay (lmsforge/plan/model_bench.py): which step
is reported and the one-line summary. The replays themselves run in the core-sim level
(tests/integration/test_core_sim.py)."""

from __future__ import annotations

import pytest

from lmsforge.errors import CheckFailed
from lmsforge.plan import model_bench, replay


def replayed(times: list[float]) -> replay.Replayed:
    return replay.Replayed(alloc_conf="lms:True", device_memory=1, completed=True, oom="",
                           oom_op=-1, lms_limit=1, step_ms=times[-1], stats={},
                           step_ms_each=times,
                           stats_each=[{"paged_in_bytes": int(ms)} for ms in times])


def test_the_median_step_after_the_warm_up_is_reported_with_its_own_figures():
    # The warm-up (300 ms) never counts; of 140, 130, 150, 135, 145 the median is 140.
    ms, stats = model_bench.median_step(replayed([300.0, 140.0, 130.0, 150.0, 135.0, 145.0]))
    assert (ms, stats) == (140.0, {"paged_in_bytes": 140})
    # An even count reports the lower of the two middle steps.
    assert model_bench.median_step(replayed([300.0, 120.0, 110.0]))[0] == 110.0


def test_a_replay_without_a_step_after_its_warm_up_is_an_error():
    with pytest.raises(CheckFailed, match="no step after its warm-up"):
        model_bench.median_step(replayed([300.0]))


def test_the_summary_names_each_model_and_limit():
    report = {"models": [
        {"model": "resnet50", "limits": [
            {"fraction": "1/2", "completed": True, "least_time_efficiency": 0.4227},
            {"fraction": "1/4", "completed": False}]}]}
    assert model_bench.summary(report) == "resnet50 1/2 0.42 1/4 -"
