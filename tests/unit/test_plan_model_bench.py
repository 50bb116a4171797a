"""Which step a replay reports (lmsforge/plan/replay.py) and the model-level benchmarks'
one-line summary (lmsforge/plan/model_bench.py). The replays themselves run in the core-sim level
(tests/integration/test_core_sim.py)."""

from __future__ import annotations

from lmsforge.plan import model_bench, replay


def test_a_replay_reports_the_median_step_after_the_warm_up_with_its_own_figures():
    steps = [{"step_ms": ms, "memory_stats": {"paged_in_bytes": int(ms)}}
             for ms in (300.0, 140.0, 130.0, 150.0, 135.0, 145.0)]
    # The warm-up (300 ms) never counts; of 140, 130, 150, 135, 145 the median is 140.
    assert replay.reported_step(steps) == {"step_ms": 140.0,
                                           "memory_stats": {"paged_in_bytes": 140}}
    # An even count reports the lower of the two middle steps; one step is its own report.
    assert replay.reported_step(steps[:3])["step_ms"] == 130.0
    assert replay.reported_step(steps[:1])["step_ms"] == 300.0
    assert replay.reported_step([])["step_ms"] == 0.0


def test_the_summary_names_each_model_and_limit():
    report = {"models": [
        {"model": "resnet50", "limits": [
            {"fraction": "1/2", "completed": True, "least_time_efficiency": 0.4227},
            {"fraction": "1/4", "completed": False}]}]}
    assert model_bench.summary(report) == "resnet50 1/2 0.42 1/4 -"
