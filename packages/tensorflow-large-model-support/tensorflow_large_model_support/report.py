"""The ``[LMS]`` model report: what TFLMSv2 logged when it edited a graph, from our ModelGraph.

TFLMSv2 logged the graph's vertices and edges, the MiB of learning parameters, the largest GPU
operation and its size, the levels of its categorized topological sort, and the swap operations it
added. The allocator's LMS adds no operations, so the last becomes the page-outs and page-ins the
simulator predicts per step for a given memory size.
"""

from __future__ import annotations

from .graph import ModelGraph, human_bytes
from .knobs import Knobs
from .simulator import simulate


def model_report(graph: ModelGraph, gpu_memory_bytes: int | None = None,
                 knobs: Knobs | None = None) -> list[str]:
    lines = [
        f"[LMS] The graph has {len(graph.ops)} vertices and {graph.num_edges} edges.",
        f"[LMS] The graph has {graph.parameter_bytes / 2**20:.2f} MiB of learning parameters "
        f"({human_bytes(graph.resident_bytes)} of variables with optimizer slots).",
    ]
    if graph.ops:
        # An operation that only renames its inputs (IdentityN over all gradients) allocates
        # nothing: TFLMSv2's "largest operation" is one that computes.
        computing = [i for i, op in enumerate(graph.ops) if op.outputs] or [0]
        largest = max(computing, key=graph.working_set)
        op = graph.ops[largest]
        lines.append(f"[LMS] The largest GPU operation is {op.name} ({op.type}) consuming "
                     f"{graph.working_set(largest) / 2**30:.3f} GiB")
    lines.append(f"[LMS] Original categorized topological sort has {graph.num_levels} levels.")
    if graph.unknown_shape_tensors:
        lines.append(f"[LMS] {graph.unknown_shape_tensors} tensors had an unknown dimension, "
                     f"sized with batch_size={graph.batch_size}.")
    if gpu_memory_bytes is not None:
        run = simulate(graph, gpu_memory_bytes, knobs)
        lines.append(f"[LMS] Predicted peak memory {human_bytes(run.peak_bytes_without_lms)} "
                     f"without LMS, in {human_bytes(gpu_memory_bytes)}.")
        if run.fits_without_lms:
            lines.append("[LMS] LMS is not necessary.")
        elif not run.fits:
            lines.append(f"[LMS] The model {run.reason}.")
        else:
            lines.append(f"[LMS] Predicted per step: {run.num_pageouts} page-outs "
                         f"({human_bytes(run.bytes_paged_out)}) and {run.num_pageins} page-ins "
                         f"({human_bytes(run.bytes_paged_in)}); peak {human_bytes(run.peak_bytes)}.")
    return lines
