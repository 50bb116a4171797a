"""PyTorch's verification levels above `apply` (``verification.md``).

`compile` builds c10 + c10_cuda from the patched tree, then runs its torchgen, checks the LMS pin
guard in every generated CUDA wrapper taking tensors, syntax-compiles the other touched translation
units and byte-compiles the touched Python files (``verify/pytorch_codegen``); `core-cpu` and
`core-gpu` build and run the series' own googletest files against them; `core-sim` runs the CUDA
tests and the benchmarks against lmsforge's simulated CUDA runtime (``pytorch_c10/sim_level``).
All levels share one incremental build folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Sequence

from lmsforge.cache import default_cache_dir
from lmsforge.verify.levels import (FAIL, LEVELS, PASS, LevelContext, LevelResult, dispatch,
                                    have_cuda_device, judge_tests, skipped)
from lmsforge.verify.pytorch_c10 import build, gtest, sim_level
from lmsforge.verify.pytorch_codegen import check as codegen_check

BUILD_SUBDIR = "c10-build"
# Submodules a full build cannot do without; source archives (Debian's dfsg tarballs) lack them.
FULL_BUILD_SUBMODULES = ("third_party/pybind11", "third_party/cpuinfo", "third_party/fmt",
                         "third_party/cutlass")


def run_level(level: str, ctx: LevelContext) -> LevelResult:
    return dispatch("pytorch", _RUNNERS, level, ctx)


def _compile(ctx: LevelContext) -> LevelResult:
    ctx.say(f"compile: building c10 + c10_cuda in {_build_dir(ctx)}")
    built = _build(ctx, "compile", build.LIBRARIES)
    tus = build.count_tus(_build_dir(ctx), build.LIBRARIES)
    facts: dict[str, object] = {"tus": tus, "tus_compiled": built.tus,
                                "build_seconds": round(built.seconds, 1)}
    detail = f"c10 + c10_cuda built ({tus} TUs, {built.tus} recompiled)"
    codegen = codegen_check.run(ctx.tree, ctx.base, ctx.work_dir, _build_dir(ctx) / "generated",
                                default_cache_dir(), ctx.jobs, built.log, ctx.say)
    facts.update(codegen.facts())
    if codegen.failures:
        return LevelResult("compile", FAIL, detail="; ".join(codegen.failures), facts=facts,
                           log=str(built.log))
    return LevelResult("compile", PASS, detail=f"{detail}; {codegen.summary()}", facts=facts,
                       log=str(built.log))


def _core_cpu(ctx: LevelContext) -> LevelResult:
    return _run_suite(ctx, "core-cpu", "core")


def _core_sim(ctx: LevelContext) -> LevelResult:
    return sim_level.run(ctx, _build_dir(ctx), lambda targets: _build(ctx, "core-sim", targets))


def _core_gpu(ctx: LevelContext) -> LevelResult:
    have_device, why = have_cuda_device()
    if not have_device:
        return skipped("core-gpu", why)
    return _run_suite(ctx, "core-gpu", "cuda")


def _full(ctx: LevelContext) -> LevelResult:
    reasons = ["needs a GPU build host: use the `full` recipe profile"]
    if any(not _non_empty_dir(ctx.tree / path) for path in FULL_BUILD_SUBMODULES):
        reasons.append("source archive lacks third_party/ for a full build")
    return skipped("full", "; ".join(reasons))


def _run_suite(ctx: LevelContext, level: str, suite: str) -> LevelResult:
    spec = build.SUITES[suite]
    sources = build.test_sources(ctx.tree, suite)
    if not sources:
        return LevelResult(level, FAIL, detail=f"no LMS test sources ({spec.sources}) in the "
                                               "tree; a level never passes without tests")
    ctx.say(f"{level}: building {spec.target} from {len(sources)} test files")
    built = _build(ctx, level, [*build.LIBRARIES, spec.target])
    ctx.say(f"{level}: running {spec.target}")
    run = gtest.run_gtest(_build_dir(ctx) / spec.target, log=built.log,
                          json_path=ctx.work_dir / f"{level}.json", append=True)
    return judge_tests(level, run.report,
                       {"test_files": len(sources), "tus_compiled": built.tus,
                        "build_seconds": round(built.seconds, 1),
                        "test_seconds": round(run.seconds, 1)}, str(built.log))


def _build(ctx: LevelContext, level: str, targets: Sequence[str]) -> build.BuildResult:
    return build.build(ctx.tree, _build_dir(ctx), targets, cache_root=default_cache_dir(),
                       jobs=ctx.jobs, log=ctx.log_path(level))


def _build_dir(ctx: LevelContext) -> Path:
    return ctx.work_dir / BUILD_SUBDIR


def _non_empty_dir(path: Path) -> bool:
    return path.is_dir() and any(path.iterdir())


_RUNNERS: dict[str, Callable[[LevelContext], LevelResult]] = {
    "compile": _compile, "core-cpu": _core_cpu, "core-sim": _core_sim, "core-gpu": _core_gpu,
    "full": _full,
}
assert set(_RUNNERS) == set(LEVELS) - {"apply"}
