"""Model-level benchmarks of LMS at `core-sim` (issue 31, item 5): three real model shapes,
traced on fake tensors and replayed through the series' allocator and LMS on the simulator,
each under limits of a half and a quarter of its peak without LMS.

The synthetic oversubscription benchmark is a stack of identical layers; these are the shapes
the field measures on: an activation-dominated ResNet-50 and 3D U-Net, and a GPT-2-medium-sized
transformer with AdamW, whose optimizer state weighs as much as its activations. Sizes are
kept small enough for CI (a few GiB each, seconds per replay); what they report is scale-free
to first order (bytes and FLOPs per activation grow together with the image).

Per model and limit the report gives the step with LMS's defaults (replay.reported_step: the
median of five after a warm-up step, with that step's bytes and statistics), the compute-only
step, the bytes moved, and two efficiencies, both SIMULATED (roofline kernel times, the
simulator's calibrated link at the profile's rates):

- `bound_efficiency`: the planner's bandwidth bound over the step: compute or this run's
  bytes one direction at a time, whichever is longest (copies overlapping everything);
- `least_time_efficiency`: planner.Plan.least_ms (bound.least_step_ms) over the step: the
  least any schedule of the step can take under the limit, with the least traffic (page-outs
  before the peak, page-ins after it).

Each row's `clairvoyant` entry is clairvoyant.best_schedule under the same limit: the fastest
schedule that knows the step's future (`policy`: "ahead", "planned" or "planned-by-size"),
played on a byte-counted model of the device (no allocator, no fragmentation). Between it and
the replay lies what a policy that knew the order of uses could win; between it and the least
time, what is left to the bound's looseness or a better schedule.

Each row's `played_plan` entry is the clairvoyant decisions played through the real allocator
(played_plan: a plan of moves made from the trace, asked of LMS by name before each operator,
prefetch off, each of played_plan.PAGE_IN_LEADS tried and the fastest kept, data checked under
the simulator's adversarial delays): what a recorded-order policy in the series would reach
with today's moves, measured rather than modelled.

Each row's `recorded` entry is LMS's own recorded-order policy (the series' step recorder,
`c10::cuda::lms::mark_step`, what `torch.cuda.lms_step()` calls) with LMS's defaults
otherwise: the replay marks a step boundary before each step, LMS records one step and plays
its plan in the next (the reactive prefetch stays off while the recorder is on);
tune.RECORDED_STEPS steps, and the median of those that played a plan is reported
(replay.warm_up_steps: the steps before, which record or diverge while the optimizer's state is
new, are left out as the first step is).

Each row's `tuned` entry is what `lmsforge plan` would recommend under that limit: the other
settings of tune.CANDIDATES replayed the same way, tune.choose's pick, its step and least-time
efficiency (the defaults when nothing beats them by more than tune.TIE). Those replays check
every storage's data too, but without the simulator's adversarial delays (seed 0), which cost
wall time (real sleeps: 112 s instead of 40 s for the three models) and not virtual time.

A limit under which the step's largest operator cannot run is reported as not fitting, with the
operator; wrong data in any replay is an error (replay.run raises).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lmsforge.errors import CheckFailed
from lmsforge.plan import clairvoyant, planner, played_plan, profiles, replay, spec, trace, tune
from lmsforge.plan.schedule_device import DoesNotFit

GPU = "h100-pcie"
# (model, one sample's shape, batch): the planner's built-in models at CI sizes.
MODELS = (("resnet50", "3x512x512", 8),
          ("unet3d", "1x128x128x128", 2),
          ("gpt2-medium", "1024", 4))
FRACTIONS = (2, 4)  # limits: the peak without LMS over these
ALLOC_CONF = "lms:True"  # the defaults a user gets
# A played plan's settings: the plan pages in, the predictor does not (its guesses would take
# the room the plan counts on); page-outs ahead stay as they are (prototype, 2026-11-30: off,
# the U-Net at 1/2 took 120 ms instead of 110).
PLAYED_ALLOC_CONF = "lms:True,lms_swapin_ahead:0"
SEED = 1  # the simulator's adversarial delays on: a missing wait shows as wrong data
TUNING_SEED = 0  # the other settings' replays: the same virtual times, no real sleeps
GIB = 1 << 30


def run_model(name: str, sample: str, batch: int, program: Path, work: Path,
              gpu: profiles.Profile) -> dict[str, object]:
    """One model's figures: its peak without LMS and a row per limit."""
    step = spec.resolve(name, sample, batch, None)
    traced = trace.trace_step(*step.step_args(), model_name=step.name, input_desc=step.input,
                              batch=step.batch, dtype="float32", profiles=[gpu.name])
    script, calibration = planner.replay_inputs(traced, gpu, work)
    room = 2 * traced.steady_peak_bytes() + planner.ROOM_BYTES
    without = replay.run(program, script, work, device_memory=room, calibration=calibration,
                         alloc_conf="", name="without-lms", seed=SEED)
    if not without.completed:
        raise CheckFailed(f"{name}: the replay without LMS ran out of memory on "
                          f"{room / GIB:.1f} GiB ({without.oom})")
    peak = without.peak_allocated
    largest = planner.largest_operator(traced)
    # The planner's bounds of a step on this device (plan.bound_ms, plan.least_ms).
    plan = planner.Plan(traced, gpu, room, largest, without, None)
    rows = []
    for fraction in FRACTIONS:
        limit = peak // fraction
        conf = f"{ALLOC_CONF},lms_limit:{limit}"
        run = replay.run(program, script, work, device_memory=room, calibration=calibration,
                         alloc_conf=conf, name=_replay_name(fraction), seed=SEED)
        row: dict[str, object] = {"fraction": f"1/{fraction}", "limit_bytes": limit,
                                  "completed": run.completed}
        if not run.completed:
            row.update(verdict="does-not-fit", oom=run.oom,
                       largest_operator={"bytes": largest.bytes, "name": largest.name})
            rows.append(row)
            continue
        # run.step_ms and run.stats: the median step after the warm-up (replay.reported_step).
        overlapped, least = plan.bound_ms(run), plan.least_ms(run)
        recorded = replay.run(program, script, work, device_memory=room, calibration=calibration,
                              alloc_conf=f"{ALLOC_CONF},lms_limit:{limit}",
                              name=_replay_name(fraction, recorded=True), seed=SEED,
                              **tune.replay_options(tune.RECORDED))
        tuned = _tuned(run, recorded, fraction, lambda settings, number: replay.run(
            program, script, work, device_memory=room, calibration=calibration,
            alloc_conf=f"{tune.alloc_conf(settings)},lms_limit:{limit}",
            name=_replay_name(fraction, number), seed=TUNING_SEED,
            **tune.replay_options(settings)))
        row.update(verdict="fits-with-lms", step_ms=round(run.step_ms, 3),
                   step_ms_each=[round(ms, 3) for ms in run.step_ms_each],
                   step_over_compute=round(run.step_ms / without.step_ms, 3),
                   bytes_out=run.bytes_out, bytes_in=run.bytes_in,
                   bound_ms=round(overlapped, 3),
                   bound_efficiency=round(overlapped / run.step_ms, 4),
                   least_time_ms=round(least, 3),
                   least_time_efficiency=round(least / run.step_ms, 4),
                   peak_allocated_bytes=max(s.get("allocated_bytes.all.peak", 0)
                                            for s in run.stats_each),
                   memory_stats={key: run.stats.get(key, 0) for key in (
                       "reclaimed", "paged_in", "paged_out_ahead", "page_out_waits",
                       "clean_reclaims", "prefetched", "prefetch_hits", "prefetch_misses",
                       "prefetch_wasted", "page_in_wait_us")},
                   tuned={"alloc_conf": tuned.alloc_conf, "step_ms": round(tuned.step_ms, 3),
                          "least_time_efficiency": round(least / tuned.step_ms, 4),
                          "replay": tuned.replay})
        row["clairvoyant"] = _clairvoyant(traced, gpu, limit, plan, least)
        row["played_plan"] = _played(
            traced, gpu, limit, plan, least, lambda moves, lead: replay.run(
                program, script, work, device_memory=room, calibration=calibration,
                alloc_conf=f"{PLAYED_ALLOC_CONF},lms_limit:{limit}",
                name=f"played-1of{fraction}-lead{lead}", seed=SEED, plan=moves),
            work, fraction)
        row["recorded"] = _recorded(recorded, least)
        # Where the last replayed step of the defaults and of the recorder waited, operator by
        # operator, against the step without LMS (planner.operator_waits).
        row["waits"] = planner.waits_json(planner.operator_waits(
            traced, plan.first_step_only, without, run))
        row["recorded"]["waits"] = planner.waits_json(planner.operator_waits(
            traced, plan.first_step_only, without, recorded))
        rows.append(row)
    return {"model": name, "input": step.input, "batch": step.batch,
            "operators": len(traced.ops), "peak_without_lms_bytes": peak,
            "compute_only_ms": round(without.step_ms, 3), "limits": rows}


