"""Which step a replay reports (lmsforge/plan/replay.py) and the model-level benchmarks'
one-line summary (lmsforge/plan/model_bench.py). The replays themselves run in the core-sim level
(tests/integration/test_core_sim.py)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from plan_steps import GPU, chain

from lmsforge.plan import model_bench, played_plan, replay, tune


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


def test_a_recorded_replay_reports_the_median_of_the_steps_that_played_a_plan():
    # GPT-2 with lms_step() and the threshold at 1.0 (simulated, 2026-11-30): steps 1 and 2
    # record, step 3 plays the first plan and pins a chunk for its moves, 4-7 play it steadily.
    times = (3023.0, 538.0, 544.0, 675.0, 430.0, 413.0, 413.0, 412.0)
    data = {"device_memory_bytes": 1, "completed": True, "lms_limit_bytes": 1, "data_ok": True,
            "record": True, "recorder": {"steps": 8, "steps_planned": 5},
            "steps": [{"step_ms": ms, "memory_stats": {}} for ms in times]}
    # Of the 7 after the first, the median (430) is the second played step; of the 5 played, 413.
    assert replay.reported_step(data["steps"])["step_ms"] == 430.0
    assert replay.warm_up_steps(data) == 3
    assert replay.parse_result(data, "lms:True").step_ms == 413.0
    # No plan played, or no recording: the first step alone is the warm-up.
    assert replay.warm_up_steps({**data, "recorder": {"steps": 8, "steps_planned": 0}}) == 1
    assert replay.warm_up_steps({**data, "record": False}) == 1


def test_the_summary_names_each_model_and_limit_with_the_tuned_played_and_clairvoyant_efficiency():
    report = {"models": [
        {"model": "resnet50", "limits": [
            {"fraction": "1/2", "completed": True, "least_time_efficiency": 0.4227,
             "tuned": {"least_time_efficiency": 0.6012},
             "recorded": {"completed": True, "least_time_efficiency": 0.6712},
             "played_plan": {"completed": True, "least_time_efficiency": 0.6833},
             "clairvoyant": {"completed": True, "least_time_efficiency": 0.7491}},
            {"fraction": "1/4", "completed": False}]},
        {"model": "unet3d", "limits": [
            {"fraction": "1/2", "completed": True, "least_time_efficiency": 0.45,
             "tuned": {"least_time_efficiency": 0.51}, "played_plan": {"completed": False},
             "recorded": {"completed": False},
             "clairvoyant": {"completed": False}}]}]}
    assert model_bench.summary(report) == (
        "resnet50 1/2 0.42 (0.60, recorded 0.67, played plan 0.68, clairvoyant 0.75) 1/4 -; "
        "unet3d 1/2 0.45 (0.51, recorded -, played plan -, clairvoyant -)")


def _replayed(conf: str, step_ms: float, completed: bool = True) -> replay.Replayed:
    return replay.Replayed(alloc_conf=conf, device_memory=1 << 30, completed=completed,
                           oom="" if completed else "operator 3", oom_op=-1 if completed else 3,
                           lms_limit=1 << 29, step_ms=step_ms, stats={})


def test_the_tuned_setting_is_the_planners_pick_among_every_candidate():
    asked: list[tuple[str, int]] = []
    times = {"lms_sync_mode:3": 140.0, "lms_swapin_ahead:0": 90.0,
             "lms_swapin_ahead:100%": 80.0}

    def replay_with(settings: str, number: int) -> replay.Replayed:
        asked.append((settings, number))
        # The fastest setting ran out of memory: it cannot be recommended.
        return _replayed(settings, times.get(settings, 120.0),
                         completed=settings != "lms_swapin_ahead:100%")

    recorded = _replayed("lms:True,lms_limit:536870912", 95.0)
    chosen = model_bench._tuned(_replayed("lms:True,lms_limit:536870912", 100.0), recorded, 2,
                                replay_with)
    # Every candidate but the defaults and the recorded-order policy with the defaults (both
    # already replayed) once, numbered as the planner does; the recorded-order policy with other
    # settings among them.
    assert asked == [(settings, number) for number, (_, settings)
                     in enumerate(tune.CANDIDATES) if number > 0 and settings != tune.RECORDED]
    assert (tune.RECORDED_PLAN_FIRST, len(tune.CANDIDATES) - 1) in asked
    assert (chosen.alloc_conf, chosen.step_ms) == ("lms:True,lms_swapin_ahead:0", 90.0)
    # Named by the replay the pick was, so a GPU can run it again (bench/plan_replay_gpu.py).
    number = next(number for number, (_, settings) in enumerate(tune.CANDIDATES)
                  if settings == "lms_swapin_ahead:0")
    assert chosen.replay == f"lms-1of2-{number}"
    # Within tune.TIE of the defaults, the defaults stay: named without the limit.
    tie = model_bench._tuned(_replayed("lms:True,lms_limit:536870912", 100.0),
                             _replayed("lms:True,lms_limit:536870912", 99.6),
                             4, lambda settings, number: _replayed(settings, 99.5))
    assert (tie.alloc_conf, tie.step_ms, tie.replay) == ("lms:True", 100.0, "lms-1of4")
    # The recorded-order policy faster than every setting: named by its call.
    best = model_bench._tuned(_replayed("lms:True,lms_limit:536870912", 100.0),
                              _replayed("lms:True,lms_limit:536870912", 70.0),
                              2, lambda settings, number: _replayed(settings, 99.0))
    assert (best.alloc_conf, best.step_ms, best.replay) == (
        "lms:True + torch.cuda.lms_step()", 70.0, "recorded-1of2")
    # With its settings when the recorded-order candidate with settings wins.
    plan_first = model_bench._tuned(
        _replayed("lms:True,lms_limit:536870912", 100.0),
        _replayed("lms:True,lms_limit:536870912", 90.0), 2,
        lambda settings, number: _replayed(settings, 80.0 if tune.records(settings) else 99.0))
    assert (plan_first.alloc_conf, plan_first.step_ms) == (
        "lms:True,lms_swapout_threshold:1.0 + torch.cuda.lms_step()", 80.0)


def test_the_played_plan_is_the_fastest_lead_and_a_plan_that_cannot_fit_says_so(tmp_path):
    trace = chain(4, 10_000)
    plan = SimpleNamespace(first_step_only=set())
    asked: list[int] = []

    def replay_with(moves: Path, lead: int) -> replay.Replayed:
        asked.append(lead)
        assert moves.read_text().startswith("# lmsforge plan of moves")
        ran = _replayed("played", {5: 30.0, 60: 20.0}.get(lead, 40.0))
        ran.stats = {"prefetch_misses": lead, "paged_in_bytes": 10_000 * lead}
        return ran

    played = model_bench._played(trace, GPU, 25_000, plan, 15.0, replay_with, tmp_path, 2)
    assert asked == list(played_plan.PAGE_IN_LEADS)
    assert (played["page_in_lead"], played["step_ms"]) == (60, 20.0)
    assert played["least_time_efficiency"] == 0.75
    assert (played["prefetch_misses"], played["bytes_in"]) == (60, 600_000)
    # Under 0.8 of 12000 B no operator that makes a 10000 B activation from another fits: no
    # plan, and nothing replayed.
    asked.clear()
    nothing = model_bench._played(trace, GPU, 12_000, plan, 15.0, replay_with, tmp_path, 4)
    assert nothing["completed"] is False and "needs" in nothing["problem"]
    assert asked == []


def test_the_recorded_row_reports_the_replays_median_step_and_the_recorders_counters():
    ran = _replayed("recorded", 80.0)
    ran.step_ms_each = [150.0, 100.0, 95.0, 80.0, 80.0, 81.0, 80.0, 79.0]
    ran.stats = {"reclaimed_bytes": 3000, "clean_reclaimed_bytes": 1000, "paged_in_bytes": 2500,
                 "prefetch_misses": 4, "page_in_wait_us": 1234}
    ran.recorder = {"steps": 8, "steps_planned": 6, "divergences": 1}
    row = model_bench._recorded(ran, 60.0)
    assert (row["step_ms"], row["least_time_efficiency"]) == (80.0, 0.75)
    assert (row["bytes_out"], row["bytes_in"]) == (2000, 2500)
    assert row["recorder"]["steps_planned"] == 6 and row["prefetch_misses"] == 4
    out_of_memory = model_bench._recorded(_replayed("recorded", 0.0, completed=False), 60.0)
    assert out_of_memory == {"completed": False, "oom": "operator 3"}
