"""The LMS settings `lmsforge plan` tries, as TFLMSv2's auto-tuning tried its knobs in its
simulator: a few values of each of the series' allocator settings (docs/pytorch-lms.md, "Paging
ahead of need") and the recorded-order policy, one replay each, and the fastest simulated step
wins. The defaults win ties:
a setting is recommended only when it saves more than TIE of the step."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

BASE = "lms:True"
TIE = 0.01
# Not an allocator setting: the recorded-order policy, torch.cuda.lms_step() after each training
# step (docs/pytorch-lms.md, "Recorded steps"). Its replay marks a step boundary before each step
# and runs RECORDED_STEPS steps, and reports the median of those that played a plan
# (replay.warm_up_steps: the first three record, or diverge while the optimizer's state is new).
RECORDED = "lms_step()"
RECORDED_STEPS = 8
# The recorded-order policy with the swapout threshold's page-outs ahead only where an allocation
# would pass the limit: the plan's own page-outs then have the link to themselves, and the
# threshold's (oldest use first, from a quarter of the limit under pressure) no longer send out
# what the plan keeps for its next positions. Better or worse by model (simulated, h100-pcie,
# 2026-11-30): GPT-2-medium with AdamW at 1/2 of its peak 478 -> 414 ms a step, ResNet-50 at 1/2
# 90.5 -> 84.9, at 1/4 126.6 -> 148.9; so a candidate of its own, not a default.
RECORDED_PLAN_FIRST = f"{RECORDED},lms_swapout_threshold:1.0"
# How a recorded-order candidate's label ends (label, recorded_label, conf_of).
_STEP_CALL = " + torch.cuda.lms_step()"

# (what it is, the settings beside lms:True in PYTORCH_CUDA_ALLOC_CONF)
CANDIDATES: tuple[tuple[str, str], ...] = (
    ("defaults", ""),
    ("on demand (the series before its policies ahead of need)", "lms_sync_mode:3"),
    ("page-outs ahead above a quarter of the limit", "lms_swapout_threshold:0.25"),
    ("page-outs ahead above half the limit", "lms_swapout_threshold:0.5"),
    ("page-outs ahead above three quarters of the limit", "lms_swapout_threshold:0.75"),
    ("no prefetch", "lms_swapin_ahead:0"),
    ("prefetch up to a quarter of the limit", "lms_swapin_ahead:25%"),
    ("prefetch up to the whole limit", "lms_swapin_ahead:100%"),
    ("the recorded-order policy: torch.cuda.lms_step() after each step", RECORDED),
    ("the recorded-order policy, page-outs ahead only at the limit", RECORDED_PLAN_FIRST),
)


def records(settings: str) -> bool:
    """Whether SETTINGS is a recorded-order candidate (RECORDED, maybe with allocator settings
    after it) rather than allocator settings alone."""
    return settings == RECORDED or settings.startswith(RECORDED + ",")


def replay_options(settings: str) -> dict[str, object]:
    """replay.run's options for SETTINGS: a recorded-order candidate marks a step boundary before
    each step and runs RECORDED_STEPS steps; the others take replay.run's defaults."""
    return {"record": True, "steps": RECORDED_STEPS} if records(settings) else {}


def alloc_conf(settings: str) -> str:
    """PYTORCH_CUDA_ALLOC_CONF for SETTINGS (a recorded-order candidate's allocator settings, the
    defaults when it has none)."""
    if records(settings):
        settings = settings[len(RECORDED) + 1:]
    return f"{BASE},{settings}" if settings else BASE


def label(settings: str) -> str:
    """How a tried setting is named in the answer and the JSON: its PYTORCH_CUDA_ALLOC_CONF, and
    for a recorded-order candidate the call too."""
    return alloc_conf(settings) + (_STEP_CALL if records(settings) else "")


def recorded_label(name: str) -> bool:
    """Whether a tried run's name (label) is a recorded-order candidate's."""
    return name.endswith(_STEP_CALL)


def conf_of(name: str) -> str:
    """The PYTORCH_CUDA_ALLOC_CONF of a tried run's name (label)."""
    return name[:-len(_STEP_CALL)] if recorded_label(name) else name


class Timed(Protocol):
    alloc_conf: str
    completed: bool
    step_ms: float


def choose(results: Sequence[Timed]) -> Timed | None:
    """The run to recommend: the fastest that completed, unless the defaults (the first
    candidate) are within TIE of it. None when none completed."""
    done = [r for r in results if r.completed]
    if not done:
        return None
    fastest = min(done, key=lambda r: r.step_ms)
    defaults = next((r for r in done if r.alloc_conf == BASE), None)
    if defaults is not None and defaults.step_ms <= fastest.step_ms * (1 + TIE):
        return defaults
    return fastest
