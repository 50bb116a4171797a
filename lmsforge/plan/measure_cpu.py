"""An independent check of a trace's peak: run the same step for real on CPU and count the bytes
c10's CPU allocator hands out, from the profiler's allocation events (profile_memory=True).

Independent of the tracer: it counts allocator calls, not storages seen by a dispatch mode. It sees
more than the trace: CPU kernels' private temporaries (mse_loss's difference, slow_conv3d's
columns), which the trace leaves to the GPU kernel that replaces them. docs/plan-trace-format.md
says how far apart the two may be.

The step runs with oneDNN off, on PyTorch's own CPU kernels. oneDNN picks its convolution
implementation, and with it the scratch and weight reorders it allocates through c10, by the
CPU's instruction set: the same ResNet-50-like step measured 1.0000 of its traced peak on the
machine docs/plan-trace-format.md's table was made on, and 1.22 on an AMD EPYC with AVX2 only
(2026-12-01), where oneDNN's convolution backward held 81 MiB of its own; with oneDNN off, 1.0000
on both. A check whose answer depends on the machine that runs it checks nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
from torch._C._profiler import _EventType
from torch.profiler import ProfilerActivity, profile


@contextmanager
def _without_onednn() -> Iterator[None]:
    # The attribute, not torch.backends.mkldnn.flags(), which also sets oneDNN's TF32 switch
    # and warns on CPU-only builds.
    was = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        yield
    finally:
        torch.backends.mkldnn.enabled = was


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
    with _without_onednn(), \
            profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
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
