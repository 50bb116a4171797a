"""Run the patched tree's torchgen, and write the configuration headers CMake would write.

The invocation is the one PyTorch's build uses for ATen (``cmake/Codegen.cmake``): the tree's
``aten/src/ATen/native/native_functions.yaml`` and ``tags.yaml`` are found under ``-s``, and
every header and source, per-operator headers included, goes to ``<out>/ATen``.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import NamedTuple

from lmsforge.errors import CheckFailed
from lmsforge.verify.levels import Timer
from lmsforge.verify.pytorch_c10.process import run_logged

REGISTER_CUDA = "ATen/RegisterCUDA.cpp"
TIMEOUT_S = 900


class Generated(NamedTuple):
    root: Path  # include folder: holds ATen/ (and ATen/ops/)
    seconds: float


def command(tree: Path, out: Path) -> list[str]:
    aoti = []
    # AOTInductor's shims came with 2.2; 1.13.1's gen.py refuses the option.
    if "--aoti-install-dir" in (tree / "torchgen/gen.py").read_text():
        aoti = ["--aoti-install-dir", str(out / "aoti")]
    return [sys.executable, "-m", "torchgen.gen", "-s", str(tree / "aten/src/ATen"),
            "-d", str(out / "ATen"), *aoti, "--per-operator-headers"]


def generate(tree: Path, out: Path, log: Path) -> Generated:
    """Run the tree's torchgen (not an installed one: cwd is the tree) into OUT."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = command(tree, out)
    with open(log, "a") as stream, Timer() as timer:
        finished = run_logged(["env", "-C", str(tree), f"PYTHONPATH={tree}", *cmd], stream,
                              timeout=TIMEOUT_S)
    if finished.returncode != 0 or not (out / REGISTER_CUDA).is_file():
        last = next((line for line in reversed(finished.lines) if line.strip()), "no output")
        raise CheckFailed(f"torchgen failed ({last}); full log: {log}")
    write_config_headers(tree, out)
    return Generated(out, timer.seconds)


def write_config_headers(tree: Path, out: Path) -> None:
    """``ATen/Config.h`` and ``ATen/cuda/CUDAConfig.h`` for a CUDA + cuDNN build, other backends
    off (what ``configure_file`` would produce)."""
    on = {"AT_CUDNN_ENABLED", "AT_PARALLEL_OPENMP"}
    for relative in ("ATen/Config.h", "ATen/cuda/CUDAConfig.h"):
        template = (tree / "aten/src" / (relative + ".in")).read_text()
        text = re.sub(r"@([A-Z0-9_]+)@",
                      lambda m: "" if m[1] == "NVCC_FLAGS_EXTRA" else ("1" if m[1] in on else "0"),
                      template)
        target = out / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_text() != text:
            target.write_text(text)
