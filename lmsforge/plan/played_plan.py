"""A plan of LMS moves made from a trace, for the replay to play through the real allocator
(`lms_plan_replay_sim --plan`; docs/recorded-order-policy.md, "A plan played through LMS").

It measures what a recorded-order policy would win before that policy exists: the trace stands
in for the recording. The decisions are clairvoyant.belady_plan's (before each operator, page
out what is used furthest ahead until its operands fit), taken from the second of its steps
(the first places what the step makes); the replay asks LMS for each move by name before the
operator listed, with prefetch off, and LMS's own policies act on whatever the plan leaves.

- A page-out is asked for right after the storage's last use before the plan's position, at
  most PAGE_OUT_LEAD operators early: the copy then runs beside the work in between, where a
  page-out made when needed would stall the operator.
- A page-in is asked for as early as the plan's memory leaves room for it at every operator
  until its use, at most `page_in_lead` operators early and never before its page-out.
- The plan is made for SLACK of the limit: the caching allocator rounds sizes and splits
  blocks, so the byte-counted model fits where the allocator does not, and LMS's own reclaims
  would then undo the plan's choices.

No write-backs yet (a copy of data that is final, made before the page-out): every page-out
here is a copy when asked for.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lmsforge.plan import clairvoyant
from lmsforge.plan.profiles import Profile
from lmsforge.plan.schedule_device import Device
from lmsforge.plan.trace import Trace

SLACK = 0.8
PAGE_OUT_LEAD = 60  # operators
# The leads a benchmark tries, the faster kept: the best lead differs by model (prototype,
# 2026-11-30: 60 for ResNet-50 at 1/2, 5 for the 3D U-Net).
PAGE_IN_LEADS = (5, 60)  # operators


@dataclass
class MovePlan:
    """Per operator id (the trace's), the storages to page out and to page in before it runs."""
    outs: dict[int, list[int]] = field(default_factory=dict)
    ins: dict[int, list[int]] = field(default_factory=dict)

    def moves(self) -> int:
        return sum(map(len, self.outs.values())) + sum(map(len, self.ins.values()))

    def write(self, path: Path) -> None:
        """The replay's format (docs/plan-trace-format.md, "A plan of moves")."""
        lines = ["# lmsforge plan of moves: out|in OPERATOR STORAGE..."]
        lines += [f"out {op} {' '.join(map(str, sids))}" for op, sids in sorted(self.outs.items())]
        lines += [f"in {op} {' '.join(map(str, sids))}" for op, sids in sorted(self.ins.items())]
        path.write_text("\n".join(lines) + "\n")


def make(trace: Trace, gpu: Profile, limit: int, first_step_only: set[int], page_in_lead: int,
         page_out_lead: int = PAGE_OUT_LEAD, slack: float = SLACK,
         rule: str = "furthest") -> MovePlan:
    """The moves of TRACE's steady step under LIMIT bytes (clairvoyant.DoesNotFit when an
    operator cannot fit even after every page-out)."""
    room = int(limit * slack)
    run = Device(trace, gpu, room, first_step_only)
    run.start_step_one()
    decided = clairvoyant.belady_plan(run, rule)
    count = len(run.ops)
    plan = MovePlan()
    ahead = [0] * len(decided.during)  # bytes paged in early, per position
    paged_out_at: dict[int, int] = {}
    for position in range(2 * count):
        for sid in decided.evictions[position]:
            paged_out_at[sid] = position
        if position < count:
            continue  # the first step only places storages
        for sid in decided.evictions[position]:
            if run.sizes[sid] == 0:
                continue  # the decisions count storages; a move of nothing is no move
            asked = position
            earliest = max(position - page_out_lead, count)
            while asked - 1 >= earliest and sid not in run.operands[(asked - 1) % count]:
                asked -= 1
            plan.outs.setdefault(run.ops[asked % count].id, []).append(sid)
        for sid in decided.page_ins[position]:
            nbytes = run.sizes[sid]
            if nbytes == 0:
                continue
            asked = position
            earliest = max(paged_out_at.get(sid, -1) + 1, position - page_in_lead, count)
            while (asked - 1 >= earliest
                   and decided.during[asked - 1] + ahead[asked - 1] + nbytes <= room):
                asked -= 1
            for between in range(asked, position):
                ahead[between] += nbytes
            plan.ins.setdefault(run.ops[asked % count].id, []).append(sid)
    return plan
