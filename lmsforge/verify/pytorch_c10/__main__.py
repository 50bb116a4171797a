"""Build c10 (+ c10_cuda) from a PyTorch tree and run the LMS googletest programs.

    python3 -m lmsforge.verify.pytorch_c10 --tree DIR --build-dir DIR
        [--tests core|cuda|sim|all] [--jobs N] [--no-cuda] [-- GTEST_ARGS...]

`--tests sim` runs the CUDA tests against lmsforge's simulated CUDA runtime once, with the
simulator's settings from the environment (LMS_SIM_SEED=N replays a core-sim seed).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Sequence

from lmsforge.cache import default_cache_dir
from lmsforge.errors import EXIT_FAILED, EXIT_OK, LmsforgeError
from lmsforge.verify.pytorch_c10 import build, gtest


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    gtest_args: list[str] = []
    if "--" in args_list:
        split = args_list.index("--")
        args_list, gtest_args = args_list[:split], args_list[split + 1:]
    parser = argparse.ArgumentParser(prog="python3 -m lmsforge.verify.pytorch_c10",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, required=True, help="PyTorch source tree")
    parser.add_argument("--build-dir", type=Path, required=True)
    parser.add_argument("--tests", choices=("none", "core", "cuda", "sim", "all"),
                        default="none")
    parser.add_argument("--jobs", "-j", type=int, default=2)
    parser.add_argument("--no-cuda", action="store_true", help="build c10 only")
    parser.add_argument("--cache-dir", type=Path, default=None)
    args = parser.parse_args(args_list)

    suites = {"none": [], "core": ["core"], "cuda": ["cuda"], "sim": ["sim"],
              "all": ["core", "cuda"]}[args.tests]
    if args.no_cuda and set(suites) & {"cuda", "sim"}:
        parser.error(f"--tests {args.tests} needs the CUDA build; drop --no-cuda")
    targets = ["c10"] if args.no_cuda else list(build.LIBRARIES)
    if "sim" in suites:
        targets = list(build.SIM_LIBRARIES)
    for suite in suites:
        if not build.test_sources(args.tree, suite):
            print(f"error: no test sources {build.SUITES[suite].sources} in {args.tree}")
            return EXIT_FAILED
        targets.append(build.SUITES[suite].target)
    try:
        result = build.build(args.tree, args.build_dir, targets,
                             cache_root=args.cache_dir or default_cache_dir(), jobs=args.jobs,
                             cuda=not args.no_cuda, echo=True)
        print(f"built {' '.join(targets)}: {result.tus} TUs compiled in {result.seconds:.1f} s "
              f"(log: {result.log})")
        status = EXIT_OK
        for suite in suites:
            target = build.SUITES[suite].target
            run = gtest.run_gtest(args.build_dir / target,
                                  log=args.build_dir / f"{target}.log",
                                  extra_args=gtest_args, echo=True)
            report = run.report
            print(f"{target}: {report.passed} passed, {report.failed} failed, "
                  f"{report.skipped} skipped, {report.disabled} disabled")
            if report.failed:
                print(f"{target} failures: {', '.join(report.failures)}")
                status = EXIT_FAILED
        return status
    except LmsforgeError as error:
        print(f"error: {error}")
        return error.exit_code


if __name__ == "__main__":
    sys.exit(main())
