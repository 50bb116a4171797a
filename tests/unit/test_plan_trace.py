"""The planner's trace of one training step: exact storages for a model counted by hand, a file
format that round-trips and refuses what it cannot read, one line for an untraceable model, and a
peak that agrees with a real CPU step counted by the allocator."""

from __future__ import annotations

import json

import pytest
import torch  # CI installs the CPU wheel (.ci/run); no skip, so a missing torch is seen

from lmsforge.errors import UsageError
from lmsforge.plan import trace_format
from lmsforge.plan.measure_cpu import cpu_step_peak
from lmsforge.plan.profiles import PROFILES, profile
from lmsforge.plan.trace import trace_step


def tiny_step():
    """Linear(4, 8) + ReLU, batch 3, MSE against a 3x8 target, plain SGD: float32 throughout."""
    return (lambda: torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU()),
            lambda: (torch.randn(3, 4), torch.randn(3, 8)),
            torch.nn.functional.mse_loss,
            lambda params: torch.optim.SGD(params, lr=0.1))


def tiny_trace():
    return trace_step(*tiny_step(), model_name="tiny", input_desc="4", batch=3)


def test_tiny_step_is_counted_by_hand():
    trace = tiny_trace()
    # Before the step: weight 8x4 (128 B), bias 8 (32 B), input 3x4 (48 B), target 3x8 (96 B).
    assert [(s.id, s.bytes, s.kind) for s in trace.initial] == [
        (0, 128, "param"), (1, 32, "param"), (2, 48, "input"), (3, 96, "input")]
    # Each row: operator, allocations [id, bytes], frees after it. A 3x8 activation is 96 B.
    assert [(op.name, op.allocs, op.frees) for op in trace.ops] == [
        ("aten.addmm.default", [[4, 96]], []),                    # x @ W.t() + b
        ("aten.relu.default", [[5, 96]], [4]),                    # addmm's output is not saved
        ("aten.mse_loss.default", [[6, 4]], []),                  # the loss, a 0-d float
        ("aten.ones_like.default", [[7, 4]], []),                 # d loss / d loss
        ("aten.mse_loss_backward.default", [[8, 96]], []),
        ("aten.threshold_backward.default", [[9, 96]], [8, 5]),   # ReLU's saved output dies
        ("aten.mm.default", [[10, 128]], []),                     # weight gradient
        ("aten.sum.dim_IntList", [[11, 32]], [9, 7, 6]),          # bias gradient; del loss
        ("aten.add_.Tensor", [], []),                             # SGD updates in place
        ("aten.add_.Tensor", [], [10, 11]),                       # zero_grad(): grads go
    ]
    assert trace.ops[0].reads == [1, 2, 0] and trace.ops[0].writes == [4]
    assert trace.ops[8].reads == [0, 10] and trace.ops[8].writes == [0]
    assert trace.ops[0].flops == 2 * 3 * 4 * 8
    assert trace.ops[0].bytes_read == 32 + 48 + 128 and trace.ops[0].bytes_written == 96
    assert {op.stream for op in trace.ops} == {0}
    # 304 B before the step; the most live is during threshold_backward: ReLU's output, the
    # loss, ones, mse_loss_backward's output and its own output.
    assert trace.peak_live_bytes() == 304 + 96 + 4 + 4 + 96 + 96 == 600


def test_durations_follow_the_roofline_per_profile():
    trace = tiny_trace()
    assert set(trace.ops[0].duration_us) == set(PROFILES)
    # Tiny operators cost the launch overhead only.
    assert trace.ops[0].duration_us["h100-pcie"] == pytest.approx(4.0)
    h100 = profile("h100-pcie")
    # 1 TFLOP of float32 is compute-bound at 51 TFLOP/s; 20 GB moved is HBM-bound at 2 TB/s.
    assert h100.op_seconds(10**12, 0, "float32") == pytest.approx(1 / 51 + 4e-6)
    assert h100.op_seconds(1, 20 * 10**9, "float32") == pytest.approx(0.01 + 4e-6)
    # Both at once: the slower one, not their sum (0.01 s of compute, 0.005 s of traffic).
    assert h100.op_seconds(51 * 10**10, 10**10, "float32") == pytest.approx(0.01 + 4e-6)
    with pytest.raises(UsageError, match="v100-power9 has no bfloat16 peak"):
        profile("v100-power9").op_seconds(1, 1, "bfloat16")
    with pytest.raises(UsageError, match="unknown GPU profile 'h800'"):
        profile("h800")
    with pytest.raises(UsageError, match="unknown GPU profile 'h800'"):
        trace_step(*tiny_step(), model_name="tiny", input_desc="4", batch=3, profiles=["h800"])


