"""Replay a trace through the series' real CUDA caching allocator and LMS on the simulated CUDA
runtime: write the replay script the program reads (`native/replay.cpp`), set the simulator up
for a GPU profile, run the program once per allocator setting, and read what it measured.

The program is built elsewhere (the c10 harness's build folder, by the `plan` command): this
module only needs its path. Every figure it returns is the simulator's virtual time and the
allocator's own statistics, never a GPU measurement.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

from lmsforge.errors import CheckFailed
from lmsforge.plan.profiles import Profile
from lmsforge.plan.trace_format import Trace

SCRIPT_HEADER = "lmsforge-replay 1"
# A warm-up step teaches LMS the order of use (prefetch, the adaptive mark); the steps after
# it are what a training loop repeats. They differ by up to a sixth from one to the next (LMS's
# state after a step is not the state before it), so the median of five is reported.
STEPS = 6
# Host memory is no limit in the replay (a GPU host has hundreds of GiB); under sparse data
# the simulator's pinned memory costs this host next to nothing.
PINNED_MEMORY = 1 << 40
REPLAY_TIMEOUT_S = 600
# The model benchmarks' report (model_bench.run_all's, with each limit's tuned pick named by its
# replay), written beside the models' folders of replays; here because bench/plan_replay_gpu.py
# reads it on a GPU host without PyTorch, and model_bench needs PyTorch.
MODEL_BENCH_REPORT = "report.json"


def kept_storages(trace: Trace) -> set[int]:
    """Storages the step allocates and never frees (optimizer state): the next step finds them
    alive and writes them instead of allocating them again."""
    freed = {sid for op in trace.ops for sid in op.frees}
    return {sid for op in trace.ops for sid, _ in op.allocs if sid not in freed}


def first_step_only(trace: Trace) -> set[int]:
    """Operators that only make optimizer state (Adam's zeros_like, its step counters lifted
    from Python numbers): what they write is kept storage they make, and whatever else they make
    dies with them. A later step finds that state and runs none of them."""
    kept = kept_storages(trace)
    found = set()
    for op in trace.ops:
        made = {sid for sid, _ in op.allocs}
        if (made & kept and set(op.writes) <= made & kept
                and made - kept <= set(op.frees)):
            found.add(op.id)
    return found


def write_script(trace: Trace, gpu: str, path: Path) -> None:
    """The replay script of TRACE timed for profile GPU (docs/plan-trace-format.md)."""
    if gpu not in trace.profiles:
        raise CheckFailed(f"the trace of {trace.model} has no durations for {gpu}; trace it "
                          f"again with that profile")
    kept = kept_storages(trace)
    once = first_step_only(trace)
    lines = [SCRIPT_HEADER]
    lines += [f"initial {s.id} {s.bytes}" for s in trace.initial]
    for op in trace.ops:
        allocs = " ".join(f"{sid} {nbytes} {int(sid in kept)}" for sid, nbytes in op.allocs)
        lines.append(" ".join([
            "op", str(op.id), repr(op.duration_us[gpu] * 1000.0), str(int(op.id in once)),
            "R", str(len(op.reads)), *map(str, op.reads),
            "W", str(len(op.writes)), *map(str, op.writes),
            "A", str(len(op.allocs)), *([allocs] if allocs else []),
            "F", str(len(op.frees)), *map(str, op.frees)]))
    path.write_text("\n".join(lines) + "\n")


def calibration_text(gpu: Profile) -> str:
    """LMS_SIM_CALIBRATION for GPU: its host link; the rest of the simulator's table (copy
    latency, launch and call costs, pinning) stays the H100's, measured (lmsforge/sim/README.md)."""
    g = 1e9
    return "\n".join([
        f"name = {gpu.name} (lmsforge plan; link from lmsforge/plan/profiles.py)",
        f"d2h_gbps = {gpu.d2h_bytes_per_s / g:g}",
        f"h2d_gbps = {gpu.h2d_bytes_per_s / g:g}",
        f"duplex_gbps = {gpu.duplex_bytes_per_s / g:g}",
        f"hbm_gbps = {gpu.hbm_bytes_per_s / g:g}",
    ]) + "\n"


