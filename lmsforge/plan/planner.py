"""The planner's answer for one traced step on one GPU: which replays to run, in which order,
and what they say ("fits without LMS", "fits with LMS: ...", "does not fit: ...").

1. LMS off on a device with room for the whole step: the allocator's peak without LMS and the
   compute-only step time (the same launches, nothing paged).
2. LMS off on the GPU's memory, only when step 1's peak leaves the answer open (its allocated
   peak fits, its reserved peak does not: the allocator may free its cache and retry).
3. LMS on (automatic limit) with the defaults; then, if it completed, the other settings of
   tune.CANDIDATES, and tune.choose picks one.

Every figure is simulated: the series' allocator and LMS, real; the GPU, the simulator's
timing model with the profile's link and the trace's roofline kernel times.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

from lmsforge.errors import CheckFailed
from lmsforge.plan import bound, replay, tune
from lmsforge.plan.profiles import Profile
from lmsforge.plan.trace_format import Trace

GIB = 1 << 30
# The roomy device of step 1: twice the traced peak and this much more, so that the caching
# allocator's rounding and cached blocks never meet its capacity (a step after the first also
# holds the optimizer state it made: if that is not room enough, four times more, up to
# ROOM_LIMIT, which sparse data makes cheap for this host).
ROOM_BYTES = 2 * GIB
ROOM_LIMIT = 4 << 40  # the simulator reserves 8 times the capacity in addresses


@dataclass(frozen=True)
class LargestOp:
    bytes: int
    op: int
    name: str


def operator_bytes(trace: Trace) -> list[int]:
    """Per operator, the bytes of the storages it reads, writes and makes: all of them must be
    on the device while it runs, with or without LMS."""
    sizes = {s.id: s.bytes for s in trace.initial}
    needs = []
    for op in trace.ops:
        for sid, nbytes in op.allocs:
            sizes[sid] = nbytes
        used = set(op.reads) | set(op.writes) | {sid for sid, _ in op.allocs}
        needs.append(sum(sizes.get(sid, 0) for sid in used))
        for sid in op.frees:
            sizes.pop(sid, None)
    return needs


def largest_operator(trace: Trace) -> LargestOp:
    """The operator that needs the most bytes on the device at once (operator_bytes)."""
    needs = operator_bytes(trace)
    if not needs:
        return LargestOp(0, -1, "")
    op = max(range(len(needs)), key=lambda i: (needs[i], -i))  # the first of equals
    return LargestOp(needs[op], trace.ops[op].id, trace.ops[op].name)


@dataclass
class Plan:
    trace: Trace
    gpu: Profile
    device_memory: int
    largest: LargestOp
    without: replay.Replayed  # LMS off, with room: peak without LMS, compute-only time
    on_gpu: replay.Replayed | None  # LMS off on the GPU's memory (None: not needed)
    tried: list[replay.Replayed] = field(default_factory=list)  # LMS on, per candidate
    chosen: replay.Replayed | None = None

    @property
    def fits_without_lms(self) -> bool:
        if self.on_gpu is not None:
            return self.on_gpu.completed
        return self.without.peak_reserved <= self.device_memory

    @property
    def verdict(self) -> str:
        if self.fits_without_lms:
            return "fits"
        return "fits-with-lms" if self.chosen is not None else "does-not-fit"

    @property
    def compute_ms(self) -> float:
        return self.without.step_ms

    def bound_ms(self, run: replay.Replayed) -> float:
        """The least a step can take with RUN's traffic: its compute, or the bytes it moved
        over the link one direction at a time, whichever is longest."""
        return max(self.compute_ms, run.bytes_out / self.gpu.d2h_bytes_per_s * 1e3,
                   run.bytes_in / self.gpu.h2d_bytes_per_s * 1e3)

    @cached_property
    def first_step_only(self) -> set[int]:
        return replay.first_step_only(self.trace)

    def least_ms(self, run: replay.Replayed) -> float:
        """The least any schedule of the step can take under RUN's limit, with the least
        traffic: page-outs before the peak, page-ins after it (lmsforge/plan/bound.py)."""
        return max(self.compute_ms, bound.least_step_ms(
            self.trace, self.gpu, run.lms_limit, self.first_step_only))


# How many operators the answer names where a step with LMS waits longest.
WAITS_NAMED = 3


@dataclass(frozen=True)
class Wait:
    op: int  # the trace's operator id
    name: str
    ms: float


@dataclass(frozen=True)
class Waits:
    """Where a replay with LMS waited: per operator of its last step, how much longer than
    without LMS it took to end after the one before (a page-in or memory waited for)."""
    total_ms: float
    largest: list[Wait]


def waits(plan: Plan, run: replay.Replayed) -> Waits | None:
    """RUN's waits against PLAN's replay without LMS (operator_waits)."""
    return operator_waits(plan.trace, plan.first_step_only, plan.without, run)


def operator_waits(trace: Trace, first_step_only: set[int], without: replay.Replayed,
                   run: replay.Replayed) -> Waits | None:
    """RUN's waits in its last replayed step against WITHOUT's (LMS off); None when either has
    no timeline of the step's operators (a replay program from before `ended_us_after_op`, or
    a run that did not complete)."""
    mine, base = run.ended_us_after_op, without.ended_us_after_op
    ops = bound.steady_ops(trace, first_step_only)
    if not run.completed or not mine or len(mine) != len(base) or len(mine) != len(ops):
        return None
    extra = [max(0, mine_gap - base_gap) / 1e3
             for mine_gap, base_gap in zip(run.operator_gaps_us, without.operator_gaps_us)]
    order = sorted(range(len(extra)), key=lambda i: (-extra[i], i))
    return Waits(sum(extra), [Wait(ops[i].id, ops[i].name, extra[i])
                              for i in order[:WAITS_NAMED] if extra[i] > 0])


def replay_inputs(trace: Trace, gpu: Profile, work: Path) -> tuple[Path, Path]:
    """The replay script of TRACE for GPU and the simulator's calibration for its link, written
    in WORK: what every replay of one plan reads."""
    work.mkdir(parents=True, exist_ok=True)
    script = work / "replay.txt"
    replay.write_script(trace, gpu.name, script)
    calibration = work / "calibration.txt"
    calibration.write_text(replay.calibration_text(gpu))
    return script, calibration


def make_plan(trace: Trace, gpu: Profile, program: Path, work: Path, *,
              device_memory: int | None = None, search: bool = True,
              say: Callable[[str], None] = lambda line: None) -> Plan:
    """Replay TRACE with PROGRAM (lms_plan_replay_sim) as the module docstring says; WORK holds
    the replay script, the calibration file and each run's JSON and log."""
    memory = device_memory or gpu.memory_bytes
    script, calibration = replay_inputs(trace, gpu, work)

    def run(name: str, conf: str, capacity: int, settings: str = "") -> replay.Replayed:
        say(f"replaying {trace.model}: {tune.label(settings) if settings else conf or 'LMS off'}"
            f" on {capacity / GIB:.1f} GiB")
        done = replay.run(program, script, work, device_memory=capacity,
                          calibration=calibration, alloc_conf=conf, name=name,
                          **tune.replay_options(settings))
        if tune.records(settings):
            done.alloc_conf = tune.label(settings)
        return done

    room = max(memory, 2 * trace.peak_live_bytes() + ROOM_BYTES)
    without = run("without-lms", "", room)
    while not without.completed and room < ROOM_LIMIT:  # steady state far above the first step
        room *= 4
        without = run("without-lms", "", room)
    if not without.completed:
        raise CheckFailed(f"the replay of {trace.model} without LMS ran out of memory on a "
                          f"simulated device of {room / GIB:.0f} GiB ({without.oom}); its runs "
                          f"are in {work}")
    plan = Plan(trace, gpu, memory, largest_operator(trace), without, None)
    if without.peak_allocated <= memory < without.peak_reserved:
        plan.on_gpu = run("without-lms-on-gpu", "", memory)
    if plan.fits_without_lms:
        return plan
    for number, (_, settings) in enumerate(tune.CANDIDATES if search else tune.CANDIDATES[:1]):
        plan.tried.append(run(f"lms-{number}", tune.alloc_conf(settings), memory, settings))
        if number == 0 and not plan.tried[0].completed:
            break  # the defaults ran out of memory: no setting makes room LMS cannot find
    plan.chosen = tune.choose(plan.tried)  # type: ignore[assignment]
    return plan


def gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.2f} GiB"


def answer_lines(plan: Plan) -> list[str]:
    """The few lines `lmsforge plan` prints."""
    t = plan.trace
    head = (f"{t.model} {t.input} batch {t.batch} on {plan.gpu.name} "
            f"({gib(plan.device_memory)}); SIMULATED: the v2.6.0 series' allocator and LMS on "
            f"lmsforge's simulated CUDA runtime, kernel times from the roofline, not a GPU "
            f"measurement")
    without = plan.without
    if plan.verdict == "fits":
        # On the GPU's memory when that run was needed: the allocator then gave cached blocks
        # back and retried, and reserved less than with room to spare.
        fitted = plan.on_gpu or without
        return [head, f"fits without LMS: peak {gib(fitted.peak_allocated)} allocated, "
                      f"{gib(fitted.peak_reserved)} reserved of {gib(plan.device_memory)}; "
                      f"step ≈ {fitted.step_ms:.1f} ms"]
    if plan.verdict == "does-not-fit":
        first = plan.tried[0]
        where = t.ops[first.oom_op].name if 0 <= first.oom_op < len(t.ops) else "?"
        return [head, f"does not fit: the largest operator needs {gib(plan.largest.bytes)} "
                      f"({plan.largest.name}, operator {plan.largest.op}); the LMS limit is "
                      f"{gib(first.lms_limit)} of {gib(plan.device_memory)}",
                f"  with LMS the replay ran out of memory at operator {first.oom_op} ({where}); "
                f"without LMS the step needs {gib(without.peak_allocated)}"]
    run = plan.chosen
    assert run is not None
    moved = run.bytes_out + run.bytes_in
    overlapped, least = plan.bound_ms(run), plan.least_ms(run)
    defaults = plan.tried[0]
    lines = [head,
             f"fits with LMS: step ≈ {run.step_ms:.1f} ms, {run.step_ms / plan.compute_ms:.2f}× "
             f"compute-only ({plan.compute_ms:.1f} ms), {moved / GIB:.2f} GiB moved per step",
             f"  without LMS it needs {gib(without.peak_allocated)} (peak allocated); LMS limit "
             f"{gib(run.lms_limit)}, peak {gib(run.peak_allocated)} allocated; bandwidth bound "
             f"{overlapped:.1f} ms (efficiency {overlapped / run.step_ms:.2f}); "
             f"least any schedule takes under the limit {least:.1f} ms "
             f"(efficiency {least / run.step_ms:.2f})"]
    s = run.stats
    lines.append(f"  LMS per step (memory_stats()): {s.get('reclaimed', 0)} page-outs "
                 f"({s.get('clean_reclaims', 0)} clean, {s.get('paged_out_ahead', 0)} ahead of "
                 f"need), {s.get('paged_in', 0)} page-ins ({s.get('prefetched', 0)} prefetched: "
                 f"{s.get('prefetch_hits', 0)} hits, {s.get('prefetch_wasted', 0)} wasted), "
                 f"{s.get('page_out_waits', 0)} page-out waits, page_in_wait_us "
                 f"{s.get('page_in_wait_us', 0)}")
    waited = waits(plan, run)
    if waited is not None and waited.largest:
        named = sum(wait.ms for wait in waited.largest)
        lines.append(
            f"  where it waits (its last replayed step): {waited.total_ms:.1f} ms beyond the "
            f"operators' time without LMS, {named / waited.total_ms:.0%} of it before "
            + ", ".join(f"operator {wait.op} ({wait.name}) {wait.ms:.1f} ms"
                        for wait in waited.largest))
    if len(plan.tried) > 1 and tune.recorded_label(run.alloc_conf):
        lines.append(f"  settings: PYTORCH_CUDA_ALLOC_CONF={tune.conf_of(run.alloc_conf)}, "
                     f"and call torch.cuda.lms_step() after each training step (best of "
                     f"{len(plan.tried)} tried; the defaults: {defaults.step_ms:.1f} ms)")
    elif len(plan.tried) > 1:
        lines.append(f"  settings: PYTORCH_CUDA_ALLOC_CONF={run.alloc_conf} (best of "
                     f"{len(plan.tried)} tried; the defaults: {defaults.step_ms:.1f} ms)")
    else:
        lines.append(f"  settings: PYTORCH_CUDA_ALLOC_CONF={run.alloc_conf} (not searched)")
    return lines


