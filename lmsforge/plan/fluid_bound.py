"""The least time a traced step can take under a limit on the simulated link, as a linear program.

bound.least_step_ms cuts the step at one operator and moves each direction alone at its one-way
rate: page-outs before the cut, page-ins after it. It counts no storage twice and lets the two
directions never meet, which a step whose backward pass pages in while it pages out cannot do.
This bound keeps every operator and every storage, and relaxes only what makes scheduling
hard: a storage may be partly on the device (any number of bytes of it, not all or nothing).

For a steady step (bound.steady_ops) of n operators, slot k is the time from operator k's start
to operator k+1's (one stream: operators run in order). Variables, bytes and milliseconds:

- t[k] >= the roofline time of operator k: slot k's length;
- per storage s alive at k: d[s,k], the bytes of s on the device when operator k starts, and
  h[s,k], the bytes of s with a current copy on the host; out[s,k] and in[s,k], the bytes of s
  copied to and from the host during slot k.

Constraints, each one a real schedule meets:

- an operator's inputs, outputs and new storages are whole on the device when it starts;
- at every operator the storages alive on the device hold at most the limit;
- the device gains bytes of a storage only by copies in: d[s,k+1] <= d[s,k] + in[s,k];
- it gives back only bytes whose host copy is current: d[s,k] >= bytes(s) - h[s,k];
- a host copy grows by the copies out, and a write makes it stale:
  h[s,k+1] <= h[s,k] + out[s,k], or <= out[s,k] if operator k writes s (a new storage starts
  with no host copy);
- the link: each direction's bytes in a slot lie in the convex hull of what the simulator's
  rates allow in t[k]: one-way alone; while both move, one direction at its one-way rate and
  the other at `duplex_bytes_per_s` (the simulator slows only the copy it places second:
  `_link_facets`); any mix of these over the slot;
- storages alive across steps (the step's initial storages and the optimizer state) end the
  step as they began it: d and h at the end equal d and h at the start. (A storage the step
  makes is used and written by its first operator: whole on the device, no host copy.)

The bound is the least sum of t[k]. A real schedule gives a solution: d[s,k] is the whole
storage unless it is dropped (0) or being paged in (the bytes landed so far), which is never
more than the memory the allocator holds for it. So no schedule's step is shorter, on average
over many steps (the last constraint is a mean over steps; the replay's median step could in
principle dip below it, its mean cannot). It ignores what makes real steps longer: allocator
rounding and fragmentation, copy latencies, whole-storage moves, waits on a copy that only part
of a slot covers.

The program is solved with HiGHS (scipy.optimize.linprog). Two reductions keep it exact: a
storage alive at no operator whose storages exceed the limit never needs to move and is left
out with those operators' memory rows; storages with the same lifetime, uses and writes are
merged (any solution splits back in proportion to their bytes).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass

from lmsforge.plan import bound, planner, replay
from lmsforge.plan.profiles import Profile
from lmsforge.plan.trace_format import Trace

# Units inside the program: gigabytes and milliseconds keep its coefficients near 1.
GB = 1e9


class DoesNotFit(Exception):
    """An operator's inputs and outputs alone exceed the limit: no schedule runs the step."""


@dataclass(frozen=True)
class _Storage:
    """One storage (or several merged) as the program sees it."""
    nbytes: int
    first: int  # the first operator it is alive at
    last: int  # the last operator it is alive at; n for one alive into the next step
    cyclic: bool  # alive into the next step: ends the step as it began it
    uses: frozenset[int]  # operators that read, write or allocate it
    writes: frozenset[int]  # operators after which its host copy is stale


