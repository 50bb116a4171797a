"""Training steps small enough to count by hand, for the planner's bound and schedules
(tests/unit/test_plan_bound.py, tests/unit/test_plan_clairvoyant.py)."""

from __future__ import annotations

import dataclasses

from lmsforge.plan.profiles import profile
from lmsforge.plan.trace_format import Op, Storage, Trace

# Slow links, so that a few thousand bytes take milliseconds.
GPU = dataclasses.replace(profile("h100-pcie"), h2d_bytes_per_s=1e6, d2h_bytes_per_s=2e6)
MS = 1000.0  # µs per operator: 1 ms each


def chain(activations: int, nbytes: int) -> Trace:
    """Forward: op i makes activation i from i - 1 (the input is storage 0). Backward: op
    2n - 1 - i reads activation i and frees it. Every operator takes 1 ms."""
    ops = []
    for i in range(1, activations + 1):
        ops.append(Op(id=len(ops), name="fwd", reads=[i - 1], writes=[i], allocs=[[i, nbytes]],
                      frees=[], duration_us={GPU.name: MS}))
    for i in range(activations, 0, -1):
        ops.append(Op(id=len(ops), name="bwd", reads=[i], writes=[], allocs=[], frees=[i],
                      duration_us={GPU.name: MS}))
    return Trace(model="chain", input="1", batch=1, dtype="float32", torch="-",
                 initial=[Storage(0, 0, "input")], ops=ops)
