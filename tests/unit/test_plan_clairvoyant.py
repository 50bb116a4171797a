"""The clairvoyant schedules (lmsforge/plan/clairvoyant.py) and their device
(lmsforge/plan/schedule_device.py): the memory model, steps small enough to follow by hand, and
random steps on which no schedule may beat the least-time bound (lmsforge/plan/bound.py), a
cross-check of both; on small real models, of the linear program's bound too
(lmsforge/plan/fluid_bound.py)."""

from __future__ import annotations

import dataclasses
import random

import pytest
from plan_steps import GPU, MS, chain

from lmsforge.plan import bound, clairvoyant, fluid_bound, models, replay
from lmsforge.plan.schedule_device import Device, Timeline
from lmsforge.plan.profiles import Profile, profile
from lmsforge.plan.trace import trace_step
from lmsforge.plan.trace_format import Op, Storage, Trace


def check_schedule(trace: Trace, limit: int, events: list[tuple], gpu: Profile = GPU,
                   first_step_only: frozenset[int] = frozenset()) -> None:
    """Replays a schedule's EVENTS (clairvoyant.schedule, planned_schedule) on their own and fails
    where it could not run on a device: an operator without its inputs on the device, a copy
    before the last use or of stale data, a dropped page-out whose host copy is old or not yet
    whole, a write-back written over before its drop (a wasted copy), copies overlapping on
    one engine, or more bytes on the device at any time than LIMIT."""
    ops = bound.steady_ops(trace, set(first_step_only))
    sizes = {s.id: s.bytes for s in trace.initial}
    for op in trace.ops:
        sizes.update((sid, nbytes) for sid, nbytes in op.allocs)
    opened: dict[int, float] = {}  # storage on the device: since when it holds memory
    valid: dict[int, float] = {}  # ... and when its data got there
    version: dict[int, int] = {}  # writes so far
    host: dict[int, tuple[float, int]] = {}  # host copy: when valid, of which version
    last_use: dict[int, float] = {}
    held: list[tuple[float, float, int]] = []  # (from, until, bytes) of device memory
    engine = {"out": 0.0, "in": 0.0}
    backed: set[int] = set()  # written back and still on the device: a write wastes the copy
    previous_end = 0.0

    copied: dict[str, list[tuple[float, float]]] = {"out": [], "in": []}

    def moved(direction: str, start: float, end: float) -> float:
        # The bytes a copy from START to END moves on the simulator's link: its one-way rate,
        # the duplex rate (if lower) while a copy of the other direction placed before it
        # (an earlier event) moves.
        alone = (gpu.d2h_bytes_per_s if direction == "out" else gpu.h2d_bytes_per_s) / 1e3
        shared_rate = min(alone, gpu.duplex_bytes_per_s / 1e3)
        other = copied["in" if direction == "out" else "out"]
        overlap = sum(max(0.0, min(end, o_end) - max(start, o_start)) for o_start, o_end in other)
        copied[direction].append((start, end))
        return (end - start - overlap) * alone + overlap * shared_rate

    def close(sid: int, at: float) -> None:
        assert at >= last_use.get(sid, 0.0), (sid, at, "gone before its last use ended")
        held.append((opened.pop(sid), at, sizes[sid]))
        valid.pop(sid)

    for event in events:
        kind, sid = event[0], event[1]
        if kind == "device":
            opened[sid], valid[sid], version[sid] = 0.0, 0.0, 0
        elif kind == "host":
            version[sid] = 0
            host[sid] = (0.0, 0)
        elif kind == "op":
            _, position, start, end, made = event
            op = ops[position % len(ops)]
            assert start >= previous_end - 1e-9, ("operators overlap", event)
            assert end - start == pytest.approx(op.duration_us[gpu.name] / MS)
            previous_end = end
            for made_sid in made:
                assert made_sid not in opened, ("made twice", event)
                opened[made_sid], valid[made_sid] = start, start
                version[made_sid] = 0
            for used in set(op.reads) | set(op.writes):
                assert used in opened and valid[used] <= start + 1e-9, ("input missing", event,
                                                                         used)
            for used in set(op.reads) | set(op.writes) | set(made):
                last_use[used] = max(last_use.get(used, 0.0), end)
            for written in set(op.writes) | set(made):
                assert written not in backed, ("written again after its write-back", event)
                version[written] += 1
        elif kind == "free":
            if sid in opened:
                close(sid, event[2])
            host.pop(sid, None)
        elif kind in ("out", "back"):
            # A page-out's copy gives the device memory back when it ends; a write-back's keeps
            # the device copy.
            _, _, start, end = event
            assert sid in opened and start >= valid[sid] - 1e-9, ("copied before it arrived",
                                                                  event)
            assert start >= engine["out"] - 1e-9, ("copies overlap", event)
            assert moved("out", start, end) == pytest.approx(sizes[sid]), ("copy time", event)
            engine["out"] = end
            assert start >= last_use.get(sid, 0.0) - 1e-9, ("copied while in use", event)
            host[sid] = (end, version[sid])
            if kind == "out":
                close(sid, end)
            else:
                backed.add(sid)
        elif kind == "drop":
            assert sid in opened and event[2] >= valid[sid] - 1e-9, ("dropped mid-copy", event)
            assert sid in host and host[sid][1] == version[sid], ("dropped its only copy", event)
            assert event[2] >= host[sid][0] - 1e-9, ("dropped before its host copy ended", event)
            backed.discard(sid)
            close(sid, event[2])
        elif kind == "in":
            _, _, taken, start, end = event
            assert sid not in opened and sid in host, ("paged in from nowhere", event)
            assert host[sid][1] == version[sid], ("paged in stale data", event)
            assert start >= max(host[sid][0], taken, engine["in"]) - 1e-9, ("copy too early",
                                                                           event)
            assert moved("in", start, end) == pytest.approx(sizes[sid]), ("copy time", event)
            engine["in"] = end
            opened[sid], valid[sid] = taken, end
        else:
            raise AssertionError(f"unknown event {event}")
    held += [(since, float("inf"), sizes[sid]) for sid, since in opened.items()]
    # Memory given back at a time may be taken again at that time: releases sort first.
    changes = sorted([(since, 1, n) for since, _, n in held] + [(until, 0, -n)
                                                               for _, until, n in held])
    in_use = 0
    for time, _, nbytes in changes:
        in_use += nbytes
        assert in_use <= limit, (time, in_use, limit)


