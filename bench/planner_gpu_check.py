#!/usr/bin/env python3
"""Measure, on a real GPU with any CUDA PyTorch (no LMS needed), what `lmsforge plan` predicts
without LMS: each benchmark model's peak allocated memory over one training step, and its step
time. The planner's figures come from a trace on fake tensors and a roofline; these come from the
caching allocator's own counters and CUDA events, so the two are independent.

    python3 bench/planner_gpu_check.py --out planner-gpu.json
    python3 bench/planner_gpu_check.py --model resnet50 --input 3x1024x1024 --batch 4

The step is the planner's (lmsforge/plan/trace.py): forward, loss, backward, optimizer.step(),
zero_grad(set_to_none=True). Step 1 makes the optimizer's state; the peak and times reported are
those of the steps after it, as the planner's replay reports. Run from an lmsforge checkout or
bundle (it imports lmsforge.plan.spec for the exact model, batch and optimizer).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

GiB = 1 << 30
# The three benchmark models at the shapes of docs/pytorch-lms.md's planner table.
DEFAULT_CASES = (("resnet50", "3x2048x2048", 16), ("unet3d", "1x320x320x320", 4),
                 ("gpt2-medium", "1024", 40))


def measure(model_name: str, input_text: str, batch: int, steps: int, strict_fp32: bool) -> dict:
    import torch

    from lmsforge.plan.spec import resolve

    torch.backends.cuda.matmul.allow_tf32 = not strict_fp32 and torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = not strict_fp32
    spec = resolve(model_name, input_text, batch, None)
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = spec.build_model().to(device)
    inputs, target = (t.to(device) for t in spec.make_batch())
    optimizer = spec.make_optimizer(list(model.parameters()))
    peaks, times = [], []
    for step in range(steps):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        loss = spec.loss_fn(model(inputs), target)
        loss.backward()
        del loss
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        end.record()
        torch.cuda.synchronize()
        peaks.append(torch.cuda.max_memory_allocated())
        times.append(start.elapsed_time(end))
    after_first = slice(1, None) if steps > 1 else slice(None)
    result = {"model": model_name, "input": input_text, "batch": batch,
              "tf32": "off" if strict_fp32 else "PyTorch default (cuDNN on, matmul off)",
              "first_step_peak_bytes": peaks[0],
              "peak_allocated_bytes": max(peaks[after_first]),
              "peak_reserved_bytes": torch.cuda.max_memory_reserved(),
              "step_ms_median": round(statistics.median(times[after_first]), 2),
              "step_ms_all": [round(t, 2) for t in times],
              "device": torch.cuda.get_device_name(), "torch": torch.__version__}
    del model, inputs, target, optimizer
    torch.cuda.empty_cache()
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="one model (default: the three benchmark models)")
    parser.add_argument("--input")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--steps", type=int, default=4, help="steps per model (default 4)")
    parser.add_argument("--out", help="write the results as JSON here")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("planner_gpu_check: skipped: no CUDA device", file=sys.stderr)
        return 4
    cases = [(args.model, args.input, args.batch)] if args.model else list(DEFAULT_CASES)
    results = []
    for model_name, input_text, batch in cases:
        for strict in (False, True):
            try:
                row = measure(model_name, input_text, batch, args.steps, strict)
            except torch.OutOfMemoryError as err:
                row = {"model": model_name, "input": input_text, "batch": batch,
                       "tf32": "off" if strict else "default",
                       "error": str(err).splitlines()[0]}
                torch.cuda.empty_cache()
            results.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(f"{'model':12} {'input':14} {'batch':>5} {'tf32':8} {'peak GiB':>9} {'step ms':>9}")
    for row in results:
        if "error" in row:
            print(f"{row['model']:12} {row['input']:14} {row['batch']:>5} {row['tf32'][:8]:8} "
                  f"{row['error'][:40]}")
        else:
            print(f"{row['model']:12} {row['input']:14} {row['batch']:>5} {row['tf32'][:8]:8} "
                  f"{row['peak_allocated_bytes'] / GiB:9.2f} {row['step_ms_median']:9.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
