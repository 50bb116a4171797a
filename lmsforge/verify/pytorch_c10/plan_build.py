"""`lmsforge plan`'s replay program, built where `lmsforge verify` builds the core-sim level.

The program links the series' c10_cuda_sim, so it needs the patched tree and the c10 build. Both
are the verification's own (the cache's tree of the tag and its `c10-build` folder): after a
`verify --level core-sim` the replay adds one translation unit; without one, the first plan
builds c10 and c10_cuda (about 120 translation units, minutes). The tree is applied again only
when it does not hold the series exactly (worktree.carries), since re-applying rewrites every
patched file and an incremental build would recompile what includes them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from lmsforge import ui
from lmsforge.errors import UsageError
from lmsforge.options import Options
from lmsforge.series import catalogue, manifest as series_mod, worktree
from lmsforge.upstream import tree as upstream
from lmsforge.verify import apply_level
from lmsforge.verify.pytorch_c10 import build

FRAMEWORK = "pytorch"
# The series the planner's allocator comes from: the primary one (product.md's matrix).
TAG = "v2.6.0"
BUILD_SUBDIR = "c10-build"  # frameworks/pytorch.py's, shared with every level


@contextmanager
def replay_program(opts: Options, say: Callable[[str], None]) -> Iterator[Path]:
    """The built replay program, held under the tree's lock while the caller uses it (a
    verification running meanwhile would re-apply the tree and rebuild it)."""
    if not build.have_benchmarks():
        raise UsageError(f"lmsforge plan's replay links bench/'s library, which this install "
                         f"lacks ({build.BENCH_DIR}); install lmsforge from a checkout or a wheel")
    sources = catalogue.sources_for(opts.patches_dir, FRAMEWORK)
    series = series_mod.load(catalogue.series_folder(opts.patches_dir, sources, TAG))
    identity = upstream.fetch(sources, TAG, opts.cache)
    tree = opts.cache.root / "trees" / FRAMEWORK / TAG
    build_dir = opts.cache.build_dir(FRAMEWORK, TAG, "verify") / BUILD_SUBDIR
    with opts.cache.lock(f"tree-{FRAMEWORK}-{TAG}"):
        if not worktree.carries(tree, identity.commit, series.paths()):
            say(f"applying the {FRAMEWORK} {TAG} series to {tree}")
            apply_level.prepare_tree(tree, identity, series)
        targets = [*build.SIM_LIBRARIES, build.PLAN_REPLAY]
        with ui.step(f"building {build.PLAN_REPLAY} in {build_dir} (the first time: c10 and "
                     f"c10_cuda, minutes)"):
            build.build(tree, build_dir, targets, cache_root=opts.cache.root, jobs=opts.jobs,
                        log=build_dir.parent / "plan-build.log")
        yield build_dir / "plan" / build.PLAN_REPLAY
