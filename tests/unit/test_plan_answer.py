"""The planner's logic without the replay program: the replay script a trace becomes, the
simulator's settings per GPU profile, the largest operator, which LMS setting is recommended,
the words of the answer, and which model a user's words name. The replay itself, through the
real allocator, is tests/integration/test_plan_replay.py."""

from __future__ import annotations

import pytest
import torch

from lmsforge.errors import UsageError
from lmsforge.plan import planner, replay, spec, tune
from lmsforge.plan.profiles import PROFILES, profile
from lmsforge.plan.trace import trace_step
from lmsforge.plan.trace_format import Op, Storage, Trace

MiB = 1 << 20
GiB = 1 << 30


def tiny_trace(momentum: float = 0.0) -> Trace:
    """test_plan_trace's Linear(4, 8) + ReLU step, counted by hand there."""
    return trace_step(lambda: torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()),
                      lambda: (torch.randn(3, 4), torch.randn(3, 8)),
                      torch.nn.functional.mse_loss,
                      lambda params: torch.optim.SGD(params, lr=0.1, momentum=momentum),
                      model_name="tiny", input_desc="4", batch=3)


def test_replay_script_of_the_tiny_step(tmp_path):
    path = tmp_path / "replay.txt"
    replay.write_script(tiny_trace(), "h100-pcie", path)
    lines = path.read_text().splitlines()
    assert lines[:5] == ["lmsforge-replay 1", "initial 0 128", "initial 1 32", "initial 2 48",
                         "initial 3 96"]
    # addmm: 4 µs of roofline, every step; reads bias, input, weight; makes its 96 B output,
    # not kept.
    assert lines[5] == "op 0 4000.0 0 R 3 1 2 0 W 1 4 A 1 4 96 0 F 0"
    # The last SGD update frees both gradients: zero_grad() at the end of the step.
    assert lines[-1] == "op 9 4000.0 0 R 2 1 11 W 1 1 A 0 F 2 10 11"
    assert len(lines) == 5 + 10
    with pytest.raises(Exception, match="no durations for gh300"):
        replay.write_script(tiny_trace(), "gh300", path)


def test_only_optimizer_state_is_kept_for_the_next_step():
    assert replay.kept_storages(tiny_trace()) == set()
    # SGD with momentum keeps one buffer per parameter: weight (128 B) and bias (32 B).
    trace = tiny_trace(momentum=0.9)
    kept = replay.kept_storages(trace)
    sizes = {sid: nbytes for op in trace.ops for sid, nbytes in op.allocs}
    assert sorted(sizes[sid] for sid in kept) == [32, 128]


def test_making_optimizer_state_happens_in_the_first_step_only():
    assert replay.first_step_only(tiny_trace()) == set()
    trace = trace_step(lambda: torch.nn.Linear(4, 8), lambda: (torch.randn(3, 4),
                                                               torch.randn(3, 8)),
                       torch.nn.functional.mse_loss,
                       lambda params: torch.optim.Adam(params, foreach=True),
                       model_name="tiny-adam", input_desc="4", batch=3)
    once = [trace.ops[i] for i in sorted(replay.first_step_only(trace))]
    # Per parameter: exp_avg and exp_avg_sq (zeros_like), and the step counter lifted from a
    # Python 0.0 (lift_fresh makes the scalar and the tensor; only the tensor is kept).
    assert sorted(op.name for op in once) == ["aten.lift_fresh.default"] * 2 + [
        "aten.zeros_like.default"] * 4
    kept = replay.kept_storages(trace)
    assert all(set(op.writes) <= kept for op in once)
    # What Adam does with the state every step is not among them.
    assert any(op.name.startswith("aten._foreach") for op in trace.ops
               if op.id not in replay.first_step_only(trace))


@pytest.mark.parametrize("name", sorted(PROFILES))
def test_calibration_sets_the_profiles_link(name):
    gpu = profile(name)
    text = replay.calibration_text(gpu)
    values = dict(line.split(" = ", 1) for line in text.splitlines())
    assert float(values["d2h_gbps"]) * 1e9 == pytest.approx(gpu.d2h_bytes_per_s)
    assert float(values["h2d_gbps"]) * 1e9 == pytest.approx(gpu.h2d_bytes_per_s)
    assert float(values["duplex_gbps"]) * 1e9 == pytest.approx(gpu.duplex_bytes_per_s)
    assert values["name"].startswith(name)
    # Both directions at once never beat one alone.
    assert gpu.duplex_bytes_per_s <= min(gpu.h2d_bytes_per_s, gpu.d2h_bytes_per_s)


