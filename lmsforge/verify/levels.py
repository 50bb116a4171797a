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
from typing import Callable, Mapping, Protocol, Sequence

LEVELS = ("apply", "compile", "core-cpu", "core-sim", "core-gpu", "full")
# How many seeds `core-sim` runs the CUDA tests under (seeds 1..N), unless told otherwise.
DEFAULT_SIM_SEEDS = 5

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
    sim_seeds: int = DEFAULT_SIM_SEEDS  # core-sim: run the CUDA tests under seeds 1..sim_seeds
    # core-sim: only these CUDA tests ("Suite.Test"), without the benchmarks, as a mutation check
    # runs the tests that must catch it; such a run can fail the level but never pass it.
    sim_tests: tuple[str, ...] = ()

    def log_path(self, level: str) -> Path:
        self.work_dir.mkdir(parents=True, exist_ok=True)
        return self.work_dir / f"{level}.log"


# What a framework module (``frameworks/<name>.py``) provides for the levels above `apply`.
LevelRunner = Callable[[str, LevelContext], LevelResult]


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


MAX_FAILURES_NAMED = 3


class TestReport(Protocol):
    passed: int
    failed: int
    skipped: int
    disabled: int
    failures: Sequence[str]


def dispatch(framework: str, runners: Mapping[str, Callable[[LevelContext], LevelResult]],
             level: str, ctx: LevelContext) -> LevelResult:
    """Run one framework level runner after checking the level's declared inputs
    (``verify/inputs.py``); a failure raised becomes a FAIL with its one line."""
    from lmsforge.cache import default_cache_dir
    from lmsforge.errors import LmsforgeError, UsageError
    from lmsforge.verify import inputs

    runner = runners.get(level)
    if runner is None:
        raise UsageError(f"{framework} has no level runner for {level!r}; "
                         f"choose one of {', '.join(runners)}")
    with Timer() as timer:
        try:
            inputs.ensure_level(framework, level, default_cache_dir(), ctx.say)
            result = runner(ctx)
        except LmsforgeError as error:
            log = ctx.log_path(level)
            result = LevelResult(level, FAIL, detail=str(error),
                                 log=str(log) if log.is_file() else None)
    if result.status != SKIPPED:
        result.seconds = timer.seconds
    return result


def judge_tests(level: str, report: TestReport, facts: dict[str, object],
                log: str | None) -> LevelResult:
    """PASS only when tests ran and none failed: a level never passes with zero tests."""
    facts = {"tests_passed": report.passed, "tests_failed": report.failed,
             "tests_skipped": report.skipped, "tests_disabled": report.disabled, **facts}
    ran = report.passed + report.failed
    if report.failed:
        named = ", ".join(report.failures[:MAX_FAILURES_NAMED])
        more = len(report.failures) - MAX_FAILURES_NAMED
        named += f" and {more} more" if more > 0 else ""
        return LevelResult(level, FAIL, detail=f"{report.failed} of {ran} tests failed: {named}",
                           facts=facts, log=log)
    if report.passed == 0:
        return LevelResult(level, FAIL, detail=f"no test passed ({report.skipped} skipped)",
                           facts=facts, log=log)
    detail = f"{report.passed} tests passed"
    if report.skipped:
        detail += f", {report.skipped} skipped"
    return LevelResult(level, PASS, detail=detail, facts=facts, log=log)