@dataclass
class Replayed:
    """What one run of the replay program measured (its JSON, docs/plan-trace-format.md)."""
    alloc_conf: str
    device_memory: int
    completed: bool
    oom: str  # where an allocation failed, when not completed
    oom_op: int
    lms_limit: int
    step_ms: float  # the reported step (reported_step), virtual time
    stats: dict[str, int]  # that step's memory_stats() figures
    allocated_after_op: list[int] = field(default_factory=list)
    reserved_after_op: list[int] = field(default_factory=list)
    # When each operator of the last step ended on the compute stream, in µs from the step's
    # start: a gap longer than the operator's own time is a stall (a page-in or memory waited
    # for).
    ended_us_after_op: list[int] = field(default_factory=list)
    data_ok: bool = True
    # Every replayed step's time and memory_stats() figures, the first (warm-up) included.
    step_ms_each: list[float] = field(default_factory=list)
    stats_each: list[dict[str, int]] = field(default_factory=list)
    # With a plan of moves (--plan): how many page-outs and page-ins it asked LMS for and how
    # many LMS started, over every step.
    planned_moves: dict[str, int] = field(default_factory=dict)
    # LMS's recorded-order policy (--record): its counters over every step.
    recorder: dict[str, int] = field(default_factory=dict)

    @property
    def operator_gaps_us(self) -> list[int]:
        """Per operator of the last step, the µs from the end of the one before (the step's
        start for the first) to its own end: its time, and any wait before it."""
        ended = self.ended_us_after_op
        return [later - earlier for earlier, later in zip([0, *ended[:-1]], ended)]

    @property
    def bytes_out(self) -> int:
        """Bytes copied to the host in the step: a clean page-out copies nothing."""
        return self.stats.get("reclaimed_bytes", 0) - self.stats.get("clean_reclaimed_bytes", 0)

    @property
    def bytes_in(self) -> int:
        return self.stats.get("paged_in_bytes", 0)

    @property
    def peak_allocated(self) -> int:
        return self.stats.get("allocated_bytes.all.peak", 0)

    @property
    def peak_reserved(self) -> int:
        return self.stats.get("reserved_bytes.all.peak", 0)