def run_json(plan: Plan, run: replay.Replayed) -> dict[str, object]:
    recorded = tune.recorded_label(run.alloc_conf)
    return {"alloc_conf": tune.conf_of(run.alloc_conf), "lms_step": recorded,
            "device_memory_bytes": run.device_memory,
            "completed": run.completed, "oom": run.oom or None,
            "step_ms": round(run.step_ms, 4) if run.completed else None,
            "bytes_out_per_step": run.bytes_out, "bytes_in_per_step": run.bytes_in,
            "peak_allocated_bytes": run.peak_allocated,
            "peak_reserved_bytes": run.peak_reserved, "lms_limit_bytes": run.lms_limit,
            "bound_ms": round(plan.bound_ms(run), 4) if run.completed else None,
            # Only LMS has a limit to be the least under.
            "least_time_ms": round(plan.least_ms(run), 4) if run.completed and run.alloc_conf
            else None,
            "memory_stats": run.stats,
            "waits": waits_json(waits(plan, run)) if run.alloc_conf else None}


def waits_json(waited: Waits | None) -> dict[str, object] | None:
    if waited is None:
        return None
    return {"total_ms": round(waited.total_ms, 4),
            "largest": [{"op": wait.op, "name": wait.name, "ms": round(wait.ms, 4)}
                        for wait in waited.largest]}


