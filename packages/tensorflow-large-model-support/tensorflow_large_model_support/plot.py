"""The simulated memory-usage graph, with and without LMS, as TFLMSv2's ``autotune_plot`` wrote.

matplotlib is imported inside ``autotune_plot`` with its Agg backend, so the rest of the package
works without it and no display is needed.
"""

from __future__ import annotations

from pathlib import Path

from .autotune import available_memory
from .graph import ModelGraph, human_bytes
from .knobs import Knobs
from .simulator import simulate


def autotune_plot(graph: ModelGraph, gpu_memory_bytes: int, knobs: Knobs | None,
                  path: str | Path) -> Path:
    """Writes a PNG of bytes in use per operation to PATH and returns PATH. It simulates in the
    memory auto-tuning uses (``autotune.available_memory``), so its peaks are the ones
    auto-tuning reports for the same knobs."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    available = available_memory(gpu_memory_bytes)
    run = simulate(graph, available, knobs)
    gib = float(2**30)
    steps = range(len(run.trace))
    figure, axes = plt.subplots(figsize=(10, 5))
    try:
        axes.plot(steps, [b / gib for b in run.trace_without_lms], label="without LMS",
                  color="tab:red", linewidth=1)
        setting = "on demand" if knobs is None else (
            f"threshold {knobs.swapout_threshold}, ahead {knobs.swapin_ahead}, "
            f"sync_mode {knobs.sync_mode}")
        axes.plot(steps, [b / gib for b in run.trace], label=f"with LMS ({setting})",
                  color="tab:blue", linewidth=1)
        axes.axhline(gpu_memory_bytes / gib, color="black", linestyle="--",
                     label=f"GPU memory {human_bytes(gpu_memory_bytes)}")
        axes.axhline(available / gib, color="gray", linestyle=":",
                     label=f"simulated as available {human_bytes(available)}")
        axes.set_xlabel("operations (topological order)")
        axes.set_ylabel("memory in use (GiB)")
        verdict = "fits" if run.fits else "does not fit"
        axes.set_title(f"Simulated GPU memory per training step: peak "
                       f"{human_bytes(run.peak_bytes_without_lms)} without LMS, "
                       f"{human_bytes(run.peak_bytes)} with LMS ({verdict})")
        axes.legend(loc="upper right")
        axes.set_ylim(bottom=0)
        figure.tight_layout()
        path = Path(path)
        figure.savefig(path, format="png", dpi=100)
    finally:
        plt.close(figure)
    return path