def _clairvoyant(traced: trace.Trace, gpu: profiles.Profile, limit: int, plan: planner.Plan,
                 least: float) -> dict[str, object]:
    found = clairvoyant.best_schedule(traced, gpu, limit, plan.first_step_only)
    if found is None:
        return {"completed": False}
    return {"completed": True, "step_ms": round(found.step_ms, 3),
            "least_time_efficiency": round(least / found.step_ms, 4),
            "bytes_out": found.bytes_out, "bytes_in": found.bytes_in,
            "policy": found.policy, "horizon_ms": found.horizon_ms}


def _played(traced: trace.Trace, gpu: profiles.Profile, limit: int, plan: planner.Plan,
            least: float, replay_with: Callable[[Path, int], replay.Replayed], work: Path,
            fraction: int) -> dict[str, object]:
    """The fastest of the played plans, one per page-in lead; REPLAY_WITH(moves file, lead)
    replays one."""
    best: tuple[int, replay.Replayed] | None = None
    for lead in played_plan.PAGE_IN_LEADS:
        try:
            moves = played_plan.make(traced, gpu, limit, plan.first_step_only, lead)
        except DoesNotFit as error:
            return {"completed": False, "problem": f"no plan under {played_plan.SLACK} of the "
                                                   f"limit: {error}"}
        path = work / f"moves-1of{fraction}-lead{lead}.txt"
        moves.write(path)
        run = replay_with(path, lead)
        if run.completed and (best is None or run.step_ms < best[1].step_ms):
            best = (lead, run)
    if best is None:
        return {"completed": False, "problem": "every played plan ran out of memory"}
    lead, run = best
    return {"completed": True, "step_ms": round(run.step_ms, 3),
            "least_time_efficiency": round(least / run.step_ms, 4),
            "bytes_out": run.bytes_out, "bytes_in": run.bytes_in, "page_in_lead": lead,
            "alloc_conf": PLAYED_ALLOC_CONF, "slack": played_plan.SLACK,
            "planned_moves": run.planned_moves,
            "prefetch_misses": run.stats.get("prefetch_misses", 0),
            "page_in_wait_us": run.stats.get("page_in_wait_us", 0)}


