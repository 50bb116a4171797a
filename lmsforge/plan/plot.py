"""The memory-usage graph of a plan, as TFLMSv2's simulator drew one: device memory the caching
allocator has handed to tensors after each operator of the step, without LMS and with it, with
the GPU's memory and the LMS limit as lines. matplotlib is imported here only (a test
dependency, not a dependency of lmsforge): `--plot` without it is a one-line error."""

from __future__ import annotations

from pathlib import Path

from lmsforge.errors import UsageError
from lmsforge.plan import bound, replay
from lmsforge.plan.planner import GIB, Plan, operator_bytes, waits


def _needs(trace, op_id: int) -> int:
    return operator_bytes(trace)[op_id]


def _mark_waits(axes, plan: Plan, run: replay.Replayed) -> None:
    """A line at each operator before which the step with LMS waited longest (planner.waits)."""
    waited = waits(plan, run)
    if waited is None or not waited.largest:
        return
    index = {op.id: i for i, op in enumerate(bound.steady_ops(plan.trace, plan.first_step_only))}
    for number, wait in enumerate(waited.largest):
        axes.axvline(index[wait.op], color="tab:orange", alpha=0.6,
                     label=None if number else
                     f"where LMS waits longest ({len(waited.largest)} operators: "
                     f"{sum(w.ms for w in waited.largest):.0f} of the {waited.total_ms:.0f} ms "
                     "it waits a step)")


def write_png(plan: Plan, path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")  # no display: a file only
        from matplotlib import pyplot
    except ImportError:
        raise UsageError("--plot needs matplotlib: python3 -m pip install matplotlib") from None
    t = plan.trace
    figure, axes = pyplot.subplots(figsize=(10, 5), dpi=110)
    without = plan.without.allocated_after_op
    axes.plot(range(len(without)), [v / GIB for v in without], color="tab:red",
              label=f"without LMS (peak {plan.without.peak_allocated / GIB:.2f} GiB)")
    if plan.chosen is not None:
        chosen = plan.chosen
        axes.plot(range(len(chosen.allocated_after_op)),
                  [v / GIB for v in chosen.allocated_after_op], color="tab:blue",
                  label=f"with LMS (peak {chosen.peak_allocated / GIB:.2f} GiB; "
                        f"{(chosen.bytes_out + chosen.bytes_in) / GIB:.2f} GiB moved, "
                        f"{chosen.step_ms:.1f} ms)")
        axes.axhline(chosen.lms_limit / GIB, color="tab:blue", linestyle=":",
                     label=f"LMS limit {chosen.lms_limit / GIB:.2f} GiB")
        _mark_waits(axes, plan, chosen)
    elif plan.tried and plan.tried[0].oom_op >= 0:  # does not fit: where LMS ran out
        failed = plan.tried[0]
        skipped = replay.first_step_only(t)  # not in the curve, which is a later step's
        where = sum(1 for op in t.ops[:failed.oom_op] if op.id not in skipped)
        axes.axvline(where, color="tab:blue", linestyle="-.",
                     label=f"with LMS: out of memory at operator {failed.oom_op} "
                           f"({t.ops[failed.oom_op].name}), which needs "
                           f"{_needs(t, failed.oom_op) / GIB:.2f} GiB")
        axes.axhline(failed.lms_limit / GIB, color="tab:blue", linestyle=":",
                     label=f"LMS limit {failed.lms_limit / GIB:.2f} GiB")
    axes.axhline(plan.device_memory / GIB, color="black", linestyle="--",
                 label=f"{plan.gpu.name} memory {plan.device_memory / GIB:.2f} GiB")
    axes.set_xlabel(f"operator of a training step after the first ({len(without)} of the "
                    f"{len(t.ops)} traced: the rest only made optimizer state)"
                    if len(without) != len(t.ops) else
                    f"operator of the training step (of {len(t.ops)})")
    axes.set_ylabel("device memory allocated to tensors (GiB)")
    verdict = {"fits": "fits without LMS", "fits-with-lms": "fits with LMS",
               "does-not-fit": "does not fit"}[plan.verdict]
    axes.set_title(f"SIMULATED: {t.model} {t.input} batch {t.batch} on {plan.gpu.name}: "
                   f"{verdict}", fontsize=10)
    axes.set_ylim(bottom=0)
    axes.grid(alpha=0.3)
    axes.legend(fontsize=8, loc="best")
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    pyplot.close(figure)