def test_a_copy_placed_while_the_other_direction_moves_gets_the_duplex_rate_meanwhile():
    # 2000 B/ms one way alone, 1500 B/ms for the copy placed second while both move, as the
    # simulator times them (lms_sim's TheTwoDirectionsOverlapAtTheDuplexRate).
    link = dataclasses.replace(GPU, d2h_bytes_per_s=2e6, h2d_bytes_per_s=2e6,
                               duplex_bytes_per_s=1.5e6)
    device = Device(chain(1, 0), link, 1000, set())
    assert device.copy_ends("out", 0.0, 4000) == pytest.approx(2.0)  # alone: kept
    # From 1 to 2 beside the page-out: 1500 B; the other 1500 B alone in 0.75 ms.
    assert device.copy_ends("in", 1.0, 3000) == pytest.approx(2.75)
    # A page-out placed after it is the slowed one: 1000 B at 1500 B/ms.
    assert device.copy_ends("out", 2.0, 1000) == pytest.approx(2 + 2 / 3)
    # Once both engines are idle, alone again.
    assert device.copy_ends("in", 3.0, 2000) == pytest.approx(4.0)


def test_memory_given_back_later_is_waited_for_and_never_overdrawn():
    memory = Timeline(100)
    memory.add(0.0, 80)
    memory.add(5.0, -50)  # a page-out's copy ends at 5
    assert memory.earliest(1.0, 20) == 1.0
    assert memory.earliest(1.0, 40) == 5.0
    assert memory.earliest(1.0, 80) is None
    memory.add(5.0, 40)
    # Taking memory now that is promised to a later page-in overdraws it.
    memory.add(7.0, 30)
    with pytest.raises(AssertionError, match="over the limit"):
        memory.add(2.0, 15)
    memory.advance(6.0)
    assert (memory.base, memory.final()) == (70, 100)


