"""Shared steps of `render`, `build` and `test`: the series identity packages are stamped with."""

from __future__ import annotations

from lmsforge.options import Options
from lmsforge.packaging.recipes import SeriesIdentity
from lmsforge.series import catalogue, manifest as series_mod
from lmsforge.upstream.tree import TreeIdentity


def series_identity(opts: Options, framework: str, tag: str,
                    tree: TreeIdentity | None = None, *,
                    check_patch_ids: bool = True) -> SeriesIdentity:
    """The series hash and upstream identity: from the fetched tree, else from series.yaml.
    CHECK_PATCH_IDS=False skips the patch-id check (it needs git), for commands that only read
    the hash to find packages (`test` runs on hosts with no git)."""
    sources = catalogue.sources_for(opts.patches_dir, framework)
    series = series_mod.load(catalogue.series_folder(opts.patches_dir, sources, tag),
                             check_patch_ids=check_patch_ids)
    if tree is not None:
        record = {k: str(v) for k, v in tree.to_json().items()
                  if k in ("kind", "archive", "sha256", "commit", "upstream_commit", "tree") and v}
    else:
        record = {k: str(v) for k, v in series.upstream.items()}
    return SeriesIdentity(framework, tag, series.content_hash(), record)
