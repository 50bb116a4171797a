"""The benchmark model shapes are the models they stand for, and trace end to end."""

from __future__ import annotations

import pytest
import torch

from lmsforge.plan import models
from lmsforge.plan.measure_cpu import cpu_step_peak
from lmsforge.plan.trace import trace_step


def parameters(build) -> int:
    with torch.device("meta"):  # shapes only, no memory
        return sum(p.numel() for p in build().parameters())


def test_full_shapes_have_the_published_parameter_counts():
    assert parameters(models.bottleneck_resnet) == 25_557_032  # torchvision resnet50
    assert parameters(models.Gpt) == 354_823_168  # GPT-2 medium, head tied to the embedding


@pytest.mark.parametrize("spec", [
    models.resnet_step(image=32, batch=2, blocks=(1, 1, 1, 1)),
    models.gpt_step(tokens=32, batch=2, layers=2, width=64, heads=4, vocab=500),
], ids=lambda spec: spec.name)
def test_small_configurations_trace_and_agree_with_a_real_cpu_step(spec):
    trace = trace_step(*spec.step_args(), model_name=spec.name, input_desc=spec.input,
                       batch=spec.batch)
    assert trace.ops and all(op.duration_us for op in trace.ops)
    assert cpu_step_peak(*spec.step_args()) == pytest.approx(trace.peak_live_bytes(), rel=0.01)


def test_unet3d_traces():
    spec = models.unet3d_step(side=16, batch=1, base=4, depth=2)
    trace = trace_step(*spec.step_args(), model_name=spec.name, input_desc=spec.input,
                       batch=spec.batch)
    names = {op.name for op in trace.ops}
    assert {"aten.convolution.default", "aten.cat.default"} <= names
