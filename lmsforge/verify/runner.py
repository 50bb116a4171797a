"""Run verification levels for one series and write the machine-readable report."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lmsforge import frameworks, series as series_mod, upstream
from lmsforge.errors import LmsforgeError
from lmsforge.options import Options
from lmsforge.verify import apply_level
from lmsforge.verify.levels import (DEFAULT_SIM_SEEDS, FAIL, LEVELS, SKIPPED, LevelContext,
                                    LevelResult)


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
                  sim_seeds: int = DEFAULT_SIM_SEEDS) -> SeriesReport:
    sources = frameworks.sources_for(opts.patches_dir, framework)
    folder = frameworks.series_folder(opts.patches_dir, sources, tag)
    series = series_mod.load(folder)
    say(f"{framework} {tag}: fetching the upstream tree")
    identity = upstream.fetch(sources, tag, opts.cache, **fetch_kwargs)  # type: ignore[arg-type]
    report = SeriesReport(framework, tag, series.content_hash(), identity.to_json())
    tree_path = opts.cache.root / "trees" / framework / tag
    with opts.cache.lock(f"tree-{framework}-{tag}"):
        say(f"{framework} {tag}: level apply")
        result = apply_level.run(tree_path, identity, series)
        report.results.append(result)
        runner = frameworks.level_runner(framework)
        for name in levels_up_to(level)[1:]:
            if result.status == FAIL:
                report.results.append(LevelResult(name, SKIPPED, 0.0,
                                                  f"not run: level {result.level} failed"))
                continue
            if runner is None:
                result = LevelResult(name, SKIPPED, 0.0,
                                     f"no verification harness for {framework} above `apply`")
            else:
                say(f"{framework} {tag}: level {name}")
                ctx = LevelContext(framework, tag, tree_path, identity.commit,
                                   opts.cache.build_dir(framework, tag, "verify"), opts.jobs, say,
                                   sim_seeds)
                started = time.monotonic()
                try:
                    result = runner(name, ctx)
                except LmsforgeError as exc:
                    result = LevelResult(name, FAIL, time.monotonic() - started, str(exc))
            report.results.append(result)
    write_report(opts, report)
    return report


def write_report(opts: Options, report: SeriesReport) -> Path:
    folder = opts.cache.report_dir(report.framework, report.tag)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "verify.json"
    data = report.to_json()
    data["written_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2) + "\n")
    tmp.replace(path)
    return path


def last_report(opts: Options, framework: str, tag: str) -> dict[str, object] | None:
    path = opts.cache.report_dir(framework, tag) / "verify.json"
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError:
        return None
