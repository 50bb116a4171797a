"""`lmsforge bundle`: what a GPU host without network needs to build and run a series' GPU tests
with `run-gpu.sh`, in one folder or tarball: for PyTorch the patched c10/ subtree, the harness,
build inputs and benchmarks; for TensorFlow the `core-sim` level's GPU test program as sources
with exactly its headers, the wheel's framework library and the CUDA 11.8 runtime."""

from __future__ import annotations

from pathlib import Path

from lmsforge import frameworks, ui
from lmsforge.errors import CheckFailed, UsageError
from lmsforge.options import Options
from lmsforge.series import catalogue, manifest as series_mod
from lmsforge.upstream import tree as upstream
from lmsforge.verify import apply_level, bundle, runner
from lmsforge.verify.levels import PASS
from lmsforge.verify.tensorflow_tf import gpu_bundle

SUPPORTED_FRAMEWORKS = ("pytorch", "tensorflow")
# TensorFlow's bundle is made of what this level built: its program, headers and layout guards.
TENSORFLOW_LEVEL = "core-sim"


def run(opts: Options, framework: str, tag: str, dest: Path, tarball: bool) -> int:
    if framework not in SUPPORTED_FRAMEWORKS:
        raise UsageError(f"lmsforge bundle supports {', '.join(SUPPORTED_FRAMEWORKS)}; "
                         f"{framework} has no GPU level")
    sources = catalogue.sources_for(opts.patches_dir, framework)
    series = series_mod.load(catalogue.series_folder(opts.patches_dir, sources, tag))
    bundle.check_destination(dest, tarball=tarball)
    if framework == "tensorflow":
        _verify_tensorflow(opts, tag, series)
    with ui.step(f"fetching {framework} {tag}"):
        identity = upstream.fetch(sources, tag, opts.cache)
    tree_path = opts.cache.root / "trees" / framework / tag
    with opts.cache.lock(f"tree-{framework}-{tag}"):
        with ui.step(f"applying {len(series.paths())} patches"):
            apply_level.prepare_tree(tree_path, identity, series)
        with ui.step(f"writing the GPU bundle {dest}"):
            if framework == "tensorflow":
                found = gpu_bundle.find_inputs(
                    opts.cache.root, opts.cache.build_dir(framework, tag, "verify"))
                result = gpu_bundle.write_gpu_bundle(tree_path, found, dest, tarball=tarball,
                                                     jobs=opts.jobs)
            else:
                result = bundle.write_bundle(tree_path, dest, tarball=tarball)
    if result.manifest["series_hash"] != series.content_hash():
        raise CheckFailed(f"{result.path}: the tree's commits export to series hash "
                          f"{result.manifest['series_hash']}, not the series' "
                          f"{series.content_hash()}; run `lmsforge verify --level apply`")
    packed = f", {result.path.stat().st_size / 1e6:.1f} MB packed" if tarball else ""
    ui.out.print(f"{result.path}: {result.files} files, {result.size_bytes / 1e6:.1f} MB "
                 f"unpacked{packed} (series hash {str(result.manifest['series_hash'])[:12]}); "
                 f"on the GPU host: "
                 f"{'tar xzf ' + result.path.name + ' && ' if tarball else ''}"
                 f"./{result.path.name.removesuffix('.tar.gz')}/{bundle.ENTRY_SCRIPT} RESULTS_DIR")
    return 0


def _verify_tensorflow(opts: Options, tag: str, series: series_mod.Series) -> None:
    """Run `verify --level core-sim` unless the cache's last verify of the tag was of this
    series' content and passed it (its build folder is then this series')."""
    latest = runner.last_report(opts, "tensorflow", tag)
    statuses = runner.level_statuses(latest) or {}
    if latest is not None and latest.get("series_hash") == series.content_hash() and \
            statuses.get(TENSORFLOW_LEVEL) == PASS:
        ui.say(f"tensorflow {tag}: using the cache's {TENSORFLOW_LEVEL} build of this series")
        return
    report = runner.verify_series(opts, "tensorflow", tag, TENSORFLOW_LEVEL, ui.say, {},
                                  frameworks.level_runner("tensorflow"))
    result = next(r for r in report.results if r.level == TENSORFLOW_LEVEL)
    if result.status != PASS:
        raise CheckFailed(f"the series does not pass {TENSORFLOW_LEVEL} ({result.detail}); a "
                          f"GPU bundle is made only of a series that does: `lmsforge verify "
                          f"--framework tensorflow --tag {tag} --level {TENSORFLOW_LEVEL}`")
