"""`lmsforge doctor`: what this host can do (git, compilers, CUDA, GPU, rattler-build, disk)."""

from __future__ import annotations

from lmsforge import doctor, ui
from lmsforge.options import Options


def run(opts: Options, as_json: bool) -> int:
    result = doctor.doctor(opts.cache.root)
    if as_json:
        ui.print_json({"ok": result.ok, "checks": [
            {"name": c.name, "status": c.status, "detail": c.detail} for c in result.checks]})
    else:
        ui.table("lmsforge doctor", ["check", "status", "detail"],
                 [[c.name, c.status, c.detail] for c in result.checks])
    return 0 if result.ok else 1
