#!/usr/bin/env python3
"""Measure, on a real GPU with any CUDA PyTorch (no LMS needed), what `lmsforge plan` predicts
without LMS: each benchmark model's peak allocated memory over one training step, and its step
time. The planner's figures come from a trace on fake tensors and a roofline; these come from the
caching allocator's own counters and CUDA events, so the two are independent.

    python3 bench/planner_gpu_check.py --out planner-gpu.json
    python3 bench/planner_gpu_check.py --model resnet50 --input 3x1024x1024 --batch 4
    python3 bench/planner_gpu_check.py --fit --out planner-gpu.json     # what run-gpu.sh runs

`--fit` checks the planner's own prediction on this GPU: each model's batch is halved until the
traced step (lmsforge.plan.trace, fake tensors on the CPU, as `lmsforge plan` traces) fits in
85 % of the device's memory; the predicted peak of a step after the first (the traced peak plus
the state the step keeps: docs/plan-trace-format.md) is compared with the measured one in
float32, and the check fails beyond PEAK_TOLERANCE. Exit codes: 0 agreed, 1 a peak disagreed or
a model ran out of memory, 4 no CUDA device.

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
# cuDNN and cuBLAS workspaces are not in the trace (docs/plan-trace-format.md); in float32 they
# stayed under 0.1 % of the benchmark models' peaks on an H200 (bench/reference/h200-2026-11-28).
PEAK_TOLERANCE = 0.03
FIT_SHARE = 0.85
# The three benchmark models at the shapes of docs/pytorch-lms.md's planner table.
DEFAULT_CASES = (("resnet50", "3x2048x2048", 16), ("unet3d", "1x320x320x320", 4),
                 ("gpt2-medium", "1024", 40))


def measure(model_name: str, input_text: str, batch: int, steps: int, strict_fp32: bool) -> dict:
    import torch

    from lmsforge.plan.spec import resolve

    # PyTorch's defaults: TF32 for cuDNN's convolutions, not for matmuls.
    torch.backends.cuda.matmul.allow_tf32 = False
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


def predicted_peak(model_name: str, input_text: str, batch: int) -> int:
    """The planner's peak of a steady step: the traced step replayed with what it allocates and
    never frees (optimizer state) alive from the start, as a second step holds it; the
    operators that make that state make nothing new then (docs/plan-trace-format.md)."""
    from lmsforge.plan.spec import resolve
    from lmsforge.plan.trace import trace_step

    spec = resolve(model_name, input_text, batch, None)
    trace = trace_step(*spec.step_args(), model_name=model_name, input_desc=input_text,
                       batch=batch, profiles=["h100-pcie"])
    return trace.steady_peak_bytes()


def fitted_cases(device_bytes: int) -> list[tuple[str, str, int, int]]:
    """(model, input, batch, predicted peak) with the batch halved until the prediction fits."""
    cases = []
    for model_name, input_text, batch in DEFAULT_CASES:
        while True:
            peak = predicted_peak(model_name, input_text, batch)
            if peak <= FIT_SHARE * device_bytes or batch == 1:
                break
            batch //= 2
        cases.append((model_name, input_text, batch, peak))
    return cases


def check_fit(steps: int) -> tuple[list[dict], bool]:
    import torch

    _, total = torch.cuda.mem_get_info()
    results, agreed = [], True
    for model_name, input_text, batch, peak in fitted_cases(total):
        try:
            row = measure(model_name, input_text, batch, steps, strict_fp32=True)
        except torch.OutOfMemoryError as err:
            row = {"model": model_name, "input": input_text, "batch": batch,
                   "error": str(err).splitlines()[0]}
            torch.cuda.empty_cache()
        row["predicted_peak_bytes"] = peak
        if "error" in row:
            row["agrees"] = False
        else:
            row["peak_ratio"] = round(row["peak_allocated_bytes"] / peak, 4)
            row["agrees"] = abs(row["peak_ratio"] - 1) <= PEAK_TOLERANCE
        agreed = agreed and row["agrees"]
        results.append(row)
        print(json.dumps(row), flush=True)
    return results, agreed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", help="one model (default: the three benchmark models)")
    parser.add_argument("--input")
    parser.add_argument("--batch", type=int)
    parser.add_argument("--steps", type=int, default=4, help="steps per model (default 4)")
    parser.add_argument("--out", help="write the results as JSON here")
    parser.add_argument("--fit", action="store_true",
                        help="the planner's predicted peaks against this GPU's, at batches "
                             "that fit (see above)")
    args = parser.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("planner_gpu_check: skipped: no CUDA device", file=sys.stderr)
        return 4
    if args.fit:
        results, agreed = check_fit(args.steps)
        if args.out:
            Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
        print(f"{'model':12} {'input':14} {'batch':>5} {'planned GiB':>11} {'measured GiB':>12} "
              f"{'ratio':>6}  {'step ms':>8}")
        for row in results:
            measured = (f"{row['peak_allocated_bytes'] / GiB:12.2f} {row['peak_ratio']:6.3f}  "
                        f"{row['step_ms_median']:8.1f}" if "error" not in row
                        else row["error"][:40])
            print(f"{row['model']:12} {row['input']:14} {row['batch']:>5} "
                  f"{row['predicted_peak_bytes'] / GiB:11.2f} {measured}")
        print("planner peaks: " + ("agree" if agreed else
                                   f"DISAGREE (beyond {PEAK_TOLERANCE:.0%})"))
        return 0 if agreed else 1
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
