"""The offline simulator: device memory over one training step, with and without LMS.

The step's operations run one at a time in the graph's topological order (``graph.ModelGraph``).

**Without LMS** every buffer is resident from the operation that allocates it to its last reader
(a buffer nobody reads is freed as soon as its producer is done), and the variables (parameters,
optimizer slots) are resident throughout. The bytes in use at an operation are the variables plus
every live buffer, the operation's own outputs included.

**With LMS** the model is the series' allocator LMS (``docs/tensorflow-lms.md``), which pages on
demand: when an allocation or a page-in does not fit, buffers that are *inactive* (not an input or
output of the running operation, and already used by some kernel: a fed input batch that no kernel
has read yet is never paged out) are paged out, the one unused for longest first, until it fits.
A paged-out buffer is paged back in when an operation reads it. On top of that come TFLMSv2's knobs
(``knobs.Knobs``), with their TFLMSv2 meaning:

- ``swapout_threshold`` N: after each operation, a resident buffer whose next reader is more than N
  operations ahead is paged out ahead of need;
- ``swapin_ahead`` A: a paged-out buffer is paged back in A operations before its reader runs;
- ``sync_mode``: 1 or 3 make page-outs synchronous (the memory is free at once); otherwise an
  ahead page-out overlaps the next operation and its memory is free only after it. 2 or 3 make
  page-ins synchronous: a buffer comes back only when its reader runs (``swapin_ahead`` unused);
- ``swapin_groupby`` has no allocator meaning (each buffer is paged in once per reader anyway).

A result *fits* when no operation's working set (variables + inputs + outputs + buffers it cannot
page out) exceeds the memory. Not simulated: fragmentation (the allocator's free blocks are not
contiguous), kernel scratch (cuDNN workspaces, which never cause page-outs), TensorFlow reusing an
input's buffer for an output, the executor running independent operations in parallel, copy
times, and paging the variables themselves (the allocator may; we keep them resident, which errs
on the safe side).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from .graph import ModelGraph, human_bytes
from .knobs import AUTO, Knobs


@dataclass
class SimulationResult:
    memory_bytes: int
    peak_bytes: int                 # with LMS (the knobs' or on demand only)
    peak_bytes_without_lms: int
    fits: bool
    fits_without_lms: bool
    bytes_paged_out: int = 0        # per step, ahead and on demand
    bytes_paged_in: int = 0
    bytes_paged_out_on_demand: int = 0   # page-outs the allocator had to make while a kernel waited
    num_pageouts: int = 0
    num_pageins: int = 0
    failing_op: str | None = None   # the operation that does not fit even with LMS
    reason: str | None = None
    trace: list[int] = field(default_factory=list)              # bytes in use per op, LMS
    trace_without_lms: list[int] = field(default_factory=list)  # bytes in use per op, no LMS


def trace_without_lms(graph: ModelGraph) -> list[int]:
    """Bytes in use while each operation runs, every buffer resident from producer to last use."""
    freed_after: dict[int, list[int]] = {}
    for buffer_id, buffer in enumerate(graph.buffers):
        freed_after.setdefault(buffer.last_use, []).append(buffer_id)
    live = 0
    trace = []
    for index, op in enumerate(graph.ops):
        live += sum(graph.buffers[b].nbytes for b in op.outputs)
        trace.append(graph.resident_bytes + live)
        live -= sum(graph.buffers[b].nbytes for b in freed_after.get(index, ()))
    return trace


def simulate(graph: ModelGraph, gpu_memory_bytes: int, knobs: Knobs | None = None) -> SimulationResult:
    """Simulates one step in GPU_MEMORY_BYTES; KNOBS None is the allocator's on-demand LMS alone."""
    if type(gpu_memory_bytes) is not int or gpu_memory_bytes <= 0:
        raise ValueError(f"gpu_memory_bytes must be a positive int, not {gpu_memory_bytes!r}")
    plain = trace_without_lms(graph)
    peak_plain = max(plain, default=graph.resident_bytes)
    result = SimulationResult(gpu_memory_bytes, 0, peak_plain, False,
                              peak_plain <= gpu_memory_bytes, trace_without_lms=plain)
    _Paging(graph, gpu_memory_bytes, knobs or Knobs(), knobs is not None, result).run()
    return result


