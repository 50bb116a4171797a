#!/usr/bin/env python3
"""The model benchmarks against the linear program's bound (lmsforge/plan/fluid_bound.py).

The `core-sim` level reports each model benchmark's step against the cut bound
(bound.least_step_ms), which takes CI milliseconds. The linear program is tighter and takes
minutes a row (HiGHS on about a million variables for ResNet-50), so it runs here, on a report
the level already wrote:

    python3 bench/plan_fluid_bound.py CACHE/builds/pytorch/v2.6.0/verify/models/report.json \
        --out fluid.json

For each model it traces the step again (PyTorch on CPU, as the level did: the same operators
and bytes), and for each limit that fitted it gives, SIMULATED:

- the two bounds, and each replayed step of the report (LMS's defaults, the recorder) over the
  linear program's bound;
- the clairvoyant schedule (lmsforge/plan/clairvoyant.py) played on the simulator's link, and
  with both directions always at the duplex rate, even a copy that moves alone (slower than any
  link); neither may beat the bound (the script fails if one does, as it fails if a replayed
  step's mean does).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lmsforge.plan import (bound, clairvoyant, fluid_bound, model_bench, profiles,  # noqa: E402
                           replay, spec, trace)

SAMPLES = {(name, batch): sample for name, sample, batch in model_bench.MODELS}

# A float tolerance in milliseconds: the solver's, not a margin.
TOLERANCE_MS = 1e-3


def rows_of(report: dict, names: set[str] | None, say) -> list[dict]:
    gpu = profiles.profile(report["gpu"])
    at_duplex = dataclasses.replace(gpu, h2d_bytes_per_s=gpu.duplex_bytes_per_s,
                                    d2h_bytes_per_s=gpu.duplex_bytes_per_s)
    rows = []
    for model in report["models"]:
        if names and model["model"] not in names:
            continue
        # The report names the input as the step does ("1024 tokens"); the level traced the
        # sample of model_bench.MODELS.
        sample = SAMPLES.get((model["model"], model["batch"]), model["input"])
        step = spec.resolve(model["model"], sample, model["batch"], None)
        traced = trace.trace_step(*step.step_args(), model_name=step.name,
                                  input_desc=step.input, batch=step.batch, dtype="float32",
                                  profiles=[gpu.name])
        first_only = replay.first_step_only(traced)
        for limit_row in model["limits"]:
            if not limit_row.get("completed"):
                continue
            limit = limit_row["limit_bytes"]
            started = time.monotonic()
            fluid = fluid_bound.least_step_ms(traced, gpu, limit, first_only)
            seconds = time.monotonic() - started
            cut = bound.least_step_ms(traced, gpu, limit, first_only)
            schedules = {"clairvoyant": clairvoyant.best_schedule(traced, gpu, limit, first_only),
                         "clairvoyant at duplex": clairvoyant.best_schedule(
                             traced, at_duplex, limit, first_only)}
            steps = {"defaults": limit_row, "recorder": limit_row.get("recorded") or {}}
            steps.update((name, {"step_ms": found.step_ms})
                         for name, found in schedules.items() if found)
            row = {"model": model["model"], "fraction": limit_row["fraction"],
                   "limit_bytes": limit, "fluid_bound_ms": round(fluid, 3),
                   "cut_bound_ms": round(cut, 3), "solve_seconds": round(seconds, 1),
                   "steps": {}}
            problems = []
            for name, found in steps.items():
                if not found.get("step_ms"):
                    continue
                row["steps"][name] = {"step_ms": found["step_ms"],
                                      "fluid_efficiency": round(fluid / found["step_ms"], 4),
                                      "cut_efficiency": round(cut / found["step_ms"], 4)}
                # The bound is a mean over steps (fluid_bound's docstring).
                mean = statistics.mean(found.get("step_ms_each") or [found["step_ms"]])
                if mean < fluid - TOLERANCE_MS:
                    problems.append(f"{name}'s mean step beats the bound")
            row["problems"] = problems
            say(f"{row['model']} {row['fraction']}: fluid {fluid:.1f} ms, cut {cut:.1f} ms, "
                + ", ".join(f"{k} {v['step_ms']:.1f} ({v['fluid_efficiency']:.2f})"
                            for k, v in row["steps"].items())
                + f"; solved in {seconds:.0f} s" + ("; " + "; ".join(problems) if problems
                                                    else ""))
            rows.append(row)
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("report", type=Path, help="the model benchmarks' report.json")
    parser.add_argument("--out", type=Path, help="write the rows here as JSON")
    parser.add_argument("--model", action="append", help="only this model (repeatable)")
    args = parser.parse_args()
    try:
        report = json.loads(args.report.read_text())
        report["models"], report["gpu"]
    except (OSError, ValueError, KeyError, TypeError) as error:
        print(f"plan_fluid_bound: {args.report} is not a model benchmarks' report.json "
              f"({error}); give the one `lmsforge verify --level core-sim` wrote under "
              f"builds/pytorch/<tag>/verify/models/", file=sys.stderr)
        return 2
    rows = rows_of(report, set(args.model or ()), lambda line: print(line, flush=True))
    result = {"simulated": True, "gpu": report["gpu"], "rows": rows,
              "note": "SIMULATED: roofline kernel times, the simulator's link rates"}
    if args.out:
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if any(row["problems"] for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