def reported_step(steps: list[dict], warm_up: int = 1) -> dict:
    """The step a replay reports: the median by time of those after the first WARM_UP (the
    lower of an even count), the last when there are no more."""
    if not steps:
        return {"step_ms": 0.0, "memory_stats": {}}
    timed = sorted(steps[warm_up:] or steps[-1:], key=lambda step: float(step["step_ms"]))
    return timed[(len(timed) - 1) // 2]


def warm_up_steps(data: dict) -> int:
    """Steps a replay's report leaves out: the first; with LMS's recorded-order policy
    (--record), every step before the first that played a plan. Those record, or diverge while
    the optimizer's state is new, and may pin host memory for the plan's moves (a pin holds the
    GPU's other calls): of 8 steps, 3 such and 5 played, the median of the 7 after the first
    could be one of them (GPT-2 with lms_step() and the threshold at 1.0, 2026-11-30: 430 ms,
    where every played step but the first took 412-413)."""
    steps = len(data.get("steps") or [])
    planned = int((data.get("recorder") or {}).get("steps_planned", 0))
    if data.get("record") and 0 < planned < steps:
        return steps - planned
    return 1


def parse_result(data: dict, alloc_conf: str) -> Replayed:
    steps = data.get("steps") or []
    last = reported_step(steps, warm_up_steps(data))
    return Replayed(alloc_conf=alloc_conf, device_memory=int(data["device_memory_bytes"]),
                    completed=bool(data["completed"]), oom=data.get("oom", ""),
                    oom_op=int(data.get("oom_op", -1)), lms_limit=int(data["lms_limit_bytes"]),
                    step_ms=float(last["step_ms"]), stats=dict(last["memory_stats"]),
                    allocated_after_op=[int(v) for v in data.get("allocated_after_op", [])],
                    reserved_after_op=[int(v) for v in data.get("reserved_after_op", [])],
                    ended_us_after_op=[int(v) for v in data.get("ended_us_after_op", [])],
                    data_ok=bool(data["data_ok"]),
                    step_ms_each=[float(step["step_ms"]) for step in steps],
                    stats_each=[dict(step["memory_stats"]) for step in steps],
                    planned_moves={k: int(v) for k, v in data.get("planned_moves", {}).items()},
                    recorder={k: int(v) for k, v in data.get("recorder", {}).items()})


def sim_env(device_memory: int, calibration: Path, alloc_conf: str,
            seed: int = 0) -> dict[str, str]:
    """The replay's environment: one simulated device of the GPU's memory, its link, sparse
    data (lmsforge/sim/README.md), and the allocator settings as a user gives them. A SEED
    turns the simulator's adversarial delays on, so that a missing wait shows as wrong data;
    the timing model does not depend on it."""
    env = user_env(alloc_conf)
    env.update({"LMS_SIM_DEVICES": "1", "LMS_SIM_DEVICE_MEMORY": str(device_memory),
                "LMS_SIM_PINNED_MEMORY": str(PINNED_MEMORY), "LMS_SIM_SPARSE_DATA": "1",
                "LMS_SIM_CALIBRATION": str(calibration), "LMS_SIM_SEED": str(seed)})
    return env


def user_env(alloc_conf: str) -> dict[str, str]:
    """This process's environment with the allocator settings ALLOC_CONF as a user gives them,
    and no simulator or LMS setting of its own."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LMS_SIM_", "PYTORCH_CUDA_ALLOC_CONF", "PYTORCH_LMS_"))}
    env["PYTORCH_CUDA_ALLOC_CONF"] = alloc_conf
    return env


def command(program: Path, script: Path, out: Path, *, steps: int, plan: Path | None = None,
            record: bool = False) -> list[str]:
    """The replay program's command line (lms_plan_replay_sim, or lms_plan_replay on a GPU)."""
    return [str(program), "--script", str(script), "--out", str(out), "--steps", str(steps)] + \
        (["--plan", str(plan)] if plan else []) + (["--record", "1"] if record else [])


def run(program: Path, script: Path, work: Path, *, device_memory: int, calibration: Path,
        alloc_conf: str, name: str, seed: int = 0, plan: Path | None = None,
        record: bool = False, steps: int = STEPS) -> Replayed:
    """One replay of SCRIPT's step STEPS times on a device of DEVICE_MEMORY bytes with
    PYTORCH_CUDA_ALLOC_CONF set to ALLOC_CONF; its JSON and log are WORK/NAME.json and .log.
    PLAN: a plan of moves (lmsforge.plan.played_plan) played from the second step on. RECORD:
    each step begins at a step boundary of LMS's recorded-order policy. STEPS: how many
    steps."""
    out = work / f"{name}.json"
    log = work / f"{name}.log"
    out.unlink(missing_ok=True)
    with log.open("w") as sink:
        try:
            proc = subprocess.run(command(program, script, out, steps=steps, plan=plan,
                                          record=record), stdout=sink, stderr=subprocess.STDOUT,
                                  env=sim_env(device_memory, calibration, alloc_conf, seed),
                                  timeout=REPLAY_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise CheckFailed(f"the replay ({alloc_conf or 'LMS off'}) did not finish within "
                              f"{REPLAY_TIMEOUT_S} s; log: {log}") from None
    if not out.is_file():
        raise CheckFailed(f"the replay ({alloc_conf or 'LMS off'}) exited with "
                          f"{proc.returncode} and wrote no result: {last_line(log)}; log: {log}")
    result = parse_result(json.loads(out.read_text()), alloc_conf)
    if proc.returncode != 0 or not result.data_ok:
        raise CheckFailed(f"the replay ({alloc_conf or 'LMS off'}) found wrong data: "
                          f"{last_line(log)}; log: {log}")
    return result


def last_line(log: Path) -> str:
    lines = [line.strip() for line in log.read_text(errors="replace").splitlines()
             if line.strip()]
    return lines[-1] if lines else "no output"