def _storages(trace: Trace, ops: list, limit: int) -> tuple[list[_Storage], list[int]]:
    """The storages that may have to move, merged where alike, and the operators at which the
    storages alive exceed LIMIT."""
    n = len(ops)
    across = {s.id for s in trace.initial} | replay.kept_storages(trace)
    nbytes = {s.id: s.bytes for s in trace.initial}
    first: dict[int, int] = {}
    last: dict[int, int] = {}
    uses: dict[int, set[int]] = {}
    writes: dict[int, set[int]] = {}
    for k, op in enumerate(ops):
        for sid, size in op.allocs:
            nbytes.setdefault(sid, size)
            if sid not in across:
                first.setdefault(sid, k)
            uses.setdefault(sid, set()).add(k)
            writes.setdefault(sid, set()).add(k)
        for sid in op.reads:
            uses.setdefault(sid, set()).add(k)
        for sid in op.writes:
            uses.setdefault(sid, set()).add(k)
            writes.setdefault(sid, set()).add(k)
        for sid in op.frees:
            last[sid] = k
    for sid in across:
        nbytes.setdefault(sid, 0)
    # A storage alive from before the step that the step frees (none in the traces of our
    # models) is not there at the next step's start: no cycle, and nothing known at its start.
    spans = {sid: (0, last.get(sid, n - 1)) for sid in across}
    spans.update({sid: (k, last.get(sid, n - 1)) for sid, k in first.items()})
    # Bytes alive at each operator: a difference array over the spans.
    change = [0] * (n + 1)
    for sid, (lo, hi) in spans.items():
        change[lo] += nbytes[sid]
        change[hi + 1] -= nbytes[sid]
    over, alive = [], 0
    for k in range(n):
        alive += change[k]
        if alive > limit:
            over.append(k)
    merged: dict[tuple, int] = {}
    for sid, (lo, hi) in spans.items():
        at = bisect.bisect_left(over, lo)
        if at == len(over) or over[at] > hi or nbytes[sid] == 0:
            continue  # never alive where memory is short: it stays on the device
        cyclic = sid in across and sid not in last
        key = (lo, n if cyclic else hi, cyclic,
               frozenset(uses.get(sid, ())), frozenset(writes.get(sid, ())))
        merged[key] = merged.get(key, 0) + nbytes[sid]
    storages = [_Storage(size, *key) for key, size in merged.items()]
    return storages, over