def to_json(plan: Plan) -> dict[str, object]:
    t = plan.trace
    chosen = plan.chosen
    return {
        "simulated": True,
        "timing": {"clock": "virtual (lmsforge's simulated CUDA runtime)",
                   "kernels": "the trace's roofline per operator",
                   "link_gbps": {"h2d": plan.gpu.h2d_bytes_per_s / 1e9,
                                 "d2h": plan.gpu.d2h_bytes_per_s / 1e9,
                                 "duplex": plan.gpu.duplex_bytes_per_s / 1e9}},
        "gpu": plan.gpu.name, "model": t.model, "input": t.input,
        "batch": t.batch, "dtype": t.dtype, "device_memory_bytes": plan.device_memory,
        "verdict": plan.verdict,
        "traced_peak_bytes": t.peak_live_bytes(),
        "largest_operator": {"bytes": plan.largest.bytes, "op": plan.largest.op,
                             "name": plan.largest.name},
        "compute_only_ms": round(plan.compute_ms, 4),
        "without_lms": run_json(plan, plan.without),
        "without_lms_on_gpu": run_json(plan, plan.on_gpu) if plan.on_gpu else None,
        "with_lms": run_json(plan, chosen) if chosen else None,
        "step_over_compute": round(chosen.step_ms / plan.compute_ms, 4) if chosen else None,
        "bytes_moved_per_step": chosen.bytes_out + chosen.bytes_in if chosen else None,
        "recommended_alloc_conf": tune.conf_of(chosen.alloc_conf) if chosen else None,
        "recommended_lms_step": tune.recorded_label(chosen.alloc_conf) if chosen else None,
        "tried": [run_json(plan, r) for r in plan.tried],
        "data_ok": all(r.data_ok for r in [plan.without, *plan.tried]),
        "lines": answer_lines(plan),
    }