def test_largest_operator_counts_what_it_reads_writes_and_makes():
    # addmm (op 0): bias 32 + input 48 + weight 128 + its output 96 = 304 B. The runners-up:
    # threshold_backward 3 x 96 = 288 B, the weight gradient mm 96 + 48 + 128 = 272 B.
    largest = planner.largest_operator(tiny_trace())
    assert (largest.op, largest.name, largest.bytes) == (0, "aten.addmm.default", 304)


class Run:
    def __init__(self, conf: str, completed: bool, ms: float):
        self.alloc_conf, self.completed, self.step_ms = conf, completed, ms


def test_the_defaults_win_ties_and_failures_never_win():
    defaults = Run(tune.BASE, True, 100.0)
    assert tune.choose([defaults, Run("lms:True,a", True, 99.5)]) is defaults  # within 1 %
    faster = Run("lms:True,b", True, 98.0)
    assert tune.choose([defaults, faster, Run("lms:True,c", False, 1.0)]) is faster
    assert tune.choose([Run(tune.BASE, False, 0.0)]) is None
    assert tune.alloc_conf("") == "lms:True"
    assert tune.alloc_conf("lms_sync_mode:3") == "lms:True,lms_sync_mode:3"


def test_a_recorded_order_candidate_is_named_by_its_settings_and_the_call():
    assert [tune.records(s) for _, s in tune.CANDIDATES].count(True) == 2
    assert (tune.alloc_conf(tune.RECORDED), tune.label(tune.RECORDED)) == (
        "lms:True", "lms:True + torch.cuda.lms_step()")
    plan_first = tune.label(tune.RECORDED_PLAN_FIRST)
    assert tune.alloc_conf(tune.RECORDED_PLAN_FIRST) == "lms:True,lms_swapout_threshold:1.0"
    assert plan_first == "lms:True,lms_swapout_threshold:1.0 + torch.cuda.lms_step()"
    assert tune.recorded_label(plan_first) and not tune.recorded_label("lms:True")
    assert tune.conf_of(plan_first) == "lms:True,lms_swapout_threshold:1.0"
    assert tune.conf_of("lms:True,lms_sync_mode:3") == "lms:True,lms_sync_mode:3"
    # A setting that only begins like the call is not one.
    assert not tune.records("lms_step()x")
    # Replayed with a step boundary before each of RECORDED_STEPS steps; the others as usual.
    assert tune.replay_options(tune.RECORDED_PLAN_FIRST) == {"record": True,
                                                             "steps": tune.RECORDED_STEPS}
    assert tune.replay_options("lms_sync_mode:3") == {}


def replayed(conf: str, *, completed: bool = True, ms: float = 10.0, out: int = 0,
             into: int = 0, allocated: int = 0, reserved: int = 0, limit: int = 0,
             oom_op: int = -1) -> replay.Replayed:
    return replay.Replayed(alloc_conf=conf, device_memory=80 * GiB, completed=completed,
                           oom="" if completed else "out of memory", oom_op=oom_op,
                           lms_limit=limit, step_ms=ms,
                           stats={"reclaimed_bytes": out + GiB, "clean_reclaimed_bytes": GiB,
                                  "paged_in_bytes": into,
                                  "allocated_bytes.all.peak": allocated,
                                  "reserved_bytes.all.peak": reserved})


def a_plan(without: replay.Replayed, tried=(), chosen=None) -> planner.Plan:
    trace = Trace("m", "3x8x8", 2, "float32", "2.x", [Storage(0, 64, "param")],
                  [Op(0, "aten.mm.default", [0], [1], [[1, 64]], [1])], ["h100-pcie"])
    return planner.Plan(trace, profile("h100-pcie"), 80 * GiB, planner.largest_operator(trace),
                        without, None, list(tried), chosen)


