#!/usr/bin/env python3
"""Train image models on synthetic images with Large Model Support, or ask the planner first.

In the spirit of IBM's ManyModel.py: pick an architecture, an image size and a batch size, and
train a few steps on random images with LMS on (the default) or off, logging the LMS statistics
of every step. Training needs PyTorch built from lmsforge's LMS series and a CUDA device.

`--plan` asks `lmsforge plan` instead, on any machine (no GPU): will this model, image size and
batch train on the GPU, with LMS or without, how fast, and with which LMS settings. Simulated.

    python3 examples/pytorch/many_models.py -a resnet50 --image-size 2048 -b 16 --plan
    python3 examples/pytorch/many_models.py -a resnet50 --image-size 2048 -b 16 --steps 20
    for size in 500 1000 1500 2000; do
        python3 examples/pytorch/many_models.py -a resnet50 --image-size $size --log summary
    done

Architectures: `resnet50` (lmsforge's plain-torch ResNet-50 when torchvision is missing) or any
name torchvision.models.get_model knows. The LMS settings (--lms-limit, --swapout-threshold,
--swapin-ahead, --sync-mode) go to PYTORCH_CUDA_ALLOC_CONF before CUDA starts, as a user sets them;
--lms-step calls torch.cuda.lms_step() after each step, as the planner may recommend, and logs
what the recorder played.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import time
from typing import Sequence

# Counters of torch.cuda.memory_stats() logged per step as the change over the step.
DELTA_KEYS = ("reclaimed", "reclaimed_bytes", "paged_in", "paged_in_bytes", "page_out_waits",
              "paged_out_ahead", "prefetch_hits", "prefetch_misses", "page_in_wait_us",
              "alloc_distribution.freelist", "alloc_distribution.cudamalloc",
              "alloc_distribution.reclaim_one", "alloc_distribution.reclaim_all")
# Counters of torch.cuda.lms_step() logged per step (--lms-step), as the change over the step.
RECORDER_KEYS = ("positions_played", "divergences", "moves_asked", "moves_started")
MiB = 1 << 20
# lmsforge plan's own models; any other architecture goes to it as torchvision:NAME.
PLANNER_BUILT_IN = ("resnet50",)


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-a", "--arch", default="resnet50",
                        help="model architecture (default resnet50)")
    parser.add_argument("--image-size", type=_positive, default=500,
                        help="side of the square 3xNxN images (default 500)")
    parser.add_argument("-b", "--batch-size", type=_positive, default=1)
    parser.add_argument("--steps", type=_positive, default=10, help="training steps (default 10)")
    parser.add_argument("--classes", type=_positive, default=1000)
    parser.add_argument("--lms", action=argparse.BooleanOptionalAction, default=True,
                        help="Large Model Support on (default) or off")
    parser.add_argument("--lms-limit", type=_non_negative, default=0,
                        help="LMS limit in MiB; 0 = automatic (default)")
    parser.add_argument("--swapout-threshold", help="lms_swapout_threshold: auto or (0, 1]")
    parser.add_argument("--swapin-ahead", help="lms_swapin_ahead: auto, bytes, NN%% or 0")
    parser.add_argument("--sync-mode", type=int, choices=(0, 1, 2, 3),
                        help="lms_sync_mode (3: page on demand only)")
    parser.add_argument("--lms-step", action="store_true",
                        help="call torch.cuda.lms_step() after each step (the recorded-order "
                             "policy, when `lmsforge plan` recommends it)")
    parser.add_argument("--log", choices=("steps", "summary"), default="steps",
                        help="steps: one CSV row per step; summary: one row per run")
    parser.add_argument("--csv", help="CSV file (default <arch>-<size>.csv, or "
                                      "<arch>-summary.csv with --log summary)")
    parser.add_argument("--plan", action="store_true",
                        help="ask `lmsforge plan` instead of training (any machine, simulated)")
    parser.add_argument("--gpu", default="h100-pcie",
                        help="with --plan: the GPU profile (h100-pcie, a100-pcie, v100-power9, "
                             "gh200)")
    parser.add_argument("--gpu-memory", help="with --plan: device memory, e.g. 16G")
    parser.add_argument("--plot", help="with --plan: write memory over the step as a PNG")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.lms and any(v for v in (args.lms_limit, args.swapout_threshold,
                                        args.swapin_ahead, args.sync_mode, args.lms_step)):
        parser.error("the LMS settings need LMS; drop --no-lms")
    if args.plan and args.lms_step:
        parser.error("--lms-step goes with training; `lmsforge plan` tries it on its own")
    if not args.plan and (args.gpu_memory or args.plot):
        parser.error("--gpu-memory and --plot go with --plan")
    return args


def _positive(text: str) -> int:
    value = int(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected 0 or a positive integer, got {text}")
    return value


def alloc_conf(args: argparse.Namespace) -> str:
    """PYTORCH_CUDA_ALLOC_CONF for these options (docs/pytorch-lms.md lists the keys)."""
    if not args.lms:
        return ""
    parts = ["lms:True"]
    if args.lms_limit:
        parts.append(f"lms_limit:{args.lms_limit * MiB}")
    if args.swapout_threshold:
        parts.append(f"lms_swapout_threshold:{args.swapout_threshold}")
    if args.swapin_ahead:
        parts.append(f"lms_swapin_ahead:{args.swapin_ahead}")
    if args.sync_mode is not None:
        parts.append(f"lms_sync_mode:{args.sync_mode}")
    return ",".join(parts)


def plan(args: argparse.Namespace) -> int:
    """The planner's answer for this architecture, image size and batch."""
    model = args.arch if args.arch in PLANNER_BUILT_IN else f"torchvision:{args.arch}"
    command = [sys.executable, "-m", "lmsforge", "plan", "--model", model,
               "--input", f"3x{args.image_size}x{args.image_size}",
               "--batch", str(args.batch_size), "--gpu", args.gpu]
    if args.gpu_memory:
        command += ["--gpu-memory", args.gpu_memory]
    if args.plot:
        command += ["--plot", args.plot]
    print("$ lmsforge " + " ".join(command[3:]), flush=True)
    return subprocess.run(command).returncode


