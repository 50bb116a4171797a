"""The least time a step can take under an LMS limit (lmsforge/plan/bound.py), on steps small
enough to count by hand: a forward pass that makes activations and a backward pass that reads
them in reverse."""

from __future__ import annotations

import pytest
from plan_steps import GPU, MS, chain

from lmsforge.plan import bound
from lmsforge.plan.trace_format import Storage


def test_with_room_for_everything_the_bound_is_the_compute():
    assert bound.least_step_ms(chain(4, 1000), GPU, 4000, set()) == pytest.approx(8.0)


def test_what_exceeds_the_limit_goes_out_before_the_peak_and_comes_back_after_it():
    # 4 activations of 1000 B; limit 2000 B. When the last forward operator starts, all
    # 4000 B are alive: 2000 B went out before it (1 ms at 2 MB/s, less than the 3 ms of
    # compute before it). All 4 are read after it starts, with 2000 B of room: 2000 B come back
    # after it, 2 ms at 1 MB/s, less than the 5 ms of compute left. Compute rules.
    assert bound.least_step_ms(chain(4, 1000), GPU, 2000, set()) == pytest.approx(8.0)
    # Ten times the bytes: out 20000 B before operator 3 (10 ms against 3 ms of compute), in
    # 20000 B after it (20 ms against 5 ms): 30 ms, where either direction alone takes 20 ms
    # at most (the planner's overlapped bound).
    assert bound.least_step_ms(chain(4, 10_000), GPU, 20_000, set()) == pytest.approx(30.0)


def test_a_lower_limit_never_lowers_the_bound():
    trace = chain(6, 10_000)
    bounds = [bound.least_step_ms(trace, GPU, limit, set())
              for limit in (60_000, 40_000, 30_000, 20_000, 10_000)]
    assert bounds == sorted(bounds) and bounds[0] == pytest.approx(12.0) and bounds[-1] > 12.0


def test_operators_of_the_first_step_only_are_not_counted():
    trace = chain(2, 1000)
    assert bound.least_step_ms(trace, GPU, 2000, {0}) == pytest.approx(3.0)


def test_persistent_storages_count_for_neither_direction():
    # A parameter of 100000 B that every operator reads: a schedule may page it out in one
    # step and in during the next, so only the activations' excess is bound to this step.
    trace = chain(4, 10_000)
    trace.initial = [Storage(0, 100_000, "param")]
    for op in trace.ops:
        op.reads = sorted(set(op.reads) | {0})
    assert bound.least_step_ms(trace, GPU, 20_000, set()) == pytest.approx(30.0)
