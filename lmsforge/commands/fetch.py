"""`lmsforge fetch`: put an upstream tree in the cache and print its verified identity."""

from __future__ import annotations

from pathlib import Path

from lmsforge import ui
from lmsforge.options import Options
from lmsforge.series import catalogue
from lmsforge.upstream import tree as upstream


def run(opts: Options, framework: str, tag: str, source: str, archive: Path | None,
        mirror: str | None, as_json: bool) -> int:
    sources = catalogue.sources_for(opts.patches_dir, framework)
    catalogue.check_tag(opts.patches_dir, sources, tag)
    with ui.step(f"fetching {framework} {tag}"):
        identity = upstream.fetch(sources, tag, opts.cache, prefer=source, archive_file=archive,
                                  mirror=mirror)
    if as_json:
        ui.print_json(identity.to_json())
        return 0
    ui.out.print(identity.summary())
    if identity.lacks:
        ui.out.print(f"note: this {identity.kind} tree lacks {'; '.join(identity.lacks)}; it "
                     "serves every verification level except `full`")
    return 0