def build_model(arch: str, classes: int):
    try:
        from torchvision import models
    except Exception:  # missing, or built for another torch
        if arch != "resnet50":
            raise SystemExit(f"--arch {arch} needs torchvision; without it only resnet50")
        from lmsforge.plan.models import bottleneck_resnet
        return bottleneck_resnet(classes=classes)
    return models.get_model(arch, num_classes=classes)


def train(args: argparse.Namespace) -> int:
    conf = alloc_conf(args)
    if conf:  # read when CUDA's allocator starts: before any CUDA call
        os.environ["PYTORCH_CUDA_ALLOC_CONF"] = conf
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device: training needs a GPU and PyTorch built with the LMS series; "
              "use --plan to ask the planner on this machine", file=sys.stderr)
        return 4
    if not hasattr(torch.cuda, "set_enabled_lms"):
        print("this PyTorch has no Large Model Support: build it from `lmsforge apply "
              "--framework pytorch --tag v2.6.0`", file=sys.stderr)
        return 4
    if args.lms_step and not hasattr(torch.cuda, "lms_step"):
        print("this PyTorch's LMS has no torch.cuda.lms_step(): build it from a series with the "
              "recorded-order policy (lmsforge's, since 2026-11-29), or drop --lms-step",
              file=sys.stderr)
        return 4
    torch.manual_seed(args.seed)
    device = torch.device("cuda")
    model = build_model(args.arch, args.classes).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-4)
    loss_fn = torch.nn.CrossEntropyLoss()
    print(f"[LMS={'On' if torch.cuda.get_enabled_lms() else 'Off'} "
          f"limit={torch.cuda.get_limit_lms()}] {args.arch} 3x{args.image_size}x"
          f"{args.image_size} batch {args.batch_size}", flush=True)
    rows = []
    previous_recorder: dict = {}
    for step in range(args.steps):
        images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
        target = torch.randint(0, args.classes, (args.batch_size,), device=device)
        before = torch.cuda.memory_stats()
        started = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(images), target)
        loss.backward()
        optimizer.step()
        # The boundary between two steps: LMS plans the next from this one's uses.
        recorder = torch.cuda.lms_step() if args.lms_step else {}
        torch.cuda.synchronize()
        seconds = time.perf_counter() - started
        after = torch.cuda.memory_stats()
        row = {"step": step, "seconds": round(seconds, 4), "loss": round(loss.item(), 4),
               "megapixels_per_s": round(args.batch_size * args.image_size ** 2 / 1e6 / seconds,
                                         3),
               "allocated_peak_mib": round(after.get("allocated_bytes.all.peak", 0) / MiB, 1)}
        row.update({key: after.get(key, 0) - before.get(key, 0) for key in DELTA_KEYS})
        row.update(recorder_columns(recorder, previous_recorder))
        previous_recorder = recorder
        rows.append(row)
        print(", ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    write_log(args, rows)
    return 0


def recorder_columns(counters: dict, before: dict) -> dict:
    """What torch.cuda.lms_step()'s cumulative counters say of the step that ended: positions
    played from the plan, whether it diverged, the planned moves LMS started. None without
    --lms-step."""
    if not counters:
        return {}
    return {f"recorder_{key}": counters.get(key, 0) - before.get(key, 0)
            for key in RECORDER_KEYS}


def write_log(args: argparse.Namespace, rows: list[dict]) -> None:
    if args.log == "steps":
        path = args.csv or f"{args.arch}-{args.image_size}.csv"
        with open(path, "w", newline="") as out:
            writer = csv.DictWriter(out, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
        return
    path = args.csv or f"{args.arch}-summary.csv"
    timed = rows[1:] or rows  # the first step warms up cuDNN and LMS's order of use
    summary = {"image_size": args.image_size, "batch_size": args.batch_size,
               "lms": args.lms, "steps": len(timed),
               "median_megapixels_per_s": statistics.median(r["megapixels_per_s"] for r in timed),
               "reclaimed_bytes_per_step": statistics.mean(r["reclaimed_bytes"] for r in timed),
               "paged_in_bytes_per_step": statistics.mean(r["paged_in_bytes"] for r in timed)}
    new = not os.path.exists(path)
    with open(path, "a", newline="") as out:
        writer = csv.DictWriter(out, fieldnames=list(summary))
        if new:
            writer.writeheader()
        writer.writerow(summary)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    return plan(args) if args.plan else train(args)


if __name__ == "__main__":
    sys.exit(main())
