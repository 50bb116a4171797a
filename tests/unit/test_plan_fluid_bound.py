"""The least time on the simulated link as a linear program (lmsforge/plan/fluid_bound.py): steps
small enough to solve by hand, where the duplex rate, a write that makes a host copy stale and
a storage alive across steps each decide the answer; and random steps, on which it is never
below the cut bound (lmsforge/plan/bound.py) and no schedule the device model plays on a link
the simulator could give beats it."""

from __future__ import annotations

import dataclasses
import random

import pytest
from plan_steps import GPU, MS, chain
from test_plan_clairvoyant import check_schedule, play, random_step

from lmsforge.plan import bound, clairvoyant, fluid_bound, planner
from lmsforge.plan.profiles import PROFILES, profile
from lmsforge.plan.trace_format import Op, Storage, Trace

# 2000 bytes a millisecond each way alone, 1500 each while both move.
LINK = dataclasses.replace(profile("h100-pcie"), d2h_bytes_per_s=2e6, h2d_bytes_per_s=2e6,
                           duplex_bytes_per_s=1.5e6)


def op(index: int, *, reads=(), writes=(), allocs=(), frees=()) -> Op:
    return Op(id=index, name=f"op{index}", reads=list(reads), writes=list(writes),
              allocs=[list(a) for a in allocs], frees=list(frees),
              duration_us={LINK.name: MS})


def step(ops: list[Op], initial: list[Storage] | None = None) -> Trace:
    return Trace(model="hand", input="1", batch=1, dtype="float32", torch="-",
                 initial=initial or [], ops=ops)


def test_with_room_for_everything_the_bound_is_the_compute():
    assert fluid_bound.least_step_ms(chain(4, 1000), GPU, 4000, set()) == pytest.approx(8.0)


def test_a_page_out_and_a_page_in_in_one_slot_share_the_link_as_the_simulator_does():
    # A and B of 6000 B under 9000 B. Op 1 makes B: 3000 B of A went out in slot 0 (1.5 ms).
    # Op 2 reads A: A whole again and B down to 3000 B, so in slot 1 3000 B of A come in while
    # 3000 B of B go out (B is only written at op 1). The simulator moves the copy it placed
    # first at 2000 B/ms and the other at 1500 B/ms: 3500 B/ms together, 6000 / 3500 = 12/7 ms
    # (one after the other, 3 ms). Op 3 reads B after A is freed: 3000 B in, 1.5 ms. 1 ms for
    # op 3.
    trace = step([op(0, allocs=[(1, 6000)], writes=[1]),
                  op(1, allocs=[(2, 6000)], writes=[2]),
                  op(2, reads=[1], frees=[1]),
                  op(3, reads=[2], frees=[2])])
    assert fluid_bound.least_step_ms(trace, LINK, 9000, set()) == pytest.approx(4 + 12 / 7)
    # Each direction at its one-way rate while both move: 1.5 ms in slot 1.
    one_way = dataclasses.replace(LINK, duplex_bytes_per_s=2e6)
    assert fluid_bound.least_step_ms(trace, one_way, 9000, set()) == pytest.approx(5.5)
    # The cut bound moves one direction at a time and sees less of it.
    assert bound.least_step_ms(trace, LINK, 9000, set()) < 5.5


@pytest.mark.parametrize("gpu", [profile(name) for name in PROFILES], ids=lambda g: g.name)
def test_the_link_holds_every_rate_pair_the_simulator_gives_and_no_more(gpu):
    # lms_sim's place_copy_locked (its test TheTwoDirectionsOverlapAtTheDuplexRate): alone a
    # direction moves at its one-way rate; while both move the copy placed first keeps its
    # one-way rate and the other gets the duplex rate (never more than its own one-way rate).
    out_rate, in_rate = gpu.d2h_bytes_per_s, gpu.h2d_bytes_per_s
    duplex = gpu.duplex_bytes_per_s
    pairs = [(out_rate, 0.0), (0.0, in_rate), (out_rate, min(duplex, in_rate)),
             (min(duplex, out_rate), in_rate)]
    facets = fluid_bound._link_facets(gpu)
    per_ms = [(rate_out / fluid_bound.GB / 1e3, rate_in / fluid_bound.GB / 1e3)
              for rate_out, rate_in in pairs]
    for out_gb, in_gb in per_ms:  # a millisecond of each pair fits in a millisecond
        assert all(a * out_gb + b * in_gb <= 1 + 1e-9 for a, b in facets), (out_gb, in_gb)
    for a, b in facets:  # and each facet touches one of them: the hull is no larger
        assert max(a * out_gb + b * in_gb for out_gb, in_gb in per_ms) == pytest.approx(1)


