"""A clairvoyant schedule of a traced step under an LMS limit: what a policy that knows the
step's future (say, recorded in the step before) could reach, set beside the real allocator's
replay and bound.least_step_ms.

The least-time bound is a lower bound no schedule beats; it may be loose. The replay is what
LMS does. These are two schedules that know every operator's next use, played on a model of the
device, so that a gap between the replay and the bound can be split: the part a better policy
could win, and the part no policy here reaches. They are heuristics, not an optimum: a faster
schedule may exist, so they never prove that the bound is out of reach. `best_schedule` takes
the faster.

`planned_schedule` (its docstring) fixes the decisions first and then the times. `schedule`
decides as it goes:

- page-outs take the device storage whose next use is furthest away (Belady's rule), copy it to
  the host after its last use so far, and give its memory back when the copy ends; a storage
  whose host copy is still valid (paged in or written back, and not written since) goes without
  a copy, once that copy is whole;
- before each operator, page-outs ahead make room for what the operators of the next
  `horizon_ms` of compute allocate and page in;
- page-ins go ahead in the order of next use, as soon as memory can be made by paging out only
  storages used later than the one coming in; their device memory is taken when they are issued,
  as the allocator does;
- an operator starts when the one before it ended, its inputs are on the device, and its
  allocations fit.

The device model, its events and the primitive moves are lmsforge/plan/schedule_device.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from lmsforge.plan.profiles import Profile
from lmsforge.plan.schedule_device import STEPS, Device, DoesNotFit, Schedule
from lmsforge.plan.trace_format import Trace

# Compute ahead that page-outs make room for; the best of these is the figure.
# (0, 1 and 2 ms were never the best on the benchmark models.)
HORIZONS_MS = (0.1, 0.25, 0.5)
# Page-ins ahead stop while the link is this many horizons behind compute: further ahead, what
# they bring in waits longer on the device and takes room that page-outs must then make.
PAGE_IN_LEAD_HORIZONS = 4


def _page_out_ahead(device: Device, horizon_ms: float, position: int) -> None:
    """Room for what the next HORIZON_MS of operators allocate and page in."""
    count = len(device.ops)
    compute, net, most, ahead = 0.0, 0, 0, 1
    keep: set[int] = set(device.operands[position % count])
    coming: set[int] = set()  # made or paged in within the horizon
    while ahead < count and compute < horizon_ms:
        index = (position + ahead) % count
        op = device.ops[index]
        new = {sid for sid in device.operands[index]
               if sid not in device.on_device and sid not in coming}
        coming |= new
        keep |= device.operands[index]
        net += sum(device.sizes[sid] for sid in new)
        most = max(most, net)
        net -= sum(device.sizes[sid] for sid in op.frees if sid not in device.persistent
                   and (sid in device.on_device or sid in coming))
        compute += device.durations[index]
        ahead += 1
    device.make_room(most, position, keep, position + ahead)


def _page_in_ahead_within_lead(device: Device, horizon_ms: float, position: int) -> None:
    """Page-ins in the order of next use while the link is less than a few horizons behind
    and room can be made from storages used later."""
    count = len(device.ops)
    keep: set[int] = set(device.operands[position % count])
    for ahead in range(1, count):
        if ahead > 1 and device.h2d_free > device.now + PAGE_IN_LEAD_HORIZONS * horizon_ms:
            return
        index = (position + ahead) % count
        keep |= device.operands[index]
        for sid in sorted(device.operands[index]):
            if sid in device.on_host and sid not in device.on_device:
                if not device.make_room(device.sizes[sid], position, keep, position + ahead):
                    return
                device.page_in(sid)


def schedule(trace: Trace, gpu: Profile, limit: int, first_step_only: set[int],
             horizon_ms: float, events: list[tuple] | None = None) -> Schedule | None:
    """The clairvoyant schedule's steady step under LIMIT (module docstring); None when an
    operator cannot run under it. EVENTS, if given, receives what it did over its STEPS steps:
    ("device" | "host", storage) where each persistent storage starts; ("op", position,
    start, end, storages it made); ("free", storage, time); ("out", storage, start, end) for a
    page-out's copy; ("drop", storage, time) for a page-out without one; ("in", storage,
    memory taken, start, end) for a page-in; ("back", storage, start, end) for a write-back
    (planned_schedule's only)."""
    run = Device(trace, gpu, limit, first_step_only)
    if events is not None:
        run.events = events
    run.start_step_one()
    count = len(run.ops)
    try:
        for step in range(STEPS):
            started, moved = run.now, (run.bytes_out, run.bytes_in)
            for position in range(step * count, (step + 1) * count):
                run.run_operator(position)
                _page_out_ahead(run, horizon_ms, position)
                _page_in_ahead_within_lead(run, horizon_ms, position)
    except DoesNotFit:
        return None
    return Schedule(step_ms=run.now - started, bytes_out=run.bytes_out - moved[0],
                    bytes_in=run.bytes_in - moved[1], horizon_ms=horizon_ms)


@dataclass
class BeladyPlan:
    """A planned schedule's decisions, made without time over some steps: per position, the
    storages paged out before its operator and those paged in for it, and the bytes on the
    device while it runs."""
    evictions: list[list[int]]
    page_ins: list[list[int]]
    during: list[int]


# How the planned schedule picks what to page out: by its next use alone (Belady's rule, the
# fewest storages moved), or by the distance to it times the square root of the storage's
# bytes, which among storages used about as far ahead sends out the larger: fewer bytes moved
# when sizes differ (the U-Net at 1/2: 2.42 -> 1.98 GiB out, 96.3 -> 82.5 ms), slower where
# they do not (ResNet-50 at 1/2: 70.4 -> 74.0 ms). best_schedule tries both. (Distance times
# bytes was tried too: never better than the better of these two on the benchmark models.)
EVICTION_RULES = ("furthest", "furthest-by-size")


def _eviction_key(run: Device, rule: str, position: int):
    if rule == "furthest":
        return lambda sid: (run.next_use(sid, position), sid)
    return lambda sid: ((run.next_use(sid, position) - position) * max(run.sizes[sid], 1) ** 0.5,
                        sid)


def belady_plan(run: Device, rule: str, steps: int = STEPS) -> BeladyPlan:
    """RUN's decisions over STEPS steps when each operator pages out, just before it runs, the
    storages that RULE (EVICTION_RULES) ranks first until its operands fit; RUN has only placed
    the persistent storages (start_step_one)."""
    count, limit, sizes = len(run.ops), run.memory.limit, run.sizes
    on_device, on_host = set(run.on_device), set(run.on_host)
    used = run.memory.final()
    plan = BeladyPlan([], [], [])
    for position in range(steps * count):
        op, operands = run.ops[position % count], run.operands[position % count]
        coming = sorted(sid for sid in operands if sid not in on_device)
        needed = sum(sizes[sid] for sid in coming)
        evicted = []
        if used + needed > limit:
            for sid in sorted(on_device - operands, key=_eviction_key(run, rule, position),
                              reverse=True):
                if used + needed <= limit:
                    break
                evicted.append(sid)
                on_device.discard(sid)
                on_host.add(sid)
                used -= sizes[sid]
            if used + needed > limit:
                raise DoesNotFit(f"operator {position % count} ({op.name}) needs {needed} bytes "
                                 "more")
        plan.evictions.append(evicted)
        plan.page_ins.append([sid for sid in coming if sid in on_host])
        on_device.update(coming)
        used += needed
        plan.during.append(used)
        for sid in op.frees:
            if sid in run.persistent:
                continue
            if sid in on_device:
                on_device.discard(sid)
                used -= sizes[sid]
            on_host.discard(sid)
    return plan


def planned_schedule(trace: Trace, gpu: Profile, limit: int, first_step_only: set[int],
                     events: list[tuple] | None = None,
                     rule: str = "furthest") -> Schedule | None:
    """The second clairvoyant schedule: decisions made on demand first, without time
    (belady_plan: before each operator, page out what RULE ranks first until its operands fit),
    then played with every copy as early as it can go:

    - what the plan pages out is written back to the host as soon as its data is final (no
      operator writes it again before then), in the order of the page-outs, so that the
      page-out itself is a drop that frees memory at once;
    - what it pages in goes ahead in the order of need, as far ahead as the plan leaves room
      at every operator until the one that needs it.

    Same device model, events and figure as `schedule` (`horizon_ms` 0, `policy` "planned" or
    "planned-by-size"); None when an operator cannot run under LIMIT."""
    run = Device(trace, gpu, limit, first_step_only)
    if events is not None:
        run.events = events
    run.start_step_one()
    try:
        # One step more than is played: the last played step then writes back, and pages in
        # ahead, for the next one's page-outs and page-ins, as every step before it does. (Without
        # it, what the optimizer writes at the end of the last step, paged out in the next, was
        # never written back: GPT-2's step at 1/2 counted 3.7 GB out instead of 7.2.)
        plan = belady_plan(run, rule, STEPS + 1)
    except DoesNotFit:
        return None
    count, total = len(run.ops), len(plan.during)
    # Planned page-outs, in order, each with the last position that writes the storage before.
    last_write: dict[int, int] = {}
    outs: list[tuple[int, int, int]] = []
    for position in range(total):
        outs += [(position, sid, last_write.get(sid, -1)) for sid in plan.evictions[position]]
        op = run.ops[position % count]
        last_write.update((sid, position) for sid in set(op.writes) | {s for s, _ in op.allocs})
    ahead = [0] * total  # bytes paged in early, on the device while each position runs
    issued: set[tuple[int, int]] = set()
    first_due = 0  # the first position whose page-ins may not all have been issued
    for step in range(STEPS):
        started, moved = run.now, (run.bytes_out, run.bytes_in)
        for position in range(step * count, (step + 1) * count):
            for sid in plan.evictions[position]:
                run.page_out(sid)
            for sid in plan.page_ins[position]:
                if (position, sid) not in issued:
                    run.page_in(sid)
            decided = len(run.events)
            run.run_operator(position)
            # The plan made room for the operator: anything else moved would break it.
            assert all(event[0] == "op" or event[0] == "free" for event in run.events[decided:])
            outs = [entry for entry in outs if entry[0] > position]
            for _, sid, written in outs:
                if written <= position and sid in run.dirty and sid in run.on_device:
                    run.write_back(sid)
            first_due = _page_in_as_planned(run, plan, position,
                                            max(first_due, position + 1), ahead, issued)
    return Schedule(step_ms=run.now - started, bytes_out=run.bytes_out - moved[0],
                    bytes_in=run.bytes_in - moved[1], horizon_ms=0.0,
                    policy="planned" if rule == "furthest" else "planned-by-size")


def _page_in_as_planned(run: Device, plan: BeladyPlan, position: int, due: int, ahead: list[int],
                        issued: set[tuple[int, int]]) -> int:
    """Issues the plan's page-ins from position DUE on, in order, after POSITION ran, while each
    fits beside the plan (and the page-ins issued early) at every position until it is needed;
    returns the first position with one left."""
    limit = run.memory.limit
    while due < len(plan.during):
        for sid in plan.page_ins[due]:
            if (due, sid) in issued:
                continue
            nbytes = run.sizes[sid]
            if (sid not in run.on_host or sid in run.on_device  # not paged out yet
                    or any(plan.during[j] + ahead[j] + nbytes > limit
                           for j in range(position, due))):
                return due
            for j in range(position, due):
                ahead[j] += nbytes
            run.page_in(sid)
            issued.add((due, sid))
        due += 1
    return due


def best_schedule(trace: Trace, gpu: Profile, limit: int,
                  first_step_only: set[int]) -> Schedule | None:
    """The fastest of the schedules over HORIZONS_MS and the planned ones over EVICTION_RULES;
    None when none runs under LIMIT."""
    schedules = [s for h in HORIZONS_MS
                 if (s := schedule(trace, gpu, limit, first_step_only, h)) is not None]
    schedules += [s for rule in EVICTION_RULES
                  if (s := planned_schedule(trace, gpu, limit, first_step_only, rule=rule))
                  is not None]
    return min(schedules, key=lambda s: s.step_ms, default=None)