def test_with_room_for_everything_it_moves_nothing_and_takes_the_compute():
    found = clairvoyant.schedule(chain(4, 1000), GPU, 4000, set(), horizon_ms=0.5)
    assert found == clairvoyant.Schedule(step_ms=8.0, bytes_out=0, bytes_in=0, horizon_ms=0.5)


def test_under_a_limit_it_pages_out_and_in_and_the_bound_holds():
    # 4 activations of 10000 B under 20000 B: the bound is 30 ms (test_plan_bound.py).
    trace = chain(4, 10_000)
    least = bound.least_step_ms(trace, GPU, 20_000, set())
    found = clairvoyant.best_schedule(trace, GPU, 20_000, set())
    assert found is not None
    assert found.step_ms >= least == pytest.approx(30.0)
    # Two activations at least went out before the last forward operator, and came back.
    assert found.bytes_out >= 20_000 and found.bytes_in >= 20_000


def test_an_operator_that_cannot_fit_gives_no_schedule():
    # Operator 2 reads a 1000 B activation and makes another: 2000 B under 1500 B.
    assert clairvoyant.best_schedule(chain(3, 1000), GPU, 1500, set()) is None


def play(trace: Trace, gpu: Profile, limit: int, first_only: set[int], horizon: float | str,
         events: list[tuple]) -> clairvoyant.Schedule | None:
    """clairvoyant.schedule at HORIZON, or planned_schedule under an eviction rule's name."""
    if horizon in clairvoyant.EVICTION_RULES:
        return clairvoyant.planned_schedule(trace, gpu, limit, first_only, events, rule=horizon)
    return clairvoyant.schedule(trace, gpu, limit, first_only, horizon, events)


def test_the_planned_schedule_writes_back_early_so_its_page_outs_are_drops():
    # chain(4, 10000) under 20000 B, links of 2 MB/s out (5 ms) and 1 MB/s in (10 ms). Step
    # 3 starts at 72 ms. Op 16 makes a1 [72, 73]; a1 is final, so it is written back at once,
    # while op 17 reads it: [73, 78]; op 17 makes a2 [73, 74], written back [78, 83]. a3 needs
    # a1's room: dropped at 78 when its copy is whole, op 18 [78, 79]; a4 the same with a2:
    # op 19 [83, 84]. Backward: op 20 [84, 85], op 21 [85, 86] frees a3, a2 comes in [86, 96],
    # op 22 [96, 97] frees it, a1 comes in [97, 107], op 23 [107, 108]: 36 ms. The schedule
    # that copies a1 out only after op 17's read takes 37.
    trace = chain(4, 10_000)
    events: list[tuple] = []
    planned = clairvoyant.planned_schedule(trace, GPU, 20_000, set(), events)
    assert planned == clairvoyant.Schedule(step_ms=36.0, bytes_out=20_000, bytes_in=20_000,
                                           horizon_ms=0.0, policy="planned")
    check_schedule(trace, 20_000, events)
    assert ("back", 1, 73.0, 78.0) in events and ("drop", 1, 78.0) in events
    assert min(clairvoyant.schedule(trace, GPU, 20_000, set(), h).step_ms
               for h in clairvoyant.HORIZONS_MS) == 37.0
    assert clairvoyant.best_schedule(trace, GPU, 20_000, set()) == planned