def _recorded(run: replay.Replayed, least: float) -> dict[str, object]:
    """The figures of a replay under LMS's recorded-order policy (replay.run with record)."""
    if not run.completed:
        return {"completed": False, "oom": run.oom}
    return {"completed": True, "step_ms": round(run.step_ms, 3),
            "step_ms_each": [round(ms, 3) for ms in run.step_ms_each],
            "least_time_efficiency": round(least / run.step_ms, 4),
            "bytes_out": run.bytes_out, "bytes_in": run.bytes_in,
            "alloc_conf": ALLOC_CONF, "recorder": run.recorder,
            "prefetch_misses": run.stats.get("prefetch_misses", 0),
            "page_in_wait_us": run.stats.get("page_in_wait_us", 0)}


@dataclass
class Tried:
    """One setting's replay, as tune.choose compares them: the settings without the limit, and
    the name of the replay's JSON in the model's folder (bench/plan_replay_gpu.py runs the
    picks again on a GPU first)."""
    alloc_conf: str
    completed: bool
    step_ms: float
    replay: str


def _replay_name(fraction: int, number: int = 0, *, recorded: bool = False) -> str:
    """The name of a replay under 1/FRACTION of the peak (its JSON in the model's folder): the
    defaults, the recorded-order policy, or tune.CANDIDATES[NUMBER]."""
    if recorded:
        return f"recorded-1of{fraction}"
    return f"lms-1of{fraction}" + (f"-{number}" if number else "")


