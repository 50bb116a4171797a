"""LMS statistics for TFLMSv2 and IBM TF 2.x LMS scripts.

IBM's TensorFlow 2.1/2.2 LMS had 20 ``tf.experimental.get_*(gpu_id)`` functions
(``ibm-lms.md`` §4.4). lmsforge's series has one, ``tf.config.experimental.get_lms_stats(device)``,
returning a dict. The functions below are thin wrappers with IBM's names where a meaning carries
over; ``NOT_CARRIED`` names the others and says why, and asking for one raises AttributeError
with that reason. Like IBM's, they take the zero-based GPU id.

``StatsCsvLogger`` writes per-step deltas with the columns of IBM's ``LMSStatsLogger``
(``examples/callbacks.py``): ``step type, epoch, step, duration, allocs, reclaimOnes,
reclaimAlls, GiB reclaimed``.
"""

from __future__ import annotations

import csv
import time
from pathlib import Path

from . import _backend

# IBM's name -> the series' get_lms_stats key with the same meaning.
CARRIED = {
    # IBM counted allocation requests; the series counts tensor buffers LMS took charge of.
    "get_num_allocs": "num_allocs",
    "get_bytes_inactive": "bytes_inactive",
    "get_bytes_active": "bytes_active",
    "get_peak_bytes_active": "peak_bytes_active",
    "get_bytes_reclaimed": "bytes_reclaimed",
    "get_current_bytes_reclaimed": "current_bytes_reclaimed",
    "get_peak_bytes_reclaimed": "peak_bytes_reclaimed",
    "get_num_single_reclaims": "num_single_reclaims",
    "get_num_full_reclaims": "num_full_reclaims",
    # New in the series (page-ins are explicit there); no IBM name, named in IBM's style.
    "get_num_pageins": "num_pageins",
    "get_bytes_paged_in": "bytes_paged_in",
}

# IBM's name -> tf.config.experimental.get_memory_info key (stock TensorFlow has it too).
FROM_MEMORY_INFO = {
    "get_bytes_in_use": "current",
    "get_peak_bytes_in_use": "peak",
}

_NO_LIMITS = "TensorFlow 2.14 exposes only get_memory_info's 'current' and 'peak'"
NOT_CARRIED = {
    "get_largest_alloc_size": _NO_LIMITS,
    "get_bytes_limit": _NO_LIMITS,
    "get_bytes_reserved": _NO_LIMITS,
    "get_peak_bytes_reserved": _NO_LIMITS,
    "get_bytes_reservable_limit": _NO_LIMITS,
    "get_num_defragmentations": "the series does not defragment (IBM dropped it in 2.2)",
    "get_bytes_defragged": "the series does not defragment (IBM dropped it in 2.2)",
    "get_gpu_host_bytes_in_use": "the series exposes no statistics of the pinned host allocator",
    "get_gpu_host_peak_bytes_in_use": "the series exposes no statistics of the pinned host allocator",
}


def _device(gpu_id: int) -> str:
    if type(gpu_id) is not int or gpu_id < 0:
        raise ValueError(f"gpu_id must be a GPU index >= 0, not {gpu_id!r}")
    return f"GPU:{gpu_id}"


def _lms_getter(name: str, key: str):
    def getter(gpu_id: int) -> int:
        return int(_backend.stats(_device(gpu_id))[key])
    getter.__name__ = name
    getter.__doc__ = f"IBM's tf.experimental.{name}: get_lms_stats(...)['{key}']."
    return getter


def _memory_info_getter(name: str, key: str):
    def getter(gpu_id: int) -> int:
        import tensorflow as tf
        return int(tf.config.experimental.get_memory_info(_device(gpu_id))[key])
    getter.__name__ = name
    getter.__doc__ = f"IBM's tf.experimental.{name}: get_memory_info(...)['{key}']."
    return getter


for _name, _key in CARRIED.items():
    globals()[_name] = _lms_getter(_name, _key)
for _name, _key in FROM_MEMORY_INFO.items():
    globals()[_name] = _memory_info_getter(_name, _key)
del _name, _key


def __getattr__(name: str):
    if name in NOT_CARRIED:
        raise AttributeError(f"{name} has no equivalent in lmsforge's LMS: {NOT_CARRIED[name]}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


CSV_COLUMNS = ["step type", "epoch", "step", "duration", "allocs", "reclaimOnes", "reclaimAlls",
               "GiB reclaimed"]
_GIB = 1 << 30


class StepStats:
    """Deltas of the series' counters over one step, as IBM's LMSStats measured them."""

    def __init__(self, device: str):
        self.device = device
        self._start: dict[str, int] | None = None
        self._started_at = 0.0

    def begin(self) -> None:
        self._start = _backend.stats(self.device)
        self._started_at = time.perf_counter()

    def end(self) -> dict[str, float]:
        duration = time.perf_counter() - self._started_at
        now = _backend.stats(self.device)
        start = self._start or now

        def delta(key: str) -> int:
            return int(now.get(key, 0)) - int(start.get(key, 0))
        return {"duration": duration, "allocs": delta("num_allocs"),
                "reclaimOnes": delta("num_single_reclaims"),
                "reclaimAlls": delta("num_full_reclaims"),
                "GiB reclaimed": delta("bytes_reclaimed") / _GIB}


class StatsCsvLogger:
    """Appends one row per step to PATH, with IBM's LMSStatsLogger columns; 't' rows are
    training steps, 'v' rows evaluation steps."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._file = None
        self._writer = None

    def write(self, step_type: str, epoch: int, step: int, deltas: dict[str, float]) -> None:
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("w", newline="")
            self._writer = csv.writer(self._file)
            self._writer.writerow(CSV_COLUMNS)
        self._writer.writerow([step_type, epoch, step, f"{deltas['duration']:.6f}",
                               deltas["allocs"], deltas["reclaimOnes"], deltas["reclaimAlls"],
                               f"{deltas['GiB reclaimed']:.6f}"])
        self._file.flush()  # a crash mid-training keeps the rows so far

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = self._writer = None
