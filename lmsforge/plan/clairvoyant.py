"""A clairvoyant schedule of a traced step under an LMS limit: what a policy that knows the
step's future (say, recorded in the step before) could reach, set beside the real allocator's
replay and bound.least_step_ms.

The least-time bound is a lower bound no schedule beats; it may be loose. The replay is what
LMS does. This is one schedule that knows every operator's next use, played on a model of the
device, so that a gap between the replay and the bound can be split: the part a better policy
could win, and the part no policy here reaches. It is a heuristic, not an optimum: a faster
schedule may exist, so it never proves that the bound is out of reach.

The schedule:

- page-outs take the device storage whose next use is furthest away (Belady's rule), copy it to
  the host after its last use so far, and give its memory back when the copy ends; a storage
  whose host copy is still valid (paged in and not written since) goes without a copy;
- before each operator, page-outs ahead make room for what the operators of the next
  `horizon_ms` of compute allocate and page in;
- page-ins go ahead in the order of next use, as soon as memory can be made by paging out only
  storages used later than the one coming in; their device memory is taken when they are issued,
  as the allocator does;
- an operator starts when the one before it ended, its inputs are on the device, and its
  allocations fit.

The model: device memory counted in bytes over time (no blocks, so no fragmentation: the
allocator's limit also pays for rounding and split blocks); one copy engine per direction at the
profile's one-way rates, even while both move (optimistic: the simulator gives each direction
the lower duplex rate then; pass a profile with both rates set to it for the pessimistic
figure); the trace's roofline durations; every operator on one stream. The
figure is the third of three steps, the first starting with the persistent storages (the
initial ones and the optimizer state) on the device while they fit.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass

from lmsforge.plan import bound, replay
from lmsforge.plan.profiles import Profile
from lmsforge.plan.trace_format import Trace

# Compute ahead that page-outs make room for; the best of these is the figure.
# (0, 1 and 2 ms were never the best on the benchmark models.)
HORIZONS_MS = (0.1, 0.25, 0.5)
STEPS = 3
# Page-ins ahead stop while the link is this many horizons behind compute: further ahead, what
# they bring in waits longer on the device and takes room that page-outs must then make.
PAGE_IN_LEAD_HORIZONS = 4
NEVER = float("inf")


@dataclass(frozen=True)
class Schedule:
    step_ms: float
    bytes_out: int
    bytes_in: int
    horizon_ms: float


class DoesNotFit(Exception):
    """An operator's inputs and allocations cannot be on the device together."""