def test_trace_file_round_trips(tmp_path):
    trace = tiny_trace()
    path = tmp_path / "tiny.jsonl"
    trace_format.write(trace, path)
    assert trace_format.read(path) == trace
    assert len(path.read_text().splitlines()) == 1 + len(trace.ops)


@pytest.mark.parametrize("change, message", [
    (lambda h: h.update(version=2), "version 2; this lmsforge reads version 1 only"),
    (lambda h: h.update(format="other"), "not an lmsforge-plan-trace file"),
    (lambda h: h.pop("torch"), "missing field 'torch'"),
    (lambda h: h.update(batch="3"), "field 'batch' must be int, not str"),
])
def test_reader_refuses_a_bad_header_in_one_line(tmp_path, change, message):
    path = tmp_path / "t.jsonl"
    trace_format.write(tiny_trace(), path)
    lines = path.read_text().splitlines()
    header = json.loads(lines[0])
    change(header)
    path.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    with pytest.raises(UsageError) as info:
        trace_format.read(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_reader_names_the_line_of_a_bad_operator(tmp_path):
    path = tmp_path / "t.jsonl"
    trace_format.write(tiny_trace(), path)
    lines = path.read_text().splitlines()
    op = json.loads(lines[3])
    del op["frees"]
    lines[3] = json.dumps(op)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(UsageError, match=r"t.jsonl:4: missing field 'frees'"):
        trace_format.read(path)


class KeepsPositive(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        return y * y.nonzero().shape[0]  # how many are non-zero depends on the values


class SizedByItem(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        return y * int(y.sum().item())


@pytest.mark.parametrize("model, operator", [(KeepsPositive, "aten.nonzero.default"),
                                             (SizedByItem, "aten._local_scalar_dense.default")])
def test_untraceable_model_gets_one_line_naming_the_operator(model, operator):
    _, _, loss, optimizer = tiny_step()
    with pytest.raises(UsageError) as info:
        trace_step(model, lambda: (torch.randn(3, 4), torch.randn(3, 4)), loss, optimizer,
                   model_name="odd", input_desc="4", batch=3)
    message = str(info.value)
    assert f"cannot trace odd: operator {operator} is not traceable" in message
    assert "\n" not in message


def mlp_step():
    """No CPU kernel in this step keeps a private temporary, so the counts can agree closely."""
    return (lambda: torch.nn.Sequential(torch.nn.Linear(256, 1024), torch.nn.GELU(),
                                        torch.nn.Linear(1024, 256)),
            lambda: (torch.randn(64, 256), torch.randn(64, 256)),
            torch.nn.functional.mse_loss,
            lambda params: torch.optim.AdamW(params))


def test_traced_peak_agrees_with_a_real_cpu_step():
    traced = trace_step(*mlp_step(), model_name="mlp", input_desc="256", batch=64)
    measured = cpu_step_peak(*mlp_step())
    assert traced.peak_live_bytes() > 10 * 2**20  # about 10 MiB: AdamW state and activations
    assert measured == pytest.approx(traced.peak_live_bytes(), rel=0.01)


class TruncatedInit(torch.nn.Module):
    """Initialised as ViTs are: torch.nn.init.trunc_normal_ asks `mask.any()`, a value fake
    tensors do not have."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(4, 8)
        torch.nn.init.trunc_normal_(self.linear.weight, std=0.02)

    def forward(self, x):
        return self.linear(x)


def test_a_model_whose_initialisation_reads_values_is_traced():
    trace = trace_step(TruncatedInit, lambda: (torch.randn(3, 4), torch.randn(3, 8)),
                       torch.nn.functional.mse_loss,
                       lambda params: torch.optim.SGD(params, lr=0.1),
                       model_name="truncated", input_desc="4", batch=3)
    # Built on the CPU, then made fake: the same storages as the plain Linear step.
    assert [(s.bytes, s.kind) for s in trace.initial] == [
        (128, "param"), (32, "param"), (48, "input"), (96, "input")]
    assert trace.ops[0].name == "aten.addmm.default"
    assert torch.__future__.get_overwrite_module_params_on_conversion() is False
