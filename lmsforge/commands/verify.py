"""`lmsforge verify`: run verification levels for one series or all of them; table + JSON."""

from __future__ import annotations

import json
import os
from pathlib import Path

from lmsforge import frameworks, ui
from lmsforge.errors import UsageError
from lmsforge.options import Options
from lmsforge.series import catalogue, manifest as series_mod
from lmsforge.verify import runner
from lmsforge.verify.levels import DEFAULT_SIM_SEEDS, SKIPPED


def selected_series(opts: Options, framework: str | None, tag: str | None) -> list[tuple[str, str]]:
    if tag and not framework:
        raise UsageError("--tag needs --framework")
    names = [framework] if framework else catalogue.known(opts.patches_dir)
    chosen = []
    for name in names:
        sources = catalogue.sources_for(opts.patches_dir, name)
        if tag:
            catalogue.series_folder(opts.patches_dir, sources, tag)
            chosen.append((name, tag))
        else:
            chosen.extend((name, t) for t in series_mod.available_tags(opts.patches_dir, name))
    if not chosen:
        raise UsageError(f"no series to verify under {opts.patches_dir}")
    return chosen


def check_report_path(path: Path) -> None:
    """Refuse a report path that cannot be written before any work is done."""
    if path.is_dir():
        raise UsageError(f"--report {path} is a folder; pass a file name")
    parent = path.absolute().parent
    if not parent.is_dir():
        raise UsageError(f"--report {path}: the folder {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists()
                                                    and not os.access(path, os.W_OK)):
        raise UsageError(f"--report {path} is not writable by this user; pass another file")


def run(opts: Options, framework: str | None, tag: str | None, level: str, require: bool,
        as_json: bool, report_path: Path | None, fetch_kwargs: dict[str, object],
        sim_seeds: int = DEFAULT_SIM_SEEDS) -> int:
    if report_path is not None:
        check_report_path(report_path)
    chosen = selected_series(opts, framework, tag)
    opts.cache.require_writable("verify keeps its work trees, builds and reports there")
    reports = []
    for name, series_tag in chosen:
        reports.append(runner.verify_series(opts, name, series_tag, level, ui.say, fetch_kwargs,
                                            frameworks.level_runner(name), sim_seeds))
    data = {"level": level, "series": [r.to_json() for r in reports]}
    if report_path:
        report_path.write_text(json.dumps(data, indent=2) + "\n")
    if as_json:
        ui.print_json(data)
    else:
        rows = []
        for report in reports:
            for result in report.results:
                rows.append([f"{report.framework} {report.tag}", result.level, result.status,
                             f"{result.seconds:.1f}", result.detail])
        ui.table(f"lmsforge verify --level {level}",
                 ["series", "level", "result", "seconds", "detail"], rows)
    failed = any(r.failed for r in reports)
    unmet = require and any(res.level == level and res.status == SKIPPED
                            for r in reports for res in r.results)
    if unmet and not as_json:
        ui.error(f"level {level} was required but skipped (see the reason above)")
    return 1 if failed or unmet else 0

