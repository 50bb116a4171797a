"""Replay the core-sim model benchmarks under LMS's recorded-order policy, one row at a time,
with whatever the environment says: the quick loop behind the experiments in this folder.

    python bench/experiments/recorded_replay.py [--conf SETTINGS] VERIFY_DIR r2 r4 u2 g2

VERIFY_DIR is a verify folder the core-sim level left in lmsforge's cache, for example
~/.cache/lmsforge/builds/pytorch/v2.6.0/verify: its c10 build (lms_plan_replay_sim) and its
models/ (report.json, each model's replay script and calibration). The rows: r2 and r4 are
ResNet-50 at 1/2 and 1/4 of its peak without LMS, u2 the 3D U-Net at 1/2, g2 GPT-2 medium at
1/2. SETTINGS are more of LMS's settings for PYTORCH_CUDA_ALLOC_CONF, for example
lms_swapout_threshold:1.0. Each replay is the benchmark's recorded replay (8 steps, a boundary before each, seed 1)
and prints the reported step, every step, the bytes moved, the peaks and the waits.
The environment passes through to the replay program, so a throwaway build with an
experiment's switches (allocator-experiments.patch reads EXP_SLACK, EXP_UNMAP, EXP_ROOM...) is
driven from here. Every figure is SIMULATED.
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from lmsforge.plan import replay, tune

ROWS = {"r2": ("resnet50", 2), "r4": ("resnet50", 4), "u2": ("unet3d", 2),
        "g2": ("gpt2-medium", 2)}
MIB = 1 << 20
GIB = 1 << 30


def main(argv: list[str]) -> int:
    settings = ""
    if argv[:1] == ["--conf"] and len(argv) > 1:
        settings, argv = f",{argv[1]}", argv[2:]
    if len(argv) < 2 or any(row not in ROWS for row in argv[1:]):
        print("usage: recorded_replay.py [--conf SETTINGS] VERIFY_DIR ROW... "
              f"(rows: {' '.join(ROWS)})", file=sys.stderr)
        return 2
    verify = Path(argv[0])
    programs = sorted(verify.glob("c10-build/**/lms_plan_replay_sim"))
    report = verify / "models" / "report.json"
    if not programs or not report.is_file():
        print(f"{verify} holds no lms_plan_replay_sim or models/report.json: run the core-sim "
              "level first (lmsforge verify --framework pytorch --tag v2.6.0 --level core-sim)", file=sys.stderr)
        return 2
    peaks = {model["model"]: model["peak_without_lms_bytes"]
             for model in json.loads(report.read_text())["models"]}
    work = Path(tempfile.mkdtemp(prefix="recorded-replay-"))
    for row in argv[1:]:
        model, fraction = ROWS[row]
        folder = verify / "models" / model
        limit = peaks[model] // fraction
        run = replay.run(programs[0], folder / "replay.txt", work, device_memory=64 << 30,
                         calibration=folder / "calibration.txt",
                         alloc_conf=f"{tune.BASE},lms_limit:{limit}{settings}", name=row, seed=1,
                         record=True, steps=tune.RECORDED_STEPS)
        allocated = max(stats.get("allocated_bytes.all.peak", 0) for stats in run.stats_each)
        reserved = max(stats.get("reserved_bytes.all.peak", 0) for stats in run.stats_each)
        print(f"{row}: step {run.step_ms:.1f} ms (each {[round(ms, 1) for ms in run.step_ms_each]}),"
              f" out {run.bytes_out / GIB:.2f} GiB, in {run.bytes_in / GIB:.2f} GiB; limit "
              f"{limit // MIB} MiB, peak allocated {allocated // MIB}, reserved {reserved // MIB};"
              f" prefetch misses {run.stats.get('prefetch_misses', 0)}, page-in waits "
              f"{run.stats.get('page_in_wait_us', 0) / 1000:.1f} ms", flush=True)
    print(f"replays' JSON and logs: {work}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
