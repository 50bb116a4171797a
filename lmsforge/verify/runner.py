"""Run verification levels for one series and write the machine-readable report."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lmsforge import ui
from lmsforge.series import catalogue, manifest as series_mod
from lmsforge.upstream import tree as upstream
from lmsforge.errors import LmsforgeError, UsageError
from lmsforge.options import Options
from lmsforge.verify import apply_level
from lmsforge.verify.levels import (DEFAULT_SIM_SEEDS, FAIL, LEVELS, SKIPPED, LevelContext,
                                    LevelResult, LevelRunner)


BY_SERIES = "by-series"
OLDER_LMSFORGE = "verified by an older lmsforge (no series hash recorded)"


@dataclass
class SeriesReport:
    framework: str
    tag: str
    series_hash: str
    identity: dict[str, object]
    results: list[LevelResult] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return any(r.status == FAIL for r in self.results)

    def to_json(self) -> dict[str, object]:
        return {"framework": self.framework, "tag": self.tag, "series_hash": self.series_hash,
                "identity": self.identity, "results": [r.to_json() for r in self.results],
                "ok": not self.failed}


def levels_up_to(level: str) -> list[str]:
    return list(LEVELS[: LEVELS.index(level) + 1])


def verify_series(opts: Options, framework: str, tag: str, level: str,
                  say: Callable[[str], None], fetch_kwargs: dict[str, object],
                  runner: LevelRunner | None, sim_seeds: int = DEFAULT_SIM_SEEDS) -> SeriesReport:
    """Fetch, apply and check the series up to LEVEL; RUNNER runs the framework's levels above
    `apply` (``frameworks.level_runner``; None: the framework has no harness above it)."""
    sources = catalogue.sources_for(opts.patches_dir, framework)
    folder = catalogue.series_folder(opts.patches_dir, sources, tag)
    series = series_mod.load(folder)
    with ui.step(f"{framework} {tag}: fetching the upstream tree",
                 progress=lambda: ui.folder_size(opts.cache.partial)):
        identity = upstream.fetch(sources, tag, opts.cache,
                                  **fetch_kwargs)  # type: ignore[arg-type]
    report = SeriesReport(framework, tag, series.content_hash(), identity.to_json())
    tree_path = opts.cache.root / "trees" / framework / tag
    with opts.cache.lock(f"tree-{framework}-{tag}"):
        with ui.step(f"{framework} {tag}: level apply"):
            result = apply_level.run(tree_path, identity, series)
        report.results.append(result)
        for name in levels_up_to(level)[1:]:
            if result.status == FAIL:
                report.results.append(LevelResult(name, SKIPPED, 0.0,
                                                  f"not run: level {result.level} failed"))
                continue
            if runner is None:
                result = LevelResult(name, SKIPPED, 0.0,
                                     f"no verification harness for {framework} above `apply`")
            else:
                ctx = LevelContext(framework, tag, tree_path, identity.commit,
                                   opts.cache.build_dir(framework, tag, "verify"), opts.jobs, say,
                                   sim_seeds)
                started = time.monotonic()
                try:
                    with ui.step(f"{framework} {tag}: level {name}"):
                        result = runner(name, ctx)
                except LmsforgeError as exc:
                    result = LevelResult(name, FAIL, time.monotonic() - started, str(exc))
            report.results.append(result)
    write_report(opts, report)
    return report


def write_report(opts: Options, report: SeriesReport) -> Path:
    """The last report per series content (``by-series/<series hash>.json``) and the last one of
    the tag (``verify.json``): `list` and `status` show only a result for the content they see."""
    folder = opts.cache.report_dir(report.framework, report.tag)
    data = report.to_json()
    data["written_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    text = json.dumps(data, indent=2) + "\n"
    for path in (folder / BY_SERIES / f"{report.series_hash}.json", folder / "verify.json"):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(text)
        tmp.replace(path)
    return folder / "verify.json"


def last_report(opts: Options, framework: str, tag: str,
                series_hash: str | None = None) -> dict[str, object] | None:
    """The last report for this series content (any content when SERIES_HASH is None); None
    when there is none or the file is damaged (it is rewritten by the next verify)."""
    folder = opts.cache.report_dir(framework, tag)
    path = folder / BY_SERIES / f"{series_hash}.json" if series_hash else folder / "verify.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    if not _well_formed(data) or (series_hash and data.get("series_hash") != series_hash):
        return None
    return data


def level_statuses(report: dict[str, object] | None) -> dict[str, str] | None:
    if report is None:
        return None
    return {r["level"]: r["status"] for r in report["results"]}  # type: ignore[union-attr]


def _well_formed(data: object) -> bool:
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        return False
    return all(isinstance(r, dict) and isinstance(r.get("level"), str)
               and isinstance(r.get("status"), str) for r in data["results"])


def last_verify(opts: Options, framework: str, tag: str,
                folder: Path | None) -> dict[str, object]:
    """The last verification of the series as it is now in FOLDER, never of other content."""
    if folder is None:
        return {"last_verify": None}
    try:
        content = series_mod.load(folder, check_patch_ids=False).content_hash()
    except UsageError as exc:
        return {"last_verify": None, "series_problem": str(exc)}
    statuses = level_statuses(last_report(opts, framework, tag, content))
    latest = last_report(opts, framework, tag) if statuses is None else None
    # lmsforge before 0.2.0 recorded no series hash: what it verified cannot be told, which is
    # not the same as "other content", and a shared cache holds such reports for a while
    older = latest is not None and not latest.get("series_hash")
    return {"last_verify": statuses, "series_hash": content,
            "last_verify_was_other_content": latest is not None and not older,
            "last_verify_by_older_lmsforge": older}