def test_the_planned_step_writes_back_what_the_next_step_pages_out():
    # A parameter P (10000 B) is read at op 0, which makes a1; op 1 makes a2 from a1, and P must
    # go out for it under 20000 B; op 2 reads and frees both; op 3 (an optimizer) reads and
    # writes P. P's page-out at op 1 is a drop only if P was written back after op 3 of the step
    # before. Every step, the last played one included, must pay that write-back: a steady step
    # moves 10000 B each way, and its write-back of P follows its op 3.
    def op(index: int, reads: list[int], writes: list[int], allocs: list[list[int]],
           frees: list[int]) -> Op:
        return Op(id=index, name=f"op{index}", reads=reads, writes=writes + [s for s, _ in allocs],
                  allocs=allocs, frees=frees, duration_us={GPU.name: MS})
    trace = Trace(model="optimizer", input="1", batch=1, dtype="float32", torch="-",
                  initial=[Storage(0, 10_000, "param")],
                  ops=[op(0, [0], [], [[1, 10_000]], []), op(1, [1], [], [[2, 10_000]], []),
                       op(2, [1, 2], [], [], [1, 2]), op(3, [0], [0], [], [])])
    events: list[tuple] = []
    planned = clairvoyant.planned_schedule(trace, GPU, 20_000, set(), events)
    check_schedule(trace, 20_000, events)
    assert (planned.bytes_out, planned.bytes_in) == (10_000, 10_000)
    last_step = max(event[1] for event in events if event[0] == "op") // 4
    optimizer_ends = next(event[3] for event in events
                          if event[0] == "op" and event[1] == 4 * last_step + 3)
    assert any(event[:2] == ("back", 0) and event[2] >= optimizer_ends for event in events)


def test_weighing_by_size_moves_one_large_storage_where_belady_moves_two():
    # Op 0 makes A (10000 B, read at op 4), op 1 makes B (1000 B, read at op 5), op 2 makes C
    # (10000 B) under 11000 B. Belady's rule sends out B (used last), which is not room enough,
    # then A: 11000 B each way. Weighed by size, A ranks first (2 operators x 100 against
    # 3 x 31.6) and is room enough alone: 10000 B each way.
    def op(index: int, reads: list[int], allocs: list[list[int]], frees: list[int]) -> Op:
        return Op(id=index, name=f"op{index}", reads=reads, writes=[sid for sid, _ in allocs],
                  allocs=allocs, frees=frees, duration_us={GPU.name: MS})
    trace = Trace(model="sizes", input="1", batch=1, dtype="float32", torch="-", initial=[],
                  ops=[op(0, [], [[1, 10_000]], []), op(1, [], [[2, 1000]], []),
                       op(2, [], [[3, 10_000]], []), op(3, [3], [], [3]), op(4, [1], [], [1]),
                       op(5, [2], [], [2])])
    moved = {}
    for rule in clairvoyant.EVICTION_RULES:
        events: list[tuple] = []
        found = clairvoyant.planned_schedule(trace, GPU, 11_000, set(), events, rule=rule)
        check_schedule(trace, 11_000, events)
        moved[rule] = (found.bytes_out, found.bytes_in)
    assert moved == {"furthest": (11_000, 11_000), "furthest-by-size": (10_000, 10_000)}


def test_a_drop_before_its_write_back_ends_is_caught():
    # The checker's own test: a page-out without a copy must wait for the write-back.
    trace = chain(1, 10_000)  # op 0 makes a1, op 1 reads and frees it
    made = [("device", 0), ("op", 0, 0.0, 1.0, (1,)), ("back", 1, 1.0, 6.0)]
    with pytest.raises(AssertionError, match="before its host copy ended"):
        check_schedule(trace, 10_000, made + [("drop", 1, 5.0)])
    check_schedule(trace, 10_000, made + [("drop", 1, 6.0), ("in", 1, 6.0, 6.0, 16.0),
                                          ("op", 1, 16.0, 17.0, ()), ("free", 1, 17.0)])


