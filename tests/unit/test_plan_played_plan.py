"""The plan of moves the replay plays through LMS (lmsforge/plan/played_plan.py): a chain counted
by hand, and on random steps and small real models, that every move is one the decisions
(clairvoyant.belady_plan) allow: a page-out after the storage's last use before its decision, a
page-in after its page-out and before its use, within the leads and the room."""

from __future__ import annotations

import random

import pytest
from plan_steps import GPU, chain
from test_plan_clairvoyant import random_step

from lmsforge.plan import clairvoyant, models, played_plan, replay
from lmsforge.plan.profiles import profile
from lmsforge.plan.schedule_device import Device, DoesNotFit
from lmsforge.plan.trace import trace_step


def test_a_chain_pages_out_after_the_last_use_and_in_as_the_room_allows(tmp_path):
    # Four 10000 B activations in 20000 B. Before fwd3 (operator 2) activation 1 goes, used
    # last by fwd2: asked for before operator 2; activation 2 before fwd4 (3). Backward frees
    # 4 and 3 as it goes: 2 comes in before bwd3 (5), while only 3 is on the device, and 1
    # before bwd2 (6); without a lead each waits for its own operator.
    trace = chain(4, 10_000)
    ahead = played_plan.make(trace, GPU, 20_000, set(), page_in_lead=60, slack=1.0)
    assert (ahead.outs, ahead.ins) == ({2: [1], 3: [2]}, {5: [2], 6: [1]})
    assert played_plan.make(trace, GPU, 20_000, set(), page_in_lead=1, slack=1.0).ins == \
        {5: [2], 6: [1]}
    assert played_plan.make(trace, GPU, 20_000, set(), page_in_lead=0, slack=1.0).ins == \
        {6: [2], 7: [1]}
    # The slack takes room from the plan: under 0.8 of 25000 B it is the same 20000 B.
    assert played_plan.make(trace, GPU, 25_000, set(), page_in_lead=60) == ahead
    ahead.write(tmp_path / "moves.txt")
    assert (tmp_path / "moves.txt").read_text().splitlines() == [
        "# lmsforge plan of moves: out|in OPERATOR STORAGE...",
        "out 2 1", "out 3 2", "in 5 2", "in 6 1"]
    assert ahead.moves() == 4


def test_an_operator_that_cannot_fit_gives_no_plan():
    with pytest.raises(DoesNotFit):
        played_plan.make(chain(3, 1000), GPU, 1500, set(), page_in_lead=5, slack=1.0)


def check_moves(trace, gpu, limit, first_only, lead, out_lead=played_plan.PAGE_OUT_LEAD):
    """Every move of the plan against the decisions it was made from, on their own."""
    plan = played_plan.make(trace, gpu, limit, first_only, lead, page_out_lead=out_lead)
    run = Device(trace, gpu, int(limit * played_plan.SLACK), first_only)
    run.start_step_one()
    decided = clairvoyant.belady_plan(run, "furthest")
    count = len(run.ops)
    index_of = {op.id: i for i, op in enumerate(run.ops)}
    outs = sorted((index_of[op], sid) for op, sids in plan.outs.items() for sid in sids)
    ins = sorted((index_of[op], sid) for op, sids in plan.ins.items() for sid in sids)
    # The decisions in the second step, by storage (one may go out, come in and go again).
    # Storages of no bytes are never asked for.
    evictions: dict[int, list[int]] = {}
    uses: dict[int, list[int]] = {}
    for position in range(count, 2 * count):
        for sid in decided.evictions[position]:
            if run.sizes[sid]:
                evictions.setdefault(sid, []).append(position - count)
        for sid in decided.page_ins[position]:
            if run.sizes[sid]:
                uses.setdefault(sid, []).append(position - count)
    assert sorted(sid for _, sid in outs) == sorted(s for s, d in evictions.items() for _ in d)
    assert sorted(sid for _, sid in ins) == sorted(s for s, u in uses.items() for _ in u)
    for asked, sid in outs:
        # Its decision is the first one at or after it; nothing uses it in between.
        decision = min(d for d in evictions[sid] if d >= asked)
        assert decision - out_lead <= asked
        assert all(sid not in run.operands[i] for i in range(asked, decision))
    needed = {}
    for asked, sid in ins:
        use = min(u for u in uses[sid] if u >= asked)
        needed[(asked, sid)] = use
        assert sid in run.operands[use] and use - lead <= asked
        # After the page-out it undoes (one made in the step before comes in any time).
        assert all(not asked <= d < use for d in evictions.get(sid, [])), (asked, sid, use)
    # The page-ins ahead fit in the room the decisions leave at every operator they span.
    room = int(limit * played_plan.SLACK)
    early = [0] * count
    for asked, sid in ins:
        for i in range(asked, needed[(asked, sid)]):
            early[i] += run.sizes[sid]
    for i in range(count):
        assert decided.during[count + i] + early[i] <= room, i
    return plan


@pytest.mark.parametrize("seed", range(20))
def test_on_random_steps_every_move_is_one_the_decisions_allow(seed: int):
    rng = random.Random(seed)
    trace = random_step(rng)
    peak = trace.steady_peak_bytes()
    for fraction in (0.8, 0.5):
        for lead in (0, 3, 60):
            try:
                check_moves(trace, GPU, int(peak * fraction), set(), lead, out_lead=rng.choice(
                    [0, 2, 60]))
            except DoesNotFit:
                pass


@pytest.mark.parametrize("spec", [
    models.resnet_step(image=128, batch=4, blocks=(1, 1, 1, 1)),
    models.unet3d_step(side=64, batch=1, base=8, depth=2),
], ids=lambda spec: spec.name)
def test_on_small_real_models_every_move_is_one_the_decisions_allow(spec):
    gpu = profile("h100-pcie")
    trace = trace_step(*spec.step_args(), model_name=spec.name, input_desc=spec.input,
                       batch=spec.batch, profiles=[gpu.name])
    first_only = replay.first_step_only(trace)
    planned = 0
    for fraction, lead in ((0.8, 5), (0.6, 60), (0.3, 60)):
        try:
            plan = check_moves(trace, gpu, int(trace.steady_peak_bytes() * fraction),
                               first_only, lead)
        except DoesNotFit:  # an operator (the optimizer's, a concatenation) needs more
            continue
        planned += 1
        assert plan.outs and plan.ins
    assert planned > 0
