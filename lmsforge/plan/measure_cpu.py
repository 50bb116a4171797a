"""An independent check of a trace's peak: run the same step for real on CPU and count the bytes
c10's CPU allocator hands out, from the profiler's allocation events (profile_memory=True).

Independent of the tracer: it counts allocator calls, not storages seen by a dispatch mode. It sees
more than the trace: CPU kernels' private temporaries (mse_loss's difference, oneDNN workspaces),
which the trace leaves to the GPU kernel that replaces them. docs/plan-trace-format.md says how
far apart the two may be.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile


def _allocations(node, found: list[tuple[int, int]]) -> None:
    if node.tag == _EventType.Allocation:
        found.append((node.start_time_ns, node.extra_fields.alloc_size))
    for child in node.children:
        _allocations(child, found)


def cpu_step_peak(build_model: Callable[[], torch.nn.Module],
                  make_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]],
                  loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                  make_optimizer: Callable[[list[torch.nn.Parameter]], torch.optim.Optimizer],
                  ) -> int:
    """Peak bytes live during one real CPU step: what lived before it (parameters, buffers, the
    batch) plus the highest running sum of allocations and frees during it."""
    model = build_model()
    inputs, target = make_batch()
    optimizer = make_optimizer(list(model.parameters()))
    storages = {t.untyped_storage()._cdata: t.untyped_storage().nbytes()
                for t in [*model.parameters(), *model.buffers(), inputs, target]}
    before = sum(storages.values())
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        loss = loss_fn(model(inputs), target)
        loss.backward()
        del loss
        optimizer.step()
    events: list[tuple[int, int]] = []
    for root in prof.profiler.kineto_results.experimental_event_tree():
        _allocations(root, events)
    live = peak = 0
    for _, size in sorted(events):
        live += size
        peak = max(peak, live)
    return before + peak