class Timeline:
    """Device bytes in use: `base` up to the last advance, then changes at future times."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.base = 0
        self.changes: list[tuple[float, int]] = []  # (time, bytes), sorted

    def add(self, time: float, nbytes: int) -> None:
        bisect.insort(self.changes, (time, nbytes))
        most = self.most_from(time)
        if most > self.limit:
            self.changes.remove((time, nbytes))
            raise AssertionError(f"{most} bytes in use over the limit {self.limit}: the "
                                 f"schedule took memory it did not have")

    def advance(self, now: float) -> None:
        passed = bisect.bisect_right(self.changes, (now, NEVER))
        self.base += sum(nbytes for _, nbytes in self.changes[:passed])
        del self.changes[:passed]

    def final(self) -> int:
        """In use once every change so far has happened."""
        return self.base + sum(nbytes for _, nbytes in self.changes)

    def most_from(self, start: float) -> int:
        """The most in use at any time from START on."""
        in_use, most = self.base, None
        for time, nbytes in self.changes:
            if time > start and most is None:
                most = in_use
            in_use += nbytes
            if most is not None:
                most = max(most, in_use)
        return in_use if most is None else most

    def earliest(self, start: float, nbytes: int) -> float | None:
        """The first time from START on when NBYTES more fit from then on."""
        for time in [start] + [t for t, n in self.changes if t > start and n < 0]:
            if self.most_from(time) + nbytes <= self.limit:
                return time
        return None


class _Run:
    def __init__(self, trace: Trace, gpu: Profile, limit: int, first_step_only: set[int],
                 horizon_ms: float) -> None:
        self.ops = bound.steady_ops(trace, first_step_only)
        self.durations = [op.duration_us.get(gpu.name, 0.0) / 1e3 for op in self.ops]
        self.d2h = gpu.d2h_bytes_per_s / 1e3  # bytes per ms
        self.h2d = gpu.h2d_bytes_per_s / 1e3
        self.horizon_ms = horizon_ms
        self.sizes = {s.id: s.bytes for s in trace.initial}
        for op in trace.ops:
            self.sizes.update((sid, nbytes) for sid, nbytes in op.allocs)
        self.persistent = {s.id for s in trace.initial} | replay.kept_storages(trace)
        self.operands = [set(op.reads) | set(op.writes) | {sid for sid, _ in op.allocs}
                         for op in self.ops]
        self.uses: dict[int, list[int]] = defaultdict(list)
        for index, operands in enumerate(self.operands):
            for sid in operands:
                self.uses[sid].append(index)
        self.memory = Timeline(limit)
        self.on_device: dict[int, float] = {}  # storage: when its device copy is valid
        self.on_host: dict[int, float] = {}  # storage: when its host copy is valid
        self.dirty: set[int] = set()  # written since its host copy was made
        self.last_use_ends: dict[int, float] = defaultdict(float)
        self.now = 0.0  # the end of the last operator
        self.d2h_free = self.h2d_free = 0.0
        self.bytes_out = self.bytes_in = 0
        # What the schedule did, for tests to check on their own: (kind, storage or
        # operator, times...) in the order decided.
        self.events: list[tuple] = []

    def next_use(self, sid: int, position: int) -> float:
        """The first operator after POSITION (counted over consecutive steps) that uses SID."""
        step, index = divmod(position, len(self.ops))
        uses = self.uses.get(sid, [])
        later = bisect.bisect_right(uses, index)
        if later < len(uses):
            return step * len(self.ops) + uses[later]
        if sid in self.persistent and uses:
            return (step + 1) * len(self.ops) + uses[0]
        return NEVER  # alive, never read again: kept (and copied) until freed all the same

    def page_out(self, sid: int) -> None:
        nbytes = self.sizes[sid]
        # Not before its page-in (if one is under way) and its last use so far end.
        ready = max(self.on_device.pop(sid), self.last_use_ends[sid])
        if sid not in self.dirty and sid in self.on_host:
            self.memory.add(max(self.now, ready), -nbytes)
            self.events.append(("drop", sid, max(self.now, ready)))
            return
        start = max(self.d2h_free, ready)
        self.d2h_free = start + nbytes / self.d2h
        self.events.append(("out", sid, start, self.d2h_free))
        self.on_host[sid] = self.d2h_free
        self.dirty.discard(sid)
        self.bytes_out += nbytes
        self.memory.add(self.d2h_free, -nbytes)

    def make_room(self, nbytes: int, position: int, keep: set[int], used_after: float) -> bool:
        """Pages out storages not in KEEP whose next use is after USED_AFTER, furthest first,
        until NBYTES fit once the page-outs under way end; False (nothing paged out) if they
        cannot."""
        short = self.memory.final() + nbytes - self.memory.limit
        if short <= 0:
            return True
        # Page-ins still under way go last: sending one back wastes both copies.
        chosen = []
        for _, next_use, sid in sorted(((self.on_device[sid] <= self.now,
                                         self.next_use(sid, position), sid)
                                        for sid in self.on_device if sid not in keep),
                                       reverse=True):
            if short <= 0:
                break
            if next_use <= used_after:
                continue
            chosen.append(sid)
            short -= self.sizes[sid]
        if short > 0:
            return False
        for sid in chosen:
            self.page_out(sid)
        return True

    def page_in(self, sid: int) -> None:
        nbytes = self.sizes[sid]
        taken = self.memory.earliest(self.now, nbytes)
        if taken is None:
            raise DoesNotFit(f"no room to page in storage {sid}")
        self.memory.add(taken, nbytes)
        start = max(taken, self.on_host[sid], self.h2d_free)
        self.h2d_free = start + nbytes / self.h2d
        self.on_device[sid] = self.h2d_free
        self.events.append(("in", sid, taken, start, self.h2d_free))
        self.bytes_in += nbytes

    def run_operator(self, position: int) -> None:
        index = position % len(self.ops)
        op, operands = self.ops[index], self.operands[index]
        coming_in = sorted(sid for sid in operands if sid in self.on_host
                           and sid not in self.on_device)
        made = [sid for sid, _ in op.allocs if sid not in self.on_device
                and sid not in self.on_host]
        needed = sum(self.sizes[sid] for sid in coming_in + made)
        if not self.make_room(needed, position, operands, position):
            raise DoesNotFit(f"operator {index} ({op.name}) needs {needed} bytes more")
        for sid in coming_in:
            self.page_in(sid)
        start = max([self.now] + [self.on_device[sid] for sid in operands if sid not in made])
        if made:
            fits_at = self.memory.earliest(start, sum(self.sizes[sid] for sid in made))
            if fits_at is None:
                raise DoesNotFit(f"operator {index} ({op.name}) cannot allocate")
            start = fits_at
            for sid in made:
                self.memory.add(start, self.sizes[sid])
                self.on_device[sid] = start
        end = start + self.durations[index]
        for sid in operands:
            self.last_use_ends[sid] = max(self.last_use_ends[sid], end)
        self.dirty.update(op.writes)
        self.dirty.update(made)
        self.now = end
        self.memory.advance(start)
        self.events.append(("op", position, start, end, tuple(made)))
        for sid in op.frees:
            if sid in self.persistent:
                continue
            self.events.append(("free", sid, end))
            if sid in self.on_device:
                self.memory.add(end, -self.sizes[sid])
                del self.on_device[sid]
            self.on_host.pop(sid, None)
            self.dirty.discard(sid)

    def page_out_ahead(self, position: int) -> None:
        """Room for what the next horizon_ms of operators allocate and page in."""
        count = len(self.ops)
        compute, net, most, ahead = 0.0, 0, 0, 1
        keep: set[int] = set(self.operands[position % count])
        coming: set[int] = set()  # made or paged in within the horizon
        while ahead < count and compute < self.horizon_ms:
            index = (position + ahead) % count
            op = self.ops[index]
            new = {sid for sid in self.operands[index]
                   if sid not in self.on_device and sid not in coming}
            coming |= new
            keep |= self.operands[index]
            net += sum(self.sizes[sid] for sid in new)
            most = max(most, net)
            net -= sum(self.sizes[sid] for sid in op.frees if sid not in self.persistent
                       and (sid in self.on_device or sid in coming))
            compute += self.durations[index]
            ahead += 1
        self.make_room(most, position, keep, position + ahead)

    def page_in_ahead(self, position: int) -> None:
        """Page-ins in the order of next use while the link is less than a few horizons behind
        and room can be made from storages used later."""
        count = len(self.ops)
        keep: set[int] = set(self.operands[position % count])
        for ahead in range(1, count):
            if ahead > 1 and self.h2d_free > self.now + PAGE_IN_LEAD_HORIZONS * self.horizon_ms:
                return
            index = (position + ahead) % count
            keep |= self.operands[index]
            for sid in sorted(self.operands[index]):
                if sid in self.on_host and sid not in self.on_device:
                    if not self.make_room(self.sizes[sid], position, keep, position + ahead):
                        return
                    self.page_in(sid)

    def start_step_one(self) -> None:
        """Persistent storages on the device while they fit, in the order of first use."""
        count = len(self.ops)
        for sid in sorted(self.persistent,
                          key=lambda s: self.uses[s][0] if self.uses.get(s) else count):
            if self.memory.base + self.sizes[sid] <= self.memory.limit:
                self.memory.base += self.sizes[sid]
                self.on_device[sid] = 0.0
                self.events.append(("device", sid))
            else:
                self.on_host[sid] = 0.0
                self.events.append(("host", sid))


def schedule(trace: Trace, gpu: Profile, limit: int, first_step_only: set[int],
             horizon_ms: float, events: list[tuple] | None = None) -> Schedule | None:
    """The clairvoyant schedule's steady step under LIMIT (module docstring); None when an
    operator cannot run under it. EVENTS, if given, receives what it did over its STEPS steps:
    ("device" | "host", storage) where each persistent storage starts; ("op", position,
    start, end, storages it made); ("free", storage, time); ("out", storage, start, end) for a
    page-out's copy; ("drop", storage, time) for a page-out without one; ("in", storage,
    memory taken, start, end) for a page-in."""
    run = _Run(trace, gpu, limit, first_step_only, horizon_ms)
    if events is not None:
        run.events = events
    run.start_step_one()
    count = len(run.ops)
    try:
        for step in range(STEPS):
            started, moved = run.now, (run.bytes_out, run.bytes_in)
            for position in range(step * count, (step + 1) * count):
                run.run_operator(position)
                run.page_out_ahead(position)
                run.page_in_ahead(position)
    except DoesNotFit:
        return None
    return Schedule(step_ms=run.now - started, bytes_out=run.bytes_out - moved[0],
                    bytes_in=run.bytes_in - moved[1], horizon_ms=horizon_ms)


def best_schedule(trace: Trace, gpu: Profile, limit: int,
                  first_step_only: set[int]) -> Schedule | None:
    """The fastest of the schedules over HORIZONS_MS; None when none runs under LIMIT."""
    schedules = [s for h in HORIZONS_MS
                 if (s := schedule(trace, gpu, limit, first_step_only, h)) is not None]
    return min(schedules, key=lambda s: s.step_ms, default=None)
