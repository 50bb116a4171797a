"""The device a clairvoyant schedule plays on (lmsforge/plan/clairvoyant.py): memory counted in
bytes over time, one copy engine a direction, operators one after another, and the primitive
moves a schedule makes on it (page out, write back, page in, run an operator), each recorded as
an event that tests replay on their own.

The model: device memory counted in bytes over time (no blocks, so no fragmentation: the
allocator's limit also pays for rounding and split blocks); one copy engine per direction, whose
copies go one after the other, with the simulator's link: a copy moves at its direction's
one-way rate, and at the duplex rate while a copy of the other direction placed before it moves
(the simulator slows only the copy it places second, lms_sim's Timing::place_copy_locked; a real
link slows both, so for a pessimistic figure pass a profile with every rate set to the duplex
one, and for the optimistic one a duplex rate at the one-way rates); the trace's roofline
durations; every operator on one stream. A schedule's figure is
the third of STEPS steps, the first starting with the persistent storages (the initial ones and
the optimizer state) on the device while they fit.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from dataclasses import dataclass

from lmsforge.plan import bound, replay
from lmsforge.plan.profiles import Profile
from lmsforge.plan.trace_format import Trace

STEPS = 3
NEVER = float("inf")


@dataclass(frozen=True)
class Schedule:
    step_ms: float
    bytes_out: int  # copied to the host, page-outs and write-backs
    bytes_in: int
    horizon_ms: float
    policy: str = "ahead"  # `schedule`'s; "planned" or "planned-by-size": `planned_schedule`'s


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
        # most_from(t) is the highest level in use once the changes up to t have happened:
        # the most of the levels from there on. One pass from the end gives it for every t
        # (calling most_from for each candidate made long schedules quadratic).
        levels = [self.base]
        for _, change in self.changes:
            levels.append(levels[-1] + change)
        most_after = levels[:]
        for index in range(len(levels) - 2, -1, -1):
            most_after[index] = max(levels[index], most_after[index + 1])
        times = [time for time, _ in self.changes]
        for time in [start] + [t for t, n in self.changes if t > start and n < 0]:
            if most_after[bisect.bisect_right(times, time)] + nbytes <= self.limit:
                return time
        return None


class Device:
    """One schedule's device over its steps: where each storage is, the engines, the events."""

    def __init__(self, trace: Trace, gpu: Profile, limit: int, first_step_only: set[int]) -> None:
        self.ops = bound.steady_ops(trace, first_step_only)
        self.durations = [op.duration_us.get(gpu.name, 0.0) / 1e3 for op in self.ops]
        self.d2h = gpu.d2h_bytes_per_s / 1e3  # bytes per ms
        self.h2d = gpu.h2d_bytes_per_s / 1e3
        self.duplex = gpu.duplex_bytes_per_s / 1e3
        # Each direction's copies so far, (starts, ends) in order: the engine runs one at a time.
        self.copies: dict[str, tuple[list[float], list[float]]] = {"out": ([], []),
                                                                    "in": ([], [])}
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

    def copy_ends(self, direction: str, start: float, nbytes: int) -> float:
        """When a copy of NBYTES in DIRECTION ("out" or "in") placed now at START ends, as the
        simulator times it: at the direction's one-way rate, at the duplex rate (if lower)
        while a copy of the other direction placed before it moves. Records it."""
        alone = self.d2h if direction == "out" else self.h2d
        shared_rate = min(self.duplex, alone)
        starts, ends = self.copies["in" if direction == "out" else "out"]
        at = bisect.bisect_right(ends, start)  # the other's first copy still moving at START
        time, left = start, float(nbytes)
        while True:
            shared = at < len(starts) and starts[at] <= time
            rate = shared_rate if shared else alone
            until = ends[at] if shared else starts[at] if at < len(starts) else NEVER
            if (until - time) * rate >= left:
                end = time + left / rate
                break
            left -= (until - time) * rate
            time = until
            if shared:
                at += 1
        own_starts, own_ends = self.copies[direction]
        own_starts.append(start)
        own_ends.append(end)
        return end

    def page_out(self, sid: int) -> None:
        nbytes = self.sizes[sid]
        # Not before its page-in (if one is under way) and its last use so far end.
        ready = max(self.on_device.pop(sid), self.last_use_ends[sid])
        if sid not in self.dirty and sid in self.on_host:
            # Not before its host copy is whole (a write-back may still be under way).
            at = max(self.now, ready, self.on_host[sid])
            self.memory.add(at, -nbytes)
            self.events.append(("drop", sid, at))
            return
        start = max(self.d2h_free, ready)
        self.d2h_free = self.copy_ends("out", start, nbytes)
        self.events.append(("out", sid, start, self.d2h_free))
        self.on_host[sid] = self.d2h_free
        self.dirty.discard(sid)
        self.bytes_out += nbytes
        self.memory.add(self.d2h_free, -nbytes)

    def write_back(self, sid: int) -> None:
        """Copies SID to the host and keeps it on the device: its page-out is then a drop."""
        nbytes = self.sizes[sid]
        start = max(self.d2h_free, self.on_device[sid], self.last_use_ends[sid])
        self.d2h_free = self.copy_ends("out", start, nbytes)
        self.events.append(("back", sid, start, self.d2h_free))
        self.on_host[sid] = self.d2h_free
        self.dirty.discard(sid)
        self.bytes_out += nbytes

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
        self.h2d_free = self.copy_ends("in", start, nbytes)
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
