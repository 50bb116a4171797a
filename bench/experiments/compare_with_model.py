"""Where a replayed step waits that the device model's clairvoyant schedule does not: operator
by operator, the last replayed step of a replay's JSON against the last step of
clairvoyant.planned_schedule on the byte-counted device (lmsforge/plan/schedule_device.py).

    python bench/experiments/compare_with_model.py VERIFY_DIR ROW REPLAY_JSON

VERIFY_DIR and ROW as recorded_replay.py takes them (r2, r4: ResNet-50; u2: the 3D U-Net; g2:
GPT-2 medium); REPLAY_JSON one replay of that row (recorded_replay.py prints where it keeps
them). A wait is the time an operator ends after the one before it, less its own duration (the
trace's roofline time, which both use). Every figure is SIMULATED.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from lmsforge.plan import bound, clairvoyant, model_bench, profiles, replay, spec, trace
from recorded_replay import ROWS  # this folder's other script: the same rows
WINDOW = 50  # operators a line
NAMED = 15  # operators named where the replay waits longer


def waits(ends_ms: list[float], durations_ms: list[float]) -> list[float]:
    """Each operator's wait: its end after the previous one's, less its own duration."""
    result, previous = [], 0.0
    for end, duration in zip(ends_ms, durations_ms):
        result.append(max(0.0, end - previous - duration))
        previous = end
    return result


def main(argv: list[str]) -> int:
    if len(argv) != 3 or argv[1] not in ROWS:
        print(f"usage: compare_with_model.py VERIFY_DIR ROW REPLAY_JSON (rows: {' '.join(ROWS)})",
              file=sys.stderr)
        return 2
    verify, (model, fraction), replayed = Path(argv[0]), ROWS[argv[1]], Path(argv[2])
    for needed in (verify / "models" / "report.json", replayed):
        if not needed.is_file():
            print(f"{needed} does not exist: give a verify folder the core-sim level left and "
                  "a replay's JSON (recorded_replay.py prints where it keeps them)",
                  file=sys.stderr)
            return 2
    sizes = {name: (sample, batch) for name, sample, batch in model_bench.MODELS}
    report = json.loads((verify / "models" / "report.json").read_text())
    peak = next(m["peak_without_lms_bytes"] for m in report["models"] if m["model"] == model)
    gpu = profiles.profile(model_bench.GPU)
    step = spec.resolve(model, *sizes[model], None)
    traced = trace.trace_step(*step.step_args(), model_name=step.name, input_desc=step.input,
                              batch=step.batch, dtype="float32", profiles=[gpu.name])
    first_step_only = replay.first_step_only(traced)
    ops = bound.steady_ops(traced, first_step_only)
    durations = [op.duration_us.get(gpu.name, 0.0) / 1e3 for op in ops]
    events: list[tuple] = []
    schedule = clairvoyant.planned_schedule(traced, gpu, peak // fraction, first_step_only,
                                            events=events)
    run = replay.parse_result(json.loads(replayed.read_text()), "")
    if schedule is None or len(run.ended_us_after_op) != len(ops):
        print("the model found no schedule, or the replay's last step is not this trace's "
              f"({len(run.ended_us_after_op)} operators against {len(ops)})", file=sys.stderr)
        return 1
    last = [event for event in events if event[0] == "op"][-len(ops):]
    model_waits = waits([event[3] - last[0][2] for event in last], durations)
    replay_waits = waits([us / 1e3 for us in run.ended_us_after_op], durations)
    turn = next((i for i, op in enumerate(ops) if "backward" in op.name), len(ops))
    print(f"{model} 1/{fraction}: replay {run.step_ms:.1f} ms, model {schedule.step_ms:.1f} ms;"
          f" waits forward {sum(replay_waits[:turn]):.1f} / {sum(model_waits[:turn]):.1f}, "
          f"backward {sum(replay_waits[turn:]):.1f} / {sum(model_waits[turn:]):.1f} ms "
          f"(replay / model; compute {sum(durations[:turn]):.1f} / {sum(durations[turn:]):.1f})")
    for start in range(0, len(ops), WINDOW):
        window = slice(start, start + WINDOW)
        print(f"  operators {start:4d}-{min(start + WINDOW, len(ops)) - 1:4d}: replay waits "
              f"{sum(replay_waits[window]):6.1f} ms, model {sum(model_waits[window]):6.1f}, "
              f"compute {sum(durations[window]):5.1f} (first: {ops[start].name})")
    longer = sorted(range(len(ops)), key=lambda i: model_waits[i] - replay_waits[i])[:NAMED]
    print("where the replay waits longest beyond the model:")
    for i in sorted(longer):
        if replay_waits[i] > model_waits[i]:
            print(f"  {i:4d} {ops[i].name}: replay {replay_waits[i]:.2f} ms, model "
                  f"{model_waits[i]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
