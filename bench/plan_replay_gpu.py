#!/usr/bin/env python3
"""The model benchmarks' simulated replays, replayed again on a GPU: how far the simulator's
step times (and so `lmsforge plan`'s and the model benchmarks' figures) are from a real device.

    python3 bench/plan_replay_gpu.py --runs MODELS_DIR --program build/bin/lms_plan_replay \\
        --out plan-replay-gpu.json [--budget-s 150]

MODELS_DIR is what the model benchmarks leave (lmsforge/plan/model_bench.py: one folder per
model, each with its replay script `replay.txt`, every replay's JSON and the plans of moves they
played). Every simulated replay there that completed is run once more by `lms_plan_replay`, the
same replay.cpp built for the GPU (lmsforge/plan/native/replay_device_gpu.cu): the same script,
the same PYTORCH_CUDA_ALLOC_CONF (LMS limit in bytes included, so the device's size does not
matter), the same number of steps, the same recording and plan. Each operator is one kernel that
checks and writes its storages' sample windows and then spins on the GPU's timer for the traced
duration; LMS's copies run beside it on the copy engines, as beside real kernels.

What differs from the simulator is then the device itself: the link's real rates and latencies,
the host's work between copies (pinning, events, locks), kernel launch gaps. The report gives,
per replay, the reported step on each (the median after the first, or of the steps that played
a plan, as the model benchmarks report it), their ratio, the bytes copied out and in on each,
and whether every read on the GPU found its bytes (exit 1 if not). Runs are taken in a fixed
order (the defaults and the recorded-order policy at half the peak first) until the budget
is spent; the rest are listed as not run.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # a checkout or a GPU bundle

from lmsforge.plan import replay  # noqa: E402

RUN_TIMEOUT_S = 120
# The runs that answer issue 31's question first: the defaults, LMS's own recorded-order policy
# and the played plans, at half the peak, then a quarter, then every other setting tried.
ORDER = ("lms-1of2.json", "recorded-1of2.json", "played-1of2", "lms-1of2-", "lms-1of4.json",
         "recorded-1of4.json", "played-1of4", "lms-1of4-", "without-lms.json")


# LMS's counters of the reported step, the simulated run's beside the GPU's: where the two
# steps differ, these say whether LMS did other work (more page-outs, prefetches missed) or the
# same work took longer (page-in waits). Two differences were left unexplained in 2026-11-30's
# run (docs/gpu.md section 12): lms_sync_mode:3 took 1.9x the simulated step, and GPT-2 with
# lms_step() 0.86x.
COUNTERS = ("reclaimed", "paged_in", "page_out_waits", "page_in_wait_us", "paged_out_ahead",
            "clean_reclaims", "prefetched", "prefetch_hits", "prefetch_misses", "prefetch_wasted",
            "alloc_distribution.reclaim_one", "alloc_distribution.reclaim_all",
            "alloc_distribution.cudamalloc", "page_outs_ahead_skipped", "clean_reclaimed_bytes")
# The same per step, every step: on the simulator, GPT-2's first planned step with lms_step()
# took 390 ms and every later one 478 ms, with the same plan; the later steps start with fewer
# clean host copies, and the threshold's page-outs ahead then copy where they dropped
# (docs/recorded-order-policy.md). The GPU's steps say whether it goes the same way.
# The host pool's chunks too: a chunk pinned holds the GPU's other CUDA calls (about 0.6 ms
# per MiB), which is the likeliest reason for a step far slower there (docs/core-sim.md,
# "Pinning holds the driver").
STEP_COUNTERS = ("clean_reclaims", "paged_out_ahead", "page_outs_ahead_skipped",
                 "prefetch_misses", "page_in_wait_us", "host_pool.chunks_pinned_ahead",
                 "host_pool.chunks_pinned_on_demand", "host_pool.held_bytes")


def figures(data: dict) -> replay.Replayed:
    """A replay's JSON read as the model benchmarks read it: the reported step is the median
    after the first (replay.reported_step), bytes out leave clean page-outs out."""
    return replay.parse_result(data, data.get("alloc_conf", ""))


def tuned_picks(models: Path) -> dict[tuple[str, str], str]:
    """Each limit's tuned pick, (model, replay), and the defaults' replay under the same limit,
    from the model benchmarks' report beside the models' folders (none when it is missing: an
    older folder)."""
    try:
        report = json.loads((models / replay.MODEL_BENCH_REPORT).read_text())
    except (OSError, ValueError):
        return {}
    return {(model["model"], row["tuned"]["replay"]): f"lms-{row['fraction'].replace('/', 'of')}"
            for model in report.get("models", []) for row in model.get("limits", [])
            if row.get("completed") and "replay" in row.get("tuned", {})}


def order_key(path: Path, picks: dict[tuple[str, str], str] | None = None) -> tuple[float, str]:
    """Where PATH's replay comes in the budget: ORDER, with each limit's tuned pick (PICKS, from
    tuned_picks) right after the defaults under that limit, since it is what `lmsforge plan`
    recommends."""
    defaults = (picks or {}).get((path.parent.name, path.stem))
    if defaults and defaults != path.stem and f"{defaults}.json" in ORDER:
        return ORDER.index(f"{defaults}.json") + 0.5, str(path)
    for rank, prefix in enumerate(ORDER):
        if path.name.startswith(prefix):
            return rank, str(path)
    return len(ORDER), str(path)


def simulated_runs(models: Path) -> list[tuple[Path, dict]]:
    picks = tuned_picks(models)
    runs = []
    for path in sorted(models.glob("*/*.json"), key=lambda path: order_key(path, picks)):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        if (data.get("program") == "lms_plan_replay" and data.get("simulated") is True
                and data.get("completed") and "record" in data):
            runs.append((path, data))
    return runs


def replay_on_gpu(program: Path, path: Path, sim: dict, work: Path) -> dict:
    script = path.parent / "replay.txt"
    out = work / path.parent.name / path.name
    out.parent.mkdir(parents=True, exist_ok=True)
    plan = path.parent / Path(sim["plan"]).name if sim.get("plan") else None
    started = time.monotonic()
    try:
        proc = subprocess.run(replay.command(program, script, out, steps=len(sim["steps"]),
                                             plan=plan, record=sim["record"]),
                              capture_output=True, text=True,
                              env=replay.user_env(sim["alloc_conf"]), timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return {"error": f"did not finish within {RUN_TIMEOUT_S} s"}
    seconds = time.monotonic() - started
    if not out.is_file():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        return {"error": f"exit {proc.returncode}, no result: {tail[0]}"}
    gpu = json.loads(out.read_text())
    gpu["exit_code"], gpu["wall_s"] = proc.returncode, round(seconds, 1)
    return gpu


# Operators of the last step named where the GPU's time between two operator ends differs most
# from the simulator's: the part of the step (a page-in waited for, a pin, a launch gap) where
# the two devices part.
GAPS_NAMED = 5


def gaps_differing_most(sim: replay.Replayed, gpu: replay.Replayed) -> list[dict]:
    """The last step's operators (by position) whose time since the operator before differs
    most between the simulator and the GPU, largest difference first; [] when either replay has
    no timeline of the same operators."""
    if not sim.ended_us_after_op or len(sim.ended_us_after_op) != len(gpu.ended_us_after_op):
        return []
    pairs = list(zip(sim.operator_gaps_us, gpu.operator_gaps_us))
    order = sorted(range(len(pairs)), key=lambda i: (-abs(pairs[i][1] - pairs[i][0]), i))
    return [{"position": i, "sim_ms": pairs[i][0] / 1e3, "gpu_ms": pairs[i][1] / 1e3}
            for i in order[:GAPS_NAMED] if pairs[i][0] != pairs[i][1]]


def row(path: Path, sim_data: dict, gpu_data: dict) -> dict:
    sim = figures(sim_data)
    entry = {"model": path.parent.name, "run": path.stem, "alloc_conf": sim.alloc_conf,
             "record": sim_data["record"], "plan": bool(sim_data.get("plan")),
             "sim_step_ms": round(sim.step_ms, 3), "sim_bytes_out": sim.bytes_out,
             "sim_bytes_in": sim.bytes_in}
    if "error" in gpu_data:
        entry["error"] = gpu_data["error"]
        return entry
    gpu = figures(gpu_data)
    entry.update(gpu_completed=gpu.completed, gpu_data_ok=gpu.data_ok,
                 gpu_exit_code=gpu_data["exit_code"], gpu_wall_s=gpu_data["wall_s"],
                 gpu_steps_ms=[round(ms, 3) for ms in gpu.step_ms_each])
    if gpu.completed:
        entry.update(gpu_step_ms=round(gpu.step_ms, 3),
                     gpu_over_sim=round(gpu.step_ms / sim.step_ms, 3),
                     gpu_bytes_out=gpu.bytes_out, gpu_bytes_in=gpu.bytes_in,
                     gpu_recorder=gpu.recorder, gpu_planned_moves=gpu.planned_moves,
                     sim_recorder=sim.recorder, sim_planned_moves=sim.planned_moves,
                     counters={name: {"sim": sim.stats.get(name, 0),
                                      "gpu": gpu.stats.get(name, 0)} for name in COUNTERS},
                     each_step={name: {"sim": [stats.get(name, 0) for stats in sim.stats_each],
                                       "gpu": [stats.get(name, 0) for stats in gpu.stats_each]}
                                for name in STEP_COUNTERS},
                     gaps_differing_most=gaps_differing_most(sim, gpu))
    else:
        entry["gpu_oom"] = gpu.oom
    return entry


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=Path, required=True,
                        help="the model benchmarks' folder (one subfolder per model)")
    parser.add_argument("--program", type=Path, required=True,
                        help="lms_plan_replay built for this GPU (run-gpu.sh builds it)")
    parser.add_argument("--out", type=Path, required=True, help="JSON report to write")
    parser.add_argument("--budget-s", type=float, default=150.0,
                        help="start no replay after this many seconds (default 150)")
    args = parser.parse_args(argv)
    if not args.program.is_file():
        print(f"plan-replay-gpu: {args.program} not found: build it with run-gpu.sh "
              "(it is built where the tree has c10/core/CachingDeviceAllocator.h)",
              file=sys.stderr)
        return 2
    # A path as given ("./lms_plan_replay" is "lms_plan_replay" to pathlib, which subprocess
    # would look for on PATH).
    program = args.program.resolve()
    runs = simulated_runs(args.runs)
    if not runs:
        print(f"plan-replay-gpu: no simulated replay with its arguments under {args.runs}/*/: "
              "run the model benchmarks (lmsforge verify --level core-sim) first", file=sys.stderr)
        return 2
    work = args.out.parent / "plan-replay-gpu-runs"
    started = time.monotonic()
    rows, not_run = [], []
    for path, sim in runs:
        if time.monotonic() - started > args.budget_s:
            not_run.append(f"{path.parent.name}/{path.stem}")
            continue
        rows.append(row(path, sim, replay_on_gpu(program, path, sim, work)))
        r = rows[-1]
        print(f"{r['model']:12} {r['run']:22} sim {r['sim_step_ms']:9.2f} ms  gpu "
              + (f"{r['gpu_step_ms']:9.2f} ms  x{r['gpu_over_sim']:.3f}  data "
                 f"{'ok' if r['gpu_data_ok'] else 'WRONG'}" if "gpu_step_ms" in r
                 else r.get("error", f"out of memory: {r.get('gpu_oom', '')}")), flush=True)
    wrong = [r for r in rows if r.get("gpu_data_ok") is False or r.get("gpu_exit_code", 0) == 1]
    args.out.write_text(json.dumps({"program": "plan_replay_gpu", "rows": rows,
                                    "not_run": not_run}, indent=1) + "\n")
    print(f"plan-replay-gpu: {len(rows)} replays on the GPU, {len(not_run)} not run (budget); "
          f"{len(wrong)} with wrong data; wrote {args.out}")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