class _Rows:
    """Constraint rows of the program, sparse: sum of coefficient * variable against a value."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.coefs: list[float] = []
        self.values: list[float] = []

    def add(self, terms: list[tuple[int, float]], value: float) -> None:
        for col, coef in terms:
            self.rows.append(len(self.values))
            self.cols.append(col)
            self.coefs.append(coef)
        self.values.append(value)

    def matrix(self, variables: int):
        import scipy.sparse as sparse

        return sparse.csr_matrix((self.coefs, (self.rows, self.cols)),
                                 shape=(len(self.values), variables))


def _check_each_operator_fits(trace: Trace, ops: list, limit: int) -> None:
    # Checked here, not left to the solver: its tolerances are a few hundred bytes.
    steady = {op.id for op in ops}
    for op, needed in zip(trace.ops, planner.operator_bytes(trace)):
        if op.id in steady and needed > limit:
            raise DoesNotFit(f"operator {op.id} ({op.name}) needs {needed} bytes on the "
                             f"device, more than the limit of {limit}")


def _link_facets(gpu: Profile) -> list[tuple[float, float]]:
    """Coefficients (a, b) with a*out + b*in <= t (GB, ms) for every mix of the rates the
    simulator's link gives.

    Alone, a direction moves at its one-way rate. While both move, the simulator gives the
    duplex rate to the copy it places second only: the copy placed first keeps the end it was
    given (lms_sim's Timing::place_copy_locked never moves a time it has handed out). So at any
    moment one direction may move at its one-way rate and the other at the duplex rate, more
    than a real link, which gives both the duplex rate (a point inside this hull, so the bound
    holds there too). The hull of (out_rate, 0), (0, in_rate), (out_rate, in_both) and
    (out_both, in_rate): each one-way rate, and the line through the two corners."""
    out_rate = gpu.d2h_bytes_per_s / GB / 1e3  # GB per ms
    in_rate = gpu.h2d_bytes_per_s / GB / 1e3
    out_both = min(gpu.duplex_bytes_per_s / GB / 1e3, out_rate)
    in_both = min(gpu.duplex_bytes_per_s / GB / 1e3, in_rate)
    facets = [(1 / out_rate, 0.0), (0.0, 1 / in_rate)]
    if out_both < out_rate and in_both < in_rate:
        # The duplex rate is below both one-way rates: the corners cut the box's corner off.
        across = out_rate * in_rate - out_both * in_both
        facets.append(((in_rate - in_both) / across, (out_rate - out_both) / across))
    return facets


def least_step_ms(trace: Trace, gpu: Profile, limit: int, first_step_only: set[int]) -> float:
    """The least a steady step of TRACE can take on GPU's link with LIMIT bytes of device memory
    (module docstring), in milliseconds of the roofline's clock. Raises DoesNotFit when an
    operator's own storages exceed LIMIT."""
    import numpy as np
    from scipy.optimize import linprog

    ops = bound.steady_ops(trace, first_step_only)
    n = len(ops)
    compute = [op.duration_us.get(gpu.name, 0.0) / 1e3 for op in ops]
    storages, over = _storages(trace, ops, limit)
    _check_each_operator_fits(trace, ops, limit)
    lower: list[float] = list(compute)
    upper: list[float] = [np.inf] * n
    at_most_rows, equal_rows = _Rows(), _Rows()
    at_most, equal = at_most_rows.add, equal_rows.add

    def new_vars(count: int, low: float, high: float) -> int:
        start = len(lower)
        lower.extend([low] * count)
        upper.extend([high] * count)
        return start

    on_device: dict[int, list[int]] = {k: [] for k in over}
    moved_out: list[list[int]] = [[] for _ in range(n)]
    moved_in: list[list[int]] = [[] for _ in range(n)]
    for storage in storages:
        size = storage.nbytes / GB
        span = storage.last - storage.first + 1  # states at operator starts
        d = new_vars(span, 0.0, size)
        h = new_vars(span, 0.0, size)
        out = new_vars(span - 1, 0.0, np.inf)
        in_ = new_vars(span - 1, 0.0, np.inf)
        for j in range(span):
            k = storage.first + j
            if k in on_device:
                on_device[k].append(d + j)
            if k in storage.uses:
                lower[d + j] = size
            at_most([(d + j, -1.0), (h + j, -1.0)], -size)  # d >= size - h
        for j in range(span - 1):
            k = storage.first + j
            moved_out[k].append(out + j)
            moved_in[k].append(in_ + j)
            at_most([(d + j + 1, 1.0), (d + j, -1.0), (in_ + j, -1.0)], 0.0)
            if k in storage.writes:
                at_most([(h + j + 1, 1.0), (out + j, -1.0)], 0.0)
            else:
                at_most([(h + j + 1, 1.0), (h + j, -1.0), (out + j, -1.0)], 0.0)
        if storage.cyclic:
            equal([(d + span - 1, 1.0), (d, -1.0)], 0.0)
            equal([(h + span - 1, 1.0), (h, -1.0)], 0.0)
    for k in over:
        at_most([(col, 1.0) for col in on_device[k]], limit / GB)
    for k in range(n):
        for out_coef, in_coef in _link_facets(gpu):
            at_most([(col, out_coef) for col in moved_out[k]]
                    + [(col, in_coef) for col in moved_in[k]] + [(k, -1.0)], 0.0)
    count = len(lower)
    cost = np.zeros(count)
    cost[:n] = 1.0
    result = linprog(
        cost, A_ub=at_most_rows.matrix(count), b_ub=at_most_rows.values,
        A_eq=equal_rows.matrix(count) if equal_rows.values else None,
        b_eq=equal_rows.values or None, bounds=np.column_stack([lower, upper]),
        method="highs")
    if result.status != 0:
        raise RuntimeError(f"the fluid bound's program did not solve: {result.message}")
    return float(result.fun)
