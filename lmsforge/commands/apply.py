"""`lmsforge apply`: a work tree at the tag with the series applied as commits."""

from __future__ import annotations

import os
from pathlib import Path

from lmsforge import ui
from lmsforge.errors import UsageError
from lmsforge.options import Options
from lmsforge.series import catalogue, manifest as series_mod, worktree
from lmsforge.upstream import tree as upstream


def run(opts: Options, framework: str, tag: str, into: Path | None, source: str,
        archive: Path | None, mirror: str | None, new: bool = False) -> int:
    sources = catalogue.sources_for(opts.patches_dir, framework)
    if new:
        catalogue.check_tag(opts.patches_dir, sources, tag)
        folder = series_mod.find(opts.patches_dir, framework, tag)
        if (folder / series_mod.MANIFEST).is_file():
            raise UsageError(f"a series for {framework} {tag} exists already; drop --new")
        patches: list[Path] = []
    else:
        folder = catalogue.series_folder(opts.patches_dir, sources, tag)
        patches = series_mod.load(folder).paths()
    target = (into or Path.cwd() / f"lms-{framework}-{tag}").absolute()
    opts.refuse_inside_managed(target, "--into")
    if target.is_symlink() and not target.exists():
        raise UsageError(f"--into {target} is a symlink to a missing folder "
                         f"({os.readlink(target)}); create that folder, or pass another --into")
    with worktree.target_lock(target):
        worktree.check_target(target, framework, tag)  # refuse before any download
        with ui.step(f"fetching {framework} {tag}"):
            identity = upstream.fetch(sources, tag, opts.cache, prefer=source,
                                      archive_file=archive, mirror=mirror)
        with ui.step(f"applying {len(patches)} patches with git am"):
            tree = worktree.create(target, identity, patches)
    ui.out.print(f"{target}: branch {tree.branch} = {tag} + {len(patches)} LMS patches "
                 f"(base {identity.commit[:12]}, {identity.kind} source)")
    return 0
