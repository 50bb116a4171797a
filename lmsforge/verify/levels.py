"""The contract between `lmsforge verify` and the framework-specific level runners.

`lmsforge verify --level L` runs every level up to L in order and stops at the first failure.
The generic `apply` level lives in ``verify/apply_level.py``; each framework module
(``frameworks/<name>.py``) runs the levels above it through ``run_level``.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

LEVELS = ("apply", "compile", "core-cpu", "core-gpu", "full")

PASS, FAIL, SKIPPED = "pass", "fail", "skipped"


@dataclass
class LevelResult:
    level: str
    status: str  # PASS, FAIL or SKIPPED
    seconds: float = 0.0
    detail: str = ""  # one line: why it failed, why it was skipped, or what passed (counts)
    facts: dict[str, object] = field(default_factory=dict)  # numbers for reports: tests, TUs, ...
    log: str | None = None  # path of the full log, if one was written

    def to_json(self) -> dict[str, object]:
        return {"level": self.level, "status": self.status, "seconds": round(self.seconds, 1),
                "detail": self.detail, "facts": self.facts, "log": self.log}


@dataclass
class LevelContext:
    """Everything a level runner needs; runners must not reach for anything else."""

    framework: str
    tag: str
    tree: Path  # work tree with the series applied (branch lms/<framework>/<tag> checked out)
    base: str  # commit of the unpatched upstream tag inside `tree`
    work_dir: Path  # a private folder for builds and logs, kept between runs (a cache)
    jobs: int = 2
    say: Callable[[str], None] = print  # progress lines for the user

    def log_path(self, level: str) -> Path:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        return self.work_dir / f"{level}.log"


def skipped(level: str, reason: str) -> LevelResult:
    return LevelResult(level, SKIPPED, 0.0, reason)


def have_cuda_device() -> tuple[bool, str]:
    """Whether a CUDA device is usable here, and if not, why (for `skipped: ...`)."""
    if shutil.which("nvidia-smi") is None:
        return False, "no CUDA device (nvidia-smi not found)"
    import subprocess

    proc = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    if proc.returncode != 0 or "GPU" not in proc.stdout:
        return False, "no CUDA device (nvidia-smi lists no GPU)"
    return True, proc.stdout.strip().splitlines()[0]


class Timer:
    def __enter__(self) -> "Timer":
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.monotonic() - self.start
