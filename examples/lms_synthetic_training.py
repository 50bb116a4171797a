#!/usr/bin/env python3
"""Train models of several sizes on synthetic data with Large Model Support; log LMS per step.

Needs PyTorch built from the lmsforge LMS series and a CUDA device. For each model size (the
width of a stack of linear layers) it trains for a few steps on random data and writes one CSV
row per step with the LMS statistics of that step (deltas of torch.cuda.memory_stats()), then one
summary row per size. A size that runs out of memory gets a summary row with status "oom", so one
run shows which sizes train only with LMS:

    python3 examples/lms_synthetic_training.py --sizes 1024,4096,8192 --steps 20 --csv lms.csv
    python3 examples/lms_synthetic_training.py --sizes 1024,4096,8192 --no-lms --csv no-lms.csv
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time
from typing import IO, Any, Iterable, Mapping, Sequence

# Counters of memory_stats() reported per step as the change over the step.
DELTA_KEYS = (
    "reclaimed", "reclaimed_bytes", "paged_in", "paged_in_bytes",
    "alloc_distribution.freelist", "alloc_distribution.cudamalloc",
    "alloc_distribution.reclaim_one", "alloc_distribution.reclaim_fragments",
    "alloc_distribution.reclaim_all", "alloc_distribution.cudamalloc_retry",
)
# Levels of memory_stats() reported per step as their value at the end of the step.
LEVEL_KEYS = (
    "allocated_bytes.all.current", "pinned_bytes.all.current", "reserved_bytes.all.current",
    "host_bytes.current",
)
COLUMNS = ("kind", "size", "params", "step", "status", "seconds", "loss",
           *(key.replace(".", "_") for key in LEVEL_KEYS),
           *(key.replace(".", "_") for key in DELTA_KEYS))
MiB = 1 << 20


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=_sizes, default=[1024, 2048, 4096],
                        help="comma-separated model widths (default: 1024,2048,4096)")
    parser.add_argument("--layers", type=_positive, default=16, help="linear layers (default 16)")
    parser.add_argument("--batch-size", type=_positive, default=64)
    parser.add_argument("--steps", type=_positive, default=10, help="training steps per size")
    parser.add_argument("--lms", action=argparse.BooleanOptionalAction, default=True,
                        help="turn Large Model Support on (default) or off")
    parser.add_argument("--lms-limit-mb", type=_non_negative, default=0,
                        help="LMS limit per device in MiB; 0 = automatic (default)")
    parser.add_argument("--csv", default="lms-steps.csv", help="output CSV ('-' = stdout)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    if not args.lms and args.lms_limit_mb:
        parser.error("--lms-limit-mb needs LMS; drop --no-lms")
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


def _sizes(text: str) -> list[int]:
    try:
        sizes = [_positive(part) for part in text.split(",") if part.strip()]
    except ValueError as error:
        raise argparse.ArgumentTypeError(f"expected widths like 1024,4096: {error}") from error
    if not sizes:
        raise argparse.ArgumentTypeError("expected at least one size")
    return sizes


def step_row(size: int, params: int, step: int, seconds: float, loss: float,
             before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """One CSV row: the stats' levels after the step and the counters' change over it."""
    row: dict[str, Any] = {"kind": "step", "size": size, "params": params, "step": step,
                           "status": "ok", "seconds": round(seconds, 6), "loss": loss}
    for key in LEVEL_KEYS:
        row[key.replace(".", "_")] = after.get(key, 0)
    for key in DELTA_KEYS:
        row[key.replace(".", "_")] = after.get(key, 0) - before.get(key, 0)
    return row


def summary_row(size: int, params: int, steps: Sequence[Mapping[str, Any]],
                status: str = "ok") -> dict[str, Any]:
    """The size's summary: median step time (the first step warms up and is left out when there
    are others), peak levels, summed counters, the last loss."""
    row: dict[str, Any] = {"kind": "summary", "size": size, "params": params,
                           "step": len(steps), "status": status}
    timed = list(steps[1:] if len(steps) > 1 else steps)
    row["seconds"] = round(statistics.median(s["seconds"] for s in timed), 6) if timed else ""
    row["loss"] = steps[-1]["loss"] if steps else ""
    for key in LEVEL_KEYS:
        column = key.replace(".", "_")
        row[column] = max((s[column] for s in steps), default=0)
    for key in DELTA_KEYS:
        column = key.replace(".", "_")
        row[column] = sum(s[column] for s in steps)
    return row


def write_rows(stream: IO[str], rows: Iterable[Mapping[str, Any]], header: bool = True) -> None:
    writer = csv.DictWriter(stream, fieldnames=COLUMNS)
    if header:
        writer.writeheader()
    for row in rows:
        writer.writerow(row)
    stream.flush()


def train_size(torch: Any, args: argparse.Namespace, size: int,
               stream: IO[str]) -> dict[str, Any]:
    """Train one model size, writing its step rows; returns its summary row."""
    torch.manual_seed(args.seed)
    rows: list[dict[str, Any]] = []
    params = 0
    try:
        layers = []
        for _ in range(args.layers):
            layers += [torch.nn.Linear(size, size), torch.nn.ReLU()]
        model = torch.nn.Sequential(*layers).cuda()
        params = sum(p.numel() for p in model.parameters())
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
        for step in range(args.steps):
            data = torch.randn(args.batch_size, size, device="cuda")
            target = torch.randn(args.batch_size, size, device="cuda")
            torch.cuda.synchronize()
            before = torch.cuda.memory_stats()
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.mse_loss(model(data), target)
            loss.backward()
            optimizer.step()
            value = loss.item()  # synchronizes
            seconds = time.perf_counter() - start
            rows.append(step_row(size, params, step, seconds, value, before,
                                 torch.cuda.memory_stats()))
            write_rows(stream, rows[-1:], header=False)
        return summary_row(size, params, rows)
    except torch.cuda.OutOfMemoryError:
        return summary_row(size, params, rows, status="oom")
    finally:
        torch.cuda.empty_cache()


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA device; this example needs one", file=sys.stderr)
        return 2
    if not hasattr(torch.cuda, "set_enabled_lms"):
        print("error: this PyTorch has no Large Model Support; build it from an lmsforge tree",
              file=sys.stderr)
        return 2
    torch.cuda.set_enabled_lms(args.lms)
    if args.lms:
        torch.cuda.set_limit_lms(args.lms_limit_mb * MiB)
        print(f"LMS on, limit {torch.cuda.lms_limit() // MiB} MiB"
              f"{' (automatic)' if not args.lms_limit_mb else ''}", file=sys.stderr)
    else:
        print("LMS off", file=sys.stderr)
    stream = sys.stdout if args.csv == "-" else open(args.csv, "w", newline="")
    try:
        write_rows(stream, [])
        summaries = [train_size(torch, args, size, stream) for size in args.sizes]
        write_rows(stream, summaries, header=False)
    finally:
        if stream is not sys.stdout:
            stream.close()
    for row in summaries:
        print(f"size {row['size']:>6}: {row['status']:<3} median step {row['seconds']} s, "
              f"paged out {row['reclaimed_bytes'] // MiB} MiB", file=sys.stderr)
    return 0 if all(row["status"] == "ok" for row in summaries) else 1


if __name__ == "__main__":
    sys.exit(main())
