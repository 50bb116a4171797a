"""core-sim's second pass: the series' CUDA tests and fuzzer again, with PyTorch's expandable
segments on (``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``), the allocator setting that
PyTorch's own out-of-memory message recommends. The allocator then maps 2 and 20 MiB pages of
physical memory into one reserved range per stream and pool through the driver's virtual
memory API, which the simulator models (``lmsforge/sim/README.md``, "Driver front end").

Three tests do not run in this pass; each is named with why (``docs/core-sim.md``,
"Expandable segments"). The rest must pass under each seed, as in the first pass.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

ALLOC_CONF = "expandable_segments:True"
SEEDS = (1, 2)

# Upstream's ExpandableSegment::unmapHandles synchronises the stream its segment was made for:
# destroying a stream that made tensors is undefined behaviour with expandable segments, LMS or
# not (the fuzzer keeps its external streams until its end in this pass).
_DESTROYED = ("it destroys an external stream that made tensors, which expandable segments "
              "synchronise later when they unmap their pages: undefined behaviour upstream, "
              "with or without LMS")
NOT_RUN: Mapping[str, str] = {
    "LargeModelSupportCudaTest.AStorageAllocatedOnADestroyedExternalStreamIsPagedInAhead":
        _DESTROYED,
    "LargeModelSupportCudaTest.APrefetchForADestroyedExternalStreamIsFreedWithoutIt": _DESTROYED,
    "LargeModelSupportCudaTest.APlayedStepNeverNamesAnExternalStreamItsRecordingSaw": _DESTROYED,
}


def unavailable(tree: Path) -> str:
    """Why TREE's c10 has no expandable segments, or "" (they came with PyTorch 2.1, through
    c10/cuda/driver_api.h)."""
    if not (tree / "c10" / "cuda" / "driver_api.h").is_file():
        return "this PyTorch has no expandable segments (they came in 2.1)"
    return ""


def env_for(env: Mapping[str, str]) -> dict[str, str]:
    """The first pass's environment ENV with expandable segments on."""
    return {**env, "PYTORCH_CUDA_ALLOC_CONF": ALLOC_CONF}