class _Paging:
    def __init__(self, graph: ModelGraph, memory: int, knobs: Knobs, ahead_on: bool,
                 result: SimulationResult) -> None:
        self.graph, self.memory, self.result = graph, memory, result
        threshold, ahead = knobs.swapout_threshold, knobs.swapin_ahead
        # Without knobs (or with a knob left to auto-tuning) nothing is paged ahead of need.
        self.threshold = threshold if ahead_on and threshold != AUTO else None
        self.ahead = ahead if ahead_on and ahead != AUTO and knobs.sync_mode in (0, 1) else None
        self.sync_out = knobs.sync_mode in (1, 3)
        self.resident: dict[int, int] = {}   # buffer -> bytes, on the device
        self.on_host: set[int] = set()
        self.in_flight: list[int] = []       # asynchronous page-outs still holding memory
        self.last_used: dict[int, int] = {}  # buffer -> the op that last touched it
        self.touched: set[int] = set()       # buffers some kernel has used
        self.device_bytes = 0                # sum of resident
        self.flight_bytes = 0                # sum of in_flight

    def in_use(self) -> int:
        return self.graph.resident_bytes + self.device_bytes + self.flight_bytes

    def next_use(self, buffer: int, after: int) -> int | None:
        uses = self.graph.buffers[buffer].uses
        position = bisect.bisect_right(uses, after)
        return uses[position] if position < len(uses) else None

    def land(self) -> None:
        """Asynchronous page-outs in flight are done: their memory is free."""
        self.in_flight.clear()
        self.flight_bytes = 0

    def keep(self, buffer: int) -> None:
        self.resident[buffer] = self.graph.buffers[buffer].nbytes
        self.device_bytes += self.graph.buffers[buffer].nbytes

    def drop(self, buffer: int) -> None:
        self.device_bytes -= self.resident.pop(buffer, 0)

    def make_room(self, needed: int, pinned: set[int], on_demand: bool = True) -> bool:
        """Pages out inactive buffers, unused for longest first, until NEEDED more bytes fit."""
        if self.in_use() + needed <= self.memory:
            return True
        # An asynchronous page-out in flight: the allocator waits for its copy, then reuses it.
        self.land()
        victims = sorted((b for b in self.resident if b not in pinned and b in self.touched),
                         key=lambda b: self.last_used.get(b, -1))
        for victim in victims:
            if self.in_use() + needed <= self.memory:
                break
            self.page_out(victim, on_demand=on_demand, now=True)
        return self.in_use() + needed <= self.memory

    def page_out(self, buffer: int, *, on_demand: bool, now: bool) -> None:
        nbytes = self.graph.buffers[buffer].nbytes
        self.drop(buffer)
        self.on_host.add(buffer)
        self.result.bytes_paged_out += nbytes
        self.result.num_pageouts += 1
        if on_demand:
            self.result.bytes_paged_out_on_demand += nbytes
        if not now:
            self.in_flight.append(buffer)
            self.flight_bytes += nbytes

    def page_in(self, buffer: int) -> None:
        self.on_host.discard(buffer)
        self.keep(buffer)
        self.result.bytes_paged_in += self.graph.buffers[buffer].nbytes
        self.result.num_pageins += 1

    def fail(self, index: int, why: str) -> None:
        op = self.graph.ops[index]
        self.result.fits = False
        self.result.failing_op = op.name
        self.result.reason = (f"does not fit even with LMS: operation {op.name} ({op.type}) {why} "
                              f"in {human_bytes(self.memory)}")

    def run(self) -> None:
        graph, result = self.graph, self.result
        last_use = {b: buf.last_use for b, buf in enumerate(graph.buffers)}
        ok = True
        for index, op in enumerate(graph.ops):
            pinned = set(op.inputs) | set(op.outputs)
            need = graph.resident_bytes + graph.working_set(index)
            if ok and need > self.memory:
                self.fail(index, f"needs {human_bytes(need)} (variables, inputs and outputs)")
                ok = False
            if self.ahead is not None:   # prefetch what is read within swapin_ahead operations
                for buffer in sorted(self.on_host):
                    use = self.next_use(buffer, index - 1)
                    if use is not None and use - index <= self.ahead and buffer not in pinned:
                        nbytes = graph.buffers[buffer].nbytes
                        if self.in_use() + nbytes <= self.memory:
                            self.page_in(buffer)
            for buffer in op.inputs:
                if buffer in self.on_host:
                    self.make_room(graph.buffers[buffer].nbytes, pinned)
                    self.page_in(buffer)
            new = sum(graph.buffers[b].nbytes for b in op.outputs)
            if not self.make_room(new, pinned) and ok:
                self.fail(index, "cannot get room for its outputs (its inputs and never-used "
                          "inputs of the step cannot be paged out)")
                ok = False
            for buffer in op.outputs:
                self.keep(buffer)
            for buffer in pinned:
                self.last_used[buffer] = index
                self.touched.add(buffer)
            result.trace.append(self.in_use())
            # The operation is done: an asynchronous page-out started before it has finished.
            self.land()
            for buffer in pinned:
                if last_use[buffer] <= index:
                    self.drop(buffer)
                    self.on_host.discard(buffer)
            if self.threshold is not None:
                for buffer in list(self.resident):
                    use = self.next_use(buffer, index)
                    if use is not None and use - index > self.threshold and buffer in self.touched:
                        self.page_out(buffer, on_demand=False, now=self.sync_out)
        result.peak_bytes = max(result.trace, default=graph.resident_bytes)
        if ok:
            result.fits = result.peak_bytes <= self.memory
            if not result.fits:
                result.reason = f"peaks at {human_bytes(result.peak_bytes)}"
