"""Auto-tuning by simulation, as TFLMSv2 did it (``ibm-lms.md`` §5.2).

The memory the simulation may use is the GPU's times ``TF_LMS_SIMULATOR_MEM_RATIO`` (default 0.9,
TFLMSv2's headroom for what the simulator does not see). When the step fits without LMS the answer
is "LMS is not necessary". Otherwise the search follows TFLMSv2's order: the largest
``swapout_threshold`` that fits (fewest page-outs), escalating ``sync_mode`` 0 -> 3 while even a
threshold of 1 does not; then the largest ``swapin_ahead`` below the threshold that still fits
(earliest page-ins); ``swapin_groupby`` is set to 0, having no meaning for the allocator's LMS.

A setting *fits* when its simulation fits and the knobs' ahead page-outs alone keep the step in
memory, with no on-demand page-out (TFLMSv2's graph had no on-demand fallback; for the allocator's
LMS an on-demand page-out stalls the kernel that waits for it). When no setting does, the knobs
that page most (threshold 1, ahead 1, sync_mode 3) are returned with a message: they fit with the
allocator's on-demand paging on top.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from .graph import ModelGraph, human_bytes
from .knobs import Knobs
from .simulator import SimulationResult, simulate

RATIO_VARIABLE = "TF_LMS_SIMULATOR_MEM_RATIO"
DEFAULT_RATIO = 0.9


@dataclass
class AutotuneResult:
    knobs: Knobs | None
    messages: list[str] = field(default_factory=list)
    with_lms: SimulationResult | None = None
    without_lms: SimulationResult | None = None


def memory_ratio() -> float:
    text = os.environ.get(RATIO_VARIABLE)
    if text is None:
        return DEFAULT_RATIO
    try:
        ratio = float(text)
    except ValueError:
        ratio = -1.0
    if not 0 < ratio <= 1:
        raise ValueError(f"{RATIO_VARIABLE} must be a number in (0, 1], not {text!r}")
    return ratio


def available_memory(gpu_memory_bytes: int) -> int:
    """The bytes a simulation may use on a GPU of GPU_MEMORY_BYTES: auto-tuning, the report LMS
    logs and the plot all simulate in this, so their figures agree."""
    return int(gpu_memory_bytes * memory_ratio())


def _largest_fitting(fits, low: int, high: int) -> int:
    """The largest value in [LOW, HIGH] for which FITS holds, given that it holds for LOW."""
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low


def autotune(graph: ModelGraph, gpu_memory_bytes: int) -> AutotuneResult:
    if type(gpu_memory_bytes) is not int or gpu_memory_bytes <= 0:
        raise ValueError(f"gpu_memory_bytes must be a positive int, not {gpu_memory_bytes!r}")
    ratio = memory_ratio()
    available = available_memory(gpu_memory_bytes)
    on_demand = simulate(graph, available)
    result = AutotuneResult(None, without_lms=on_demand)
    if on_demand.fits_without_lms:
        result.messages.append("[LMS] LMS is not necessary. Turned LMS off.")
        result.messages.append(f"[LMS] Predicted peak {human_bytes(on_demand.peak_bytes_without_lms)}"
                               f" of {human_bytes(available)} available for simulation.")
        return result
    result.messages.append(f"[LMS] Available GPU memory for simulation: {human_bytes(available)} "
                           f"({RATIO_VARIABLE}={ratio} of {human_bytes(gpu_memory_bytes)}).")
    if not on_demand.fits:
        result.messages.append(f"[LMS] The model {on_demand.reason}.")
        return result
    result.messages.append("[LMS] Searching values for parameters: swapout_threshold, "
                           "swapin_ahead, swapin_groupby and sync_mode.")
    runs: dict[Knobs, SimulationResult] = {}

    def fits(knobs: Knobs) -> bool:
        if knobs not in runs:
            runs[knobs] = simulate(graph, available, knobs)
        run = runs[knobs]
        return run.fits and run.bytes_paged_out_on_demand == 0

    operations = max(1, len(graph.ops))
    chosen = None
    for sync_mode in range(4):
        if fits(Knobs(1, 1, 0, sync_mode)):
            threshold = _largest_fitting(lambda t: fits(Knobs(t, 1, 0, sync_mode)), 1, operations)
            chosen = Knobs(threshold, 1, 0, sync_mode)
            break
    if chosen is None:
        chosen = Knobs(1, 1, 0, 3)
        fits(chosen)
        result.messages.append("[LMS] No setting keeps the step in memory by paging ahead alone; "
                               "the allocator will also page out on demand.")
    elif chosen.sync_mode in (0, 1) and chosen.swapout_threshold > 1:
        ahead = _largest_fitting(
            lambda a: fits(Knobs(chosen.swapout_threshold, a, 0, chosen.sync_mode)),
            1, chosen.swapout_threshold - 1)
        chosen = Knobs(chosen.swapout_threshold, ahead, 0, chosen.sync_mode)
    best = runs[chosen]
    result.knobs, result.with_lms = chosen, best
    result.messages += [
        f"[LMS] sync_mode = {chosen.sync_mode}",
        f"[LMS] swapout_threshold = {chosen.swapout_threshold}",
        f"[LMS] swapin_ahead = {chosen.swapin_ahead}",
        "[LMS] swapin_groupby = 0 (no meaning for the allocator's LMS)",
        f"[LMS] Simulated {len(runs)} settings. Predicted peak {human_bytes(best.peak_bytes)} with "
        f"LMS ({human_bytes(best.peak_bytes_without_lms)} without); per step "
        f"{best.num_pageouts} page-outs ({human_bytes(best.bytes_paged_out)}) and "
        f"{best.num_pageins} page-ins ({human_bytes(best.bytes_paged_in)}).",
    ]
    return result