def test_a_parameter_written_each_step_is_copied_out_again_each_step():
    # P (12000 B) is read by op 0 and written by op 3 (an optimizer); op 1 makes X (12000 B),
    # op 2 reads and frees it; limit 18000 B. Half of P leaves before op 1 and comes back in
    # slot 2 (6000 B, 3 ms). Op 3's write makes the host copy stale, so the 6000 B go out again
    # every step, in slot 3 or slot 0 (3 ms where 2 ms of compute run): 3 + 1 + 3 = 7 ms.
    trace = step([op(0, reads=[0]),
                  op(1, allocs=[(1, 12_000)], writes=[1]),
                  op(2, reads=[1], frees=[1]),
                  op(3, reads=[0], writes=[0])],
                 initial=[Storage(0, 12_000, "param")])
    assert fluid_bound.least_step_ms(trace, LINK, 18_000, set()) == pytest.approx(7.0)
    # Read only, P's host copy from an earlier step stays current: no copy out, 6 ms.
    trace.ops[3].writes = []
    assert fluid_bound.least_step_ms(trace, LINK, 18_000, set()) == pytest.approx(6.0)


def test_a_storage_from_before_the_step_that_it_frees_takes_no_room_after():
    # Limit 15000 B. The batch B (12000 B) is read by op 0 and freed after it, beside a
    # parameter P (6000 B) that op 3 reads: at op 0 half of P is away, dropped (its host copy
    # stays current: P is only read). Op 1 makes X (12000 B), op 2 reads and frees it: P's
    # half comes back in slot 2 (3000 B, 1.5 ms), for op 3. 1 + 1 + 1.5 + 1 = 4.5 ms. Were
    # the batch alive to the step's end, 9000 B of it would come back each step (4.5 ms more).
    trace = step([op(0, reads=[0], frees=[0]),
                  op(1, allocs=[(2, 12_000)], writes=[2]),
                  op(2, reads=[2], frees=[2]),
                  op(3, reads=[1])],
                 initial=[Storage(0, 12_000, "input"), Storage(1, 6000, "param")])
    assert fluid_bound.least_step_ms(trace, LINK, 15_000, set()) == pytest.approx(4.5)


def test_an_operator_whose_own_storages_exceed_the_limit_does_not_fit():
    trace = step([op(0, allocs=[(1, 6000)], writes=[1]),
                  op(1, reads=[1], allocs=[(2, 6000)], writes=[2], frees=[1, 2])])
    with pytest.raises(fluid_bound.DoesNotFit, match=r"operator 1 \(op1\) needs 12000 bytes"):
        fluid_bound.least_step_ms(trace, LINK, 11_999, set())
    assert fluid_bound.least_step_ms(trace, LINK, 12_000, set()) == pytest.approx(2.0)


@pytest.mark.parametrize("seed", range(40))
def test_on_random_steps_it_bounds_every_schedule_and_is_no_looser_than_the_cut(seed: int):
    # The device model times copies as the simulator does (the copy placed second slowed to
    # the duplex rate while both move), on a link whose duplex rate is below both one-way
    # rates: no schedule of it may beat the bound of the same link.
    trace = random_step(random.Random(seed))
    link = dataclasses.replace(GPU, duplex_bytes_per_s=0.8 * GPU.h2d_bytes_per_s)
    peak = trace.steady_peak_bytes()
    compute = sum(o.duration_us[GPU.name] for o in trace.ops) / MS
    assert fluid_bound.least_step_ms(trace, link, peak, set()) == pytest.approx(compute)
    for fraction in (0.8, 0.6, 0.4):
        limit = int(peak * fraction)
        try:
            least = fluid_bound.least_step_ms(trace, link, limit, set())
        except fluid_bound.DoesNotFit:
            assert max(planner.operator_bytes(trace)) > limit
            continue
        assert least >= bound.least_step_ms(trace, GPU, limit, set()) - 1e-6
        for rule in clairvoyant.EVICTION_RULES + clairvoyant.HORIZONS_MS:
            events: list[tuple] = []
            found = play(trace, link, limit, set(), rule, events)
            if found is not None:
                check_schedule(trace, limit, events, link)
                assert found.step_ms >= least - 1e-6, (fraction, rule, found, least)

