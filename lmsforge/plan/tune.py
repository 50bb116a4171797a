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
# and runs RECORDED_STEPS steps, so that the median after the first is a step played from a
# recording (the first two are recorded or diverge while the optimizer's state is new).
RECORDED = "lms_step()"
RECORDED_STEPS = 8

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
)


def records(settings: str) -> bool:
    """Whether SETTINGS is the recorded-order policy rather than allocator settings."""
    return settings == RECORDED


def alloc_conf(settings: str) -> str:
    """PYTORCH_CUDA_ALLOC_CONF for SETTINGS (the recorded-order policy runs with the defaults)."""
    return f"{BASE},{settings}" if settings and not records(settings) else BASE


def label(settings: str) -> str:
    """How a tried setting is named in the answer and the JSON: its PYTORCH_CUDA_ALLOC_CONF, or
    for the recorded-order policy, the defaults and the call."""
    return f"{BASE} + torch.cuda.lms_step()" if records(settings) else alloc_conf(settings)


def recorded_label(name: str) -> bool:
    """Whether a tried run's name (label) is the recorded-order policy's."""
    return name.endswith("+ torch.cuda.lms_step()")


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
