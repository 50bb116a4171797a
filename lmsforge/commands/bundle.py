"""`lmsforge bundle`: the patched c10/ subtree, the harness, build inputs and benchmarks in one
folder or tarball that a GPU host without network builds and runs with `run-gpu.sh`."""

from __future__ import annotations

from pathlib import Path

from lmsforge import ui
from lmsforge.errors import CheckFailed, UsageError
from lmsforge.options import Options
from lmsforge.series import catalogue, manifest as series_mod
from lmsforge.upstream import tree as upstream
from lmsforge.verify import apply_level, bundle

SUPPORTED_FRAMEWORKS = ("pytorch",)


def run(opts: Options, framework: str, tag: str, dest: Path, tarball: bool) -> int:
    if framework not in SUPPORTED_FRAMEWORKS:
        raise UsageError(f"lmsforge bundle supports {', '.join(SUPPORTED_FRAMEWORKS)}; "
                         f"{framework} has no GPU level")
    sources = catalogue.sources_for(opts.patches_dir, framework)
    series = series_mod.load(catalogue.series_folder(opts.patches_dir, sources, tag))
    with ui.step(f"fetching {framework} {tag}"):
        identity = upstream.fetch(sources, tag, opts.cache)
    tree_path = opts.cache.root / "trees" / framework / tag
    with opts.cache.lock(f"tree-{framework}-{tag}"):
        with ui.step(f"applying {len(series.paths())} patches"):
            apply_level.prepare_tree(tree_path, identity, series)
        with ui.step(f"writing the GPU bundle {dest}"):
            result = bundle.write_bundle(tree_path, dest, tarball=tarball)
    if result.manifest["series_hash"] != series.content_hash():
        raise CheckFailed(f"{result.path}: the tree's commits export to series hash "
                          f"{result.manifest['series_hash']}, not the series' "
                          f"{series.content_hash()}; run `lmsforge verify --level apply`")
    ui.out.print(f"{result.path}: {result.files} files, {result.size_bytes / 1e6:.1f} MB "
                 f"(series hash {str(result.manifest['series_hash'])[:12]}); on the GPU host: "
                 f"{'tar xzf ' + result.path.name + ' && ' if tarball else ''}"
                 f"./{result.path.name.removesuffix('.tar.gz')}/{bundle.ENTRY_SCRIPT} RESULTS_DIR")
    return 0