def test_the_three_answers():
    fits = a_plan(replayed("", ms=8.6, allocated=GiB, reserved=2 * GiB))
    assert fits.verdict == "fits"
    assert "fits without LMS: peak 1.00 GiB allocated, 2.00 GiB reserved of 80.00 GiB; " \
           "step ≈ 8.6 ms" in planner.answer_lines(fits)[1]
    assert "SIMULATED" in planner.answer_lines(fits)[0]

    # 11 GiB copied out (12 reclaimed, 1 of them clean) and 12 GiB in; compute 100 ms.
    defaults = replayed(tune.BASE, ms=300.0, limit=75 * GiB)
    best = replayed("lms:True,lms_swapin_ahead:0", ms=250.0, out=11 * GiB, into=12 * GiB,
                    allocated=74 * GiB, limit=75 * GiB)
    best.stats.update({"reclaimed": 12, "clean_reclaims": 1, "paged_out_ahead": 9,
                       "paged_in": 12, "prefetched": 0, "page_out_waits": 3,
                       "page_in_wait_us": 4000})
    lms = a_plan(replayed("", ms=100.0, allocated=100 * GiB, reserved=101 * GiB),
                 [defaults, best], best)
    assert lms.verdict == "fits-with-lms"
    lines = planner.answer_lines(lms)
    assert lines[1] == ("fits with LMS: step ≈ 250.0 ms, 2.50× compute-only (100.0 ms), "
                        "23.00 GiB moved per step")
    # The bound: 12 GiB in at 55 GB/s is 234.3 ms, more than the compute.
    assert lms.bound_ms(best) == pytest.approx(12 * GiB / 55e9 * 1e3)
    assert "efficiency 0.94" in lines[2]
    assert lines[3] == ("  LMS per step (memory_stats()): 12 page-outs (1 clean, 9 ahead of "
                        "need), 12 page-ins (0 prefetched: 0 hits, 0 wasted), 3 page-out waits, "
                        "page_in_wait_us 4000")
    assert lines[4].startswith("  settings: PYTORCH_CUDA_ALLOC_CONF=lms:True,lms_swapin_ahead:0 "
                               "(best of 2 tried; the defaults: 300.0 ms)")
    assert planner.to_json(lms)["recommended_lms_step"] is False

    # The recorded-order policy's replay won: the answer asks for the call, and the JSON gives
    # the setting and the call apart.
    recorded = replayed(tune.label(tune.RECORDED), ms=200.0, out=11 * GiB, into=12 * GiB,
                        allocated=74 * GiB, limit=75 * GiB)
    with_step = a_plan(replayed("", ms=100.0, allocated=100 * GiB, reserved=101 * GiB),
                       [defaults, best, recorded], recorded)
    assert planner.answer_lines(with_step)[4] == (
        "  settings: PYTORCH_CUDA_ALLOC_CONF=lms:True, and call torch.cuda.lms_step() after each "
        "training step (best of 3 tried; the defaults: 300.0 ms)")
    data = planner.to_json(with_step)
    assert (data["recommended_alloc_conf"], data["recommended_lms_step"]) == ("lms:True", True)
    assert [(r["alloc_conf"], r["lms_step"]) for r in data["tried"]] == [
        ("lms:True", False), ("lms:True,lms_swapin_ahead:0", False), ("lms:True", True)]

    # The recorded-order candidate with settings won: the answer gives both.
    plan_first = replayed(tune.label(tune.RECORDED_PLAN_FIRST), ms=150.0, out=11 * GiB,
                          into=12 * GiB, allocated=74 * GiB, limit=75 * GiB)
    with_both = a_plan(replayed("", ms=100.0, allocated=100 * GiB, reserved=101 * GiB),
                       [defaults, best, recorded, plan_first], plan_first)
    assert planner.answer_lines(with_both)[4] == (
        "  settings: PYTORCH_CUDA_ALLOC_CONF=lms:True,lms_swapout_threshold:1.0, and call "
        "torch.cuda.lms_step() after each training step (best of 4 tried; the defaults: "
        "300.0 ms)")
    data = planner.to_json(with_both)
    assert (data["recommended_alloc_conf"], data["recommended_lms_step"]) == (
        "lms:True,lms_swapout_threshold:1.0", True)

    failed = replayed(tune.BASE, completed=False, limit=75 * GiB, oom_op=0)
    none = a_plan(replayed("", allocated=200 * GiB, reserved=200 * GiB), [failed], None)
    assert none.verdict == "does-not-fit"
    assert planner.answer_lines(none)[1].startswith(
        "does not fit: the largest operator needs 0.00 GiB (aten.mm.default, operator 0)")
    assert "ran out of memory at operator 0 (aten.mm.default)" in planner.answer_lines(none)[2]