def random_step(rng: random.Random) -> Trace:
    """A step of 6-30 operators on 3 parameters and fresh storages, each operator reading a
    few live ones, making 0-2, and freeing some of those no later operator reads."""
    initial = [Storage(i, rng.randrange(1, 5) * 1000, "param") for i in range(3)]
    live = [s.id for s in initial]
    made: list[int] = []
    ops: list[Op] = []
    next_id = len(initial)
    count = rng.randrange(6, 31)
    for index in range(count):
        reads = rng.sample(live, k=min(len(live), rng.randrange(1, 4)))
        allocs = [[next_id + k, rng.randrange(1, 9) * 1000] for k in range(rng.randrange(0, 3))]
        next_id += len(allocs)
        ops.append(Op(id=index, name=f"op{index}", reads=reads,
                      writes=[sid for sid, _ in allocs] + rng.sample(reads, k=rng.randrange(0, 2)),
                      allocs=allocs, frees=[],
                      duration_us={GPU.name: rng.choice([200.0, 1000.0, 3000.0])}))
        live += [sid for sid, _ in allocs]
        made += [sid for sid, _ in allocs]
    # Each fresh storage dies after its last use: a transient, as activations are.
    last_use = {sid: i for i, op in enumerate(ops) for sid in op.reads + op.writes}
    for sid in made:
        ops[last_use.get(sid, 0)].frees.append(sid)
    return Trace(model="random", input="1", batch=1, dtype="float32", torch="-",
                 initial=initial, ops=ops)


@pytest.mark.parametrize("seed", range(40))
def test_on_random_steps_no_schedule_beats_the_least_time_bound(seed: int):
    rng = random.Random(seed)
    trace = random_step(rng)
    peak = trace.steady_peak_bytes()
    compute = sum(op.duration_us[GPU.name] for op in trace.ops) / MS
    roomy = clairvoyant.schedule(trace, GPU, peak, set(), horizon_ms=0.25)
    assert roomy is not None and roomy.step_ms == pytest.approx(compute)
    assert (roomy.bytes_out, roomy.bytes_in) == (0, 0)
    for fraction in (0.8, 0.6, 0.4):
        limit = int(peak * fraction)
        least = bound.least_step_ms(trace, GPU, limit, set())
        for horizon in clairvoyant.HORIZONS_MS + clairvoyant.EVICTION_RULES:
            # The memory model raises AssertionError if the schedule overdraws the limit;
            # check_schedule checks it on its own.
            events: list[tuple] = []
            found = play(trace, GPU, limit, set(), horizon, events)
            if found is not None:
                check_schedule(trace, limit, events)
                assert found.step_ms >= least - 1e-9, (fraction, horizon, found, least)


@pytest.mark.parametrize("spec", [
    # Operators long enough (a few µs at least) that the horizons do not span the whole step.
    models.resnet_step(image=128, batch=4, blocks=(1, 1, 1, 1)),
    models.unet3d_step(side=64, batch=1, base=8, depth=2),
    models.gpt_step(tokens=256, batch=4, layers=2, width=256, heads=4, vocab=5000),
], ids=lambda spec: spec.name)
def test_on_small_real_models_every_schedule_could_run(spec):
    # The shapes of the model benchmarks, traced small, with an optimizer whose state a later
    # step finds alive: every schedule under a half and a quarter of the peak passes
    # check_schedule and no faster than the least time.
    gpu = profile("h100-pcie")
    trace = trace_step(*spec.step_args(), model_name=spec.name, input_desc=spec.input,
                       batch=spec.batch, profiles=[gpu.name])
    first_only = replay.first_step_only(trace)
    completed = fluid_rows = 0
    for fraction in (2, 4):
        limit = trace.steady_peak_bytes() // fraction
        least = bound.least_step_ms(trace, gpu, limit, first_only)
        for horizon in clairvoyant.HORIZONS_MS + clairvoyant.EVICTION_RULES:
            events: list[tuple] = []
            found = play(trace, gpu, limit, first_only, horizon, events)
            if found is not None:
                completed += 1
                check_schedule(trace, limit, events, gpu, frozenset(first_only))
                assert found.step_ms >= least - 1e-9
                assert found.bytes_out > 0 and found.bytes_in > 0
        # The linear program's bound (fluid_bound) is never looser than the cut, and the best
        # schedule on the simulator's link (the device model's) does not beat it.
        found = clairvoyant.best_schedule(trace, gpu, limit, first_only)
        try:
            fluid = fluid_bound.least_step_ms(trace, gpu, limit, first_only)
        except fluid_bound.DoesNotFit:
            assert found is None
            continue
        assert fluid >= least - 1e-6
        assert found is not None and found.step_ms >= fluid - 1e-6, (fraction, found, fluid)
        fluid_rows += 1
    assert fluid_rows > 0
    assert completed > 0
