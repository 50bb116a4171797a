"""`lmsforge list`: frameworks, tags, series, upstream sources, last verification results."""

from __future__ import annotations

from lmsforge import ui
from lmsforge.options import Options
from lmsforge.series import catalogue, manifest as series_mod
from lmsforge.upstream.sources import TagSource
from lmsforge.verify import runner


def collect(opts: Options) -> list[dict[str, object]]:
    rows: list[dict[str, object]] = []
    for name in catalogue.known(opts.patches_dir):
        sources = catalogue.sources_for(opts.patches_dir, name)
        for tag in catalogue.known_tags(opts.patches_dir, sources):
            spec = sources.tags.get(tag) or TagSource(tag, None, None)
            folder = series_mod.find(opts.patches_dir, name, tag)
            has_series = (folder / series_mod.MANIFEST).is_file()
            entry: dict[str, object] = {
                "framework": name,
                "tag": tag,
                "series": str(folder) if has_series else None,
                "patches": len(list(folder.glob("*.patch"))) if has_series else 0,
                "sources": _sources_json(sources.git_url, spec),
            }
            entry.update(runner.last_verify(opts, name, tag, folder if has_series else None))
            rows.append(entry)
    return rows


def _sources_json(git_url: str, spec: TagSource) -> list[dict[str, object]]:
    sources: list[dict[str, object]] = []
    if spec.archive:
        a = spec.archive
        sources.append({"kind": "archive", "name": a.name, "sha256": a.sha256, "top": a.top,
                        "url": a.url,
                        "debian": f"{a.debian.package}={a.debian.version}" if a.debian else None,
                        "lacks": list(a.lacks), "complete": a.complete})
    sources.append({"kind": "git", "url": git_url, "tag": spec.tag, "commit": spec.commit})
    return sources


def run(opts: Options, as_json: bool) -> int:
    if opts.patches_dir_given:  # a typo there must not read as "no series at all"
        opts.require_patches_dir()
    rows = collect(opts)
    if as_json:
        ui.print_json({"patches_dir": str(opts.patches_dir), "series": rows})
        return 0
    table_rows = []
    for row in rows:
        kinds = []
        for src in row["sources"]:  # type: ignore[union-attr]
            if src["kind"] == "archive":
                kinds.append(f"archive {src['name']} ({src['sha256'][:12]}…)")
            else:
                kinds.append(f"git {src['commit'][:12] if src['commit'] else '(unpinned)'}")
        table_rows.append([
            str(row["framework"]), str(row["tag"]),
            f"{row['patches']} patches" if row["series"] else "no series yet",
            "\n".join(kinds), _last_verify_text(row)])
    ui.table(None, ["framework", "tag", "series", "sources", "last verify"], table_rows)
    return 0


def _last_verify_text(row: dict[str, object]) -> str:
    last = row["last_verify"]
    if last:
        return ", ".join(f"{k}:{v}" for k, v in last.items())  # type: ignore[union-attr]
    if row.get("series_problem"):
        return "series invalid (run `lmsforge verify` for details)"
    if row.get("last_verify_by_older_lmsforge"):
        return f"- ({runner.OLDER_LMSFORGE})"
    if row.get("last_verify_was_other_content"):
        return "- (the last run verified other content of this series)"
    return "-"