def _tuned(defaults: replay.Replayed, recorded: replay.Replayed, fraction: int,
           replay_with: Callable[[str, int], replay.Replayed]) -> Tried:
    """tune.choose's pick among DEFAULTS and RECORDED (tune.RECORDED, the recorded-order policy
    with the defaults), both already replayed under 1/FRACTION of the peak, and the other
    candidates, each replayed by REPLAY_WITH(settings, number)."""
    tried = [Tried(tune.BASE, defaults.completed, defaults.step_ms, _replay_name(fraction))]
    for number, (_, settings) in enumerate(tune.CANDIDATES[1:], start=1):
        if settings == tune.RECORDED:
            run, name = recorded, _replay_name(fraction, recorded=True)
        else:
            run, name = replay_with(settings, number), _replay_name(fraction, number)
        tried.append(Tried(tune.label(settings), run.completed, run.step_ms, name))
    return tune.choose(tried) or tried[0]


def run_all(program: Path, work: Path, say: Callable[[str], None]) -> dict[str, object]:
    """Every model of MODELS on GPU's profile; PROGRAM is the replay (lms_plan_replay_sim)."""
    gpu = profiles.profile(GPU)
    models = []
    for name, sample, batch in MODELS:
        say(f"model benchmark: {name} {sample} batch {batch}, limits "
            f"{', '.join(f'1/{f}' for f in FRACTIONS)} of its peak (simulated {gpu.name})")
        models.append(run_model(name, sample, batch, program, work / name, gpu))
    return {"simulated": True, "gpu": gpu.name, "alloc_conf": ALLOC_CONF,
            "timing": "SIMULATED: roofline kernel times, the simulator's calibrated link at "
                      "the profile's rates; not a GPU measurement",
            "models": models}


def summary(report: dict[str, object]) -> str:
    """One line: the least-time efficiency per model and limit with the defaults, and in
    parentheses with the setting the planner would pick, with LMS's recorded-order policy,
    with the clairvoyant plan played through LMS and with the clairvoyant schedule on the
    device model ('-' where the step does not fit)."""
    parts = []
    for model in report["models"]:  # type: ignore[union-attr]
        cells = [f"{row['fraction']} {row['least_time_efficiency']:.2f} "
                 f"({row['tuned']['least_time_efficiency']:.2f}, recorded "
                 f"{_efficiency(row['recorded'])}, played plan "
                 f"{_efficiency(row['played_plan'])}, clairvoyant "
                 f"{_efficiency(row['clairvoyant'])})"
                 if row["completed"] else f"{row['fraction']} -" for row in model["limits"]]
        parts.append(f"{model['model']} {' '.join(cells)}")
    return "; ".join(parts)


def _efficiency(schedule: dict[str, object]) -> str:
    return f"{schedule['least_time_efficiency']:.2f}" if schedule["completed"] else "-"
