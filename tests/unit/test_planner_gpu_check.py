"""bench/planner_gpu_check.py: on a machine without a CUDA device it says so and exits 4 (as
run-gpu.sh's skips do); its cases are the planner's own models at the documented shapes."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from script_module import load_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "planner_gpu_check.py"

torch = pytest.importorskip("torch")


def test_without_a_cuda_device_it_skips_with_exit_4():
    env = dict(os.environ, CUDA_VISIBLE_DEVICES="")
    done = subprocess.run([sys.executable, str(SCRIPT), "--steps", "2"], env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 4, done.stderr
    assert done.stderr.strip() == "planner_gpu_check: skipped: no CUDA device"


def test_its_cases_resolve_to_the_planners_built_in_steps():
    module = _load()
    from lmsforge.plan.spec import resolve

    names = []
    for model, shape, batch in module.DEFAULT_CASES:
        step = resolve(model, shape, batch, None)
        assert step.batch == batch
        names.append(step.name)
    assert names == ["resnet50", "unet3d", "gpt2-medium"]


def _load():
    return load_script(SCRIPT, "planner_gpu_check")


def _trace(model, shape, batch):
    from lmsforge.plan.spec import resolve
    from lmsforge.plan.trace import trace_step

    step = resolve(model, shape, batch, None)
    return trace_step(*step.step_args(), model_name=model, input_desc=shape, batch=batch,
                      profiles=["h100-pcie"])


def test_a_steady_step_holds_the_optimizer_state_through_its_activation_peak():
    # ResNet-50 peaks in backward; SGD's momentum (one float32 per parameter: 25,557,032)
    # made by the first step's optimizer.step() lives through a second step's whole length.
    trace = _trace("resnet50", "3x224x224", 8)
    assert trace.steady_peak_bytes() - trace.peak_live_bytes() == 4 * 25_557_032


def test_a_steady_step_counts_the_state_once_when_the_peak_is_the_optimizer_step():
    # GPT-2 medium on 32 tokens peaks in AdamW's step, where the first step already holds its
    # moments: a second step's peak is the same, not the state added twice.
    trace = _trace("gpt2-medium", "32", 1)
    assert trace.steady_peak_bytes() == trace.peak_live_bytes()
