"""The least time a traced step can take with LMS under a limit, whatever the schedule.

The planner's `bandwidth bound` (planner.Plan.bound_ms) is the step's compute or the bytes its
replay moved over the link, one direction at a time, whichever is longest. It assumes that
page-outs and page-ins overlap each other and the compute. A training step cannot do that: its
memory peaks between forward and backward, everything beyond the limit at the peak was copied
out before it, and what of it is used again comes back after it.

`least_step_ms` makes that a bound. A step after the first (its optimizer state alive from the
start) makes transient storages (activations, gradients, temporaries) and uses persistent
ones (parameters, buffers, the batch, optimizer state), which a schedule may page out in one
step and in during the next. For each operator i, with L the limit:

- the storages alive while i runs hold live(i) bytes; at most L of them are on the device, so
  at least live(i) - L - persistent(i) bytes of transient storages were not, and each was
  copied to the host in this step, before i started;
- at least used_later(i) - L bytes of the transient storages alive at i that a later operator
  reads were not on the device then, and are copied back in this step, after i started;
- so the step takes at least max(compute before i, out / d2h) + max(compute from i on,
  in / h2d).

The largest of these over every i (and the compute alone) is the bound. It holds for any
schedule that does not recompute and moves bytes unchanged; it uses the trace's roofline times
and the profile's one-way link rates, as the replay does. Persistent storages count for neither
direction, which keeps the bound true for a schedule that moves them across steps (and makes it
loose for a model whose optimizer state must move: GPT-2 with AdamW).

fluid_bound.least_step_ms is tighter (every operator, the link's duplex rate, state across
steps) but takes minutes on a full model; this one takes milliseconds, so the planner and the
`core-sim` report use it.
"""

from __future__ import annotations

from lmsforge.plan import replay
from lmsforge.plan.profiles import Profile
from lmsforge.plan.trace_format import Op, Trace


def steady_ops(trace: Trace, first_step_only: set[int]) -> list[Op]:
    """The operators of a step after the first: those that only make optimizer state run once."""
    return [op for op in trace.ops if op.id not in first_step_only]


def least_step_ms(trace: Trace, gpu: Profile, limit: int, first_step_only: set[int]) -> float:
    """The least any schedule of TRACE's steady step can take with LIMIT bytes of device
    memory (module docstring), in milliseconds of the roofline's clock."""
    ops = steady_ops(trace, first_step_only)
    durations = [op.duration_us.get(gpu.name, 0.0) / 1e3 for op in ops]
    # The last operator that reads each storage: one only written later needs no page-in.
    last_read: dict[int, int] = {}
    for index, op in enumerate(ops):
        for sid in op.reads:
            last_read[sid] = index
    # Alive from a steady step's start: the initial storages and the optimizer state.
    persistent = {s.id for s in trace.initial} | replay.kept_storages(trace)
    transient: dict[int, int] = {}
    transient_live = 0
    # Bytes of transient storages alive now that an operator after the current one reads.
    used_later = 0
    total = sum(durations)
    best = total
    before = 0.0
    for index, op in enumerate(ops):
        for sid, nbytes in op.allocs:
            if sid not in persistent and sid not in transient:
                transient[sid] = nbytes
                transient_live += nbytes
                if last_read.get(sid, -1) >= index:
                    used_later += nbytes
        # live(i) - L - persistent(i): the transient bytes beyond the limit.
        out_bytes = max(0, transient_live - limit)
        # What this operator reads for the last time is not used later.
        for sid in set(op.reads) | {sid for sid, _ in op.allocs}:
            if last_read.get(sid) == index and sid in transient:
                used_later -= transient[sid]
        in_bytes = max(0, used_later - limit)
        bound = (max(before, out_bytes / gpu.d2h_bytes_per_s * 1e3)
                 + max(total - before, in_bytes / gpu.h2d_bytes_per_s * 1e3))
        best = max(best, bound)
        before += durations[index]
        for sid in op.frees:
            if sid in transient:
                transient_live -= transient.pop(sid)
    return best
