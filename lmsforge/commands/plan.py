"""`lmsforge plan`: will a model train on a GPU, with LMS or without, and how fast? Traces one
training step on fake tensors (lmsforge/plan/trace.py), builds the replay program beside the
core-sim build (verify/pytorch_c10/plan_build.py), replays the step through the series' real
allocator on the simulator (lmsforge/plan/planner.py) and answers in a few lines."""

from __future__ import annotations

import os
import re
from pathlib import Path

from lmsforge import ui
from lmsforge.errors import UsageError
from lmsforge.options import Options

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}


def parse_memory(text: str) -> int:
    """'80G', '16GiB', '512M' or a byte count (powers of 1024)."""
    found = re.fullmatch(r"\s*([0-9]+)\s*([KMGT]?)(i?B)?\s*", text, flags=re.IGNORECASE)
    if not found or int(found.group(1)) == 0:
        raise UsageError(f"--gpu-memory {text!r}: expected a size such as 16G, 40GiB or a "
                         f"byte count")
    return int(found.group(1)) * UNITS[found.group(2).upper()]


def check_plot_path(path: Path) -> None:
    if path.is_dir():
        raise UsageError(f"--plot {path} is a folder; pass a file name such as memory.png")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise UsageError(f"--plot {path}: the folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK):
        raise UsageError(f"--plot {path} is not writable by this user; pass another file")


def run(opts: Options, model: str, input_text: str | None, batch: int | None, gpu_name: str,
        gpu_memory: str | None, optimizer: str | None, dtype: str, plot: Path | None,
        as_json: bool, search: bool) -> int:
    try:  # the `plan` extra: lmsforge itself does not need torch
        from lmsforge.plan import planner, profiles, spec, trace
    except ImportError as err:
        raise UsageError(f"lmsforge plan needs PyTorch (any CPU build): python3 -m pip install "
                         f"'lmsforge[plan]' ({err})") from None
    from lmsforge.verify.pytorch_c10 import plan_build

    gpu = profiles.profile(gpu_name)
    memory = parse_memory(gpu_memory) if gpu_memory else gpu.memory_bytes
    if plot is not None:
        check_plot_path(plot)
    step = spec.resolve(model, input_text, batch, optimizer)
    with ui.step(f"tracing one training step of {step.name} {step.input} batch {step.batch}"):
        traced = trace.trace_step(*step.step_args(), model_name=step.name,
                                  input_desc=step.input, batch=step.batch, dtype=dtype,
                                  profiles=[gpu.name])
    opts.cache.require_writable("plan keeps the replay's build and its runs there")
    work = opts.cache.build_dir("pytorch", plan_build.TAG, "plan") / _slug(
        f"{step.name}-{step.input}-b{step.batch}-{gpu.name}")
    work.mkdir(parents=True, exist_ok=True)
    with plan_build.replay_program(opts, ui.say) as program:
        with ui.step(f"replaying {len(traced.ops)} operators on a simulated {gpu.name}"):
            result = planner.make_plan(traced, gpu, program, work, device_memory=memory,
                                       search=search, say=ui.say)
    if plot is not None:
        from lmsforge.plan import plot as plot_mod
        plot_mod.write_png(result, plot)
    if as_json:
        data = planner.to_json(result)
        data["plot"] = str(plot) if plot else None
        data["runs"] = str(work)
        ui.print_json(data)
    else:
        for line in planner.answer_lines(result):
            print(line)
        if plot is not None:
            print(f"  memory over the step: {plot}")
    return 0


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:120]