def test_the_answer_names_the_operators_before_which_lms_waits_longest():
    # Four operators of 1 ms. Without LMS each ends 1 ms after the one before; with LMS the
    # second ends 4 ms after the first (3 ms waited), the third 1.5 ms after (0.5 ms), the
    # fourth 1.2 ms after (0.2 ms): 3.7 ms in all, and the three largest are named, largest
    # first, by their ids in the trace.
    ops = [Op(10 + i, f"aten.op{i}.default", [0], [], [], []) for i in range(4)]
    trace = Trace("m", "3x8x8", 2, "float32", "2.x", [Storage(0, 64, "param")], ops,
                  ["h100-pcie"])
    without = replayed("", ms=4.0, allocated=100 * GiB, reserved=101 * GiB)
    without.ended_us_after_op = [1000, 2000, 3000, 4000]
    best = replayed(tune.BASE, ms=7.7, out=GiB, into=GiB, allocated=74 * GiB, limit=75 * GiB)
    best.ended_us_after_op = [1000, 5000, 6500, 7700]
    plan = planner.Plan(trace, profile("h100-pcie"), 80 * GiB, planner.largest_operator(trace),
                        without, None, [best], best)
    waited = planner.waits(plan, best)
    assert waited is not None and waited.total_ms == pytest.approx(3.7)
    assert [(w.op, w.name, round(w.ms, 3)) for w in waited.largest] == [
        (11, "aten.op1.default", 3.0), (12, "aten.op2.default", 0.5),
        (13, "aten.op3.default", 0.2)]
    lines = planner.answer_lines(plan)
    assert lines[4] == ("  where it waits (its last replayed step): 3.7 ms beyond the "
                        "operators' time without LMS, 100% of it before operator 11 "
                        "(aten.op1.default) 3.0 ms, "
                        "operator 12 (aten.op2.default) 0.5 ms, operator 13 (aten.op3.default) "
                        "0.2 ms")
    assert lines[5].startswith("  settings: ")
    data = planner.to_json(plan)
    assert data["with_lms"]["waits"]["total_ms"] == pytest.approx(3.7)
    assert data["with_lms"]["waits"]["largest"][0] == {"op": 11, "name": "aten.op1.default",
                                                       "ms": 3.0}
    assert data["without_lms"]["waits"] is None
    # Without a timeline of the same operators (an older replay program), no line and no
    # figure: never a wrong one.
    best.ended_us_after_op = [1000, 5000, 6500]
    assert planner.waits(plan, best) is None
    assert not any("where it waits" in line for line in planner.answer_lines(plan))
    assert planner.to_json(plan)["with_lms"]["waits"] is None


def test_words_name_the_model():
    step = spec.resolve("resnet50", None, None, None)
    assert (step.name, step.input, step.batch) == ("resnet50", "3x224x224", 8)
    step = spec.resolve("unet3d", "1x32x32x32", 1, "sgd")
    assert (step.input, step.batch) == ("1x32x32x32", 1)
    assert spec.resolve("gpt2-medium", "128", 2, None).input == "128 tokens"
    assert spec.parse_input(" 3x2048x2048 ") == (3, 2048, 2048)


@pytest.mark.parametrize("words, message", [
    (("resnet50", "3x", 1, None), "--input '3x': expected sizes such as 3x224x224"),
    (("resnet50", "1x224x224", 1, None), "--input for resnet50 is CxHxW with C = 3"),
    (("unet3d", "1x30x32x32", 1, None), "sides that are multiples of 8"),
    (("gpt2-medium", "3x4", 1, None), "--input for gpt2-medium is the number of tokens"),
    (("resnet50", None, 0, None), "--batch 0: must be at least 1"),
    (("resnet50", None, 1, "lion"), "--optimizer 'lion': choose one of sgd, adam, adamw"),
    (("no_such_module_here:build", "3x8x8", 1, None), "cannot import no_such_module_here"),
    (("json:dumps", None, 1, None), "needs --input"),
    (("a-b-c", "3x8x8", 1, None), "expected a built-in name"),
    (("json:no_function", "3x8x8", 1, None), "json has no function no_function"),
])
def test_bad_words_are_one_line(words, message):
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace("[", r"\[")):
        spec.resolve(*words)


class WithAuxiliary(torch.nn.Module):
    """Returns its logits and auxiliary logits, as torchvision's Inception v3 and GoogLeNet do
    in training."""

    def __init__(self):
        super().__init__()
        self.main, self.aux = torch.nn.Linear(4, 10), torch.nn.Linear(4, 10)

    def forward(self, x):
        return {"logits": self.main(x), "aux_logits": self.aux(x)}


def test_every_output_of_a_model_is_trained():
    step = spec._user_spec("aux", WithAuxiliary, (4,), 2, "sgd")
    trace = trace_step(*step.step_args(), model_name=step.name, input_desc=step.input,
                       batch=step.batch)
    names = [op.name for op in trace.ops]
    assert names.count("aten._log_softmax.default") == 2  # one cross-entropy per output
    # Both linear layers get gradients and an SGD momentum buffer each.
    assert names.count("aten.addmm.default") == 2
