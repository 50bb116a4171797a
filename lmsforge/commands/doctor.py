"""`lmsforge doctor`: what this host can do (git, compilers, CUDA, GPU, rattler-build, disk), and
the build inputs each verification level declares, with what is present."""

from __future__ import annotations

from lmsforge import doctor, ui
from lmsforge.options import Options


def run(opts: Options, as_json: bool) -> int:
    result = doctor.doctor(opts.cache.root)
    inputs = doctor.level_inputs(opts.cache.root)
    inputs_ok = all(c.status != doctor.MISSING for c in inputs)
    if as_json:
        ui.print_json({"ok": result.ok and inputs_ok, "checks": [
            {"name": c.name, "status": c.status, "detail": c.detail} for c in result.checks],
            "level_inputs": [{"level": c.name, "status": c.status, "detail": c.detail}
                             for c in inputs]})
    else:
        ui.table("lmsforge doctor", ["check", "status", "detail"],
                 [[c.name, c.status, c.detail] for c in result.checks])
        ui.table("build inputs by verification level (lmsforge/inputs.py)",
                 ["level", "status", "inputs"], [[c.name, c.status, c.detail] for c in inputs])
    return 0 if result.ok and inputs_ok else 1
