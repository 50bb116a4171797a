"""A test program run under one adversarial seed of lmsforge's simulated CUDA runtime, for both
core-sim levels (PyTorch's CUDA tests, TensorFlow's GPU test): the command that replays it, what
went wrong in one line, and the level's failure over all seeds."""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor, as_completed, wait
from pathlib import Path
from typing import Callable, Mapping, NamedTuple, Sequence

from lmsforge.errors import CheckFailed
from lmsforge.verify.levels import FAIL, MAX_FAILURES_NAMED, LevelResult
from lmsforge.verify.pytorch_c10 import gtest, process

LEVEL = "core-sim"


class SeedRun(NamedTuple):
    seed: int
    report: gtest.GtestReport | None  # None when the program crashed or hung
    problem: str  # one line; empty when every test ran and passed, and none was skipped
    seconds: float
    log: Path

    def to_json(self) -> dict[str, object]:
        counts = {} if self.report is None else {
            "passed": self.report.passed, "failed": self.report.failed,
            "skipped": self.report.skipped, "failures": list(self.report.failures),
            "skips": list(self.report.skips)}
        return {"seed": self.seed, "ok": not self.problem, "problem": self.problem,
                "seconds": round(self.seconds, 1), "log": str(self.log), **counts}


def order_args(seed: int) -> list[str]:
    """googletest's test order under SEED: shuffled, another order for each seed and the same
    one again for its replay. A test must not depend on what ran before it; two did, and only a
    shuffled run on an H200 showed it (2026-11-30). SEED is at least 1 (0 asks googletest
    for a seed from the clock)."""
    return ["--gtest_shuffle", f"--gtest_random_seed={seed}"]


def gtest_filter(tests: Sequence[str] = (), excluded: Sequence[str] = ()) -> list[str]:
    """googletest's filter for only TESTS, or for all but EXCLUDED; none for all."""
    if tests:
        return [f"--gtest_filter={':'.join(tests)}"]
    return [f"--gtest_filter=-{':'.join(excluded)}"] if excluded else []


def replay_command(env: Mapping[str, str], binary: Path, seed: int,
                   tests: Sequence[str] = (), excluded: Sequence[str] = ()) -> str:
    """The command that runs SEED's tests again, in its order; with TESTS, only those (in the
    order googletest shuffles them to: a failure that needs a test before it replays without
    the filter); with EXCLUDED, all but those."""
    settings = " ".join(f"{key}={value}" for key, value in env.items())
    return " ".join([f"{settings} {binary}", *order_args(seed), *gtest_filter(tests, excluded)])


def run_seed(binary: Path, seed: int, env: Mapping[str, str], work_dir: Path, *, kind: str,
             timeout: float, tests: Sequence[str] = (), excluded: Sequence[str] = (),
             name: str = "seed") -> SeedRun:
    """One run of BINARY's tests (all, only TESTS, or all but EXCLUDED) under ENV, which names
    the seed; KIND ("CUDA", "GPU") is what the skip message calls the tests. Its log is
    core-sim.NAME-SEED.log."""
    log = work_dir / f"{LEVEL}.{name}-{seed}.log"
    started = time.monotonic()
    extra_args = order_args(seed) + gtest_filter(tests, excluded)
    try:
        run = gtest.run_gtest(binary, log=log, json_path=log.with_suffix(".json"),
                              extra_args=extra_args, timeout=timeout, env=dict(env))
    except CheckFailed as error:  # a crash or a hang
        return SeedRun(seed, None,
                       f"{error}; replay: {replay_command(env, binary, seed, tests, excluded)}",
                       time.monotonic() - started, log)
    report = run.report
    problem = ""
    if report.failed:
        problem = (f"{report.failed} tests failed: "
                   f"{', '.join(report.failures[:MAX_FAILURES_NAMED])}")
        if report.first_failure:
            problem += f" (first: {report.first_failure})"
    elif report.skipped:
        problem = (f"{report.skipped} tests skipped (every {kind} test must run under the "
                   f"simulator): {', '.join(report.skips[:MAX_FAILURES_NAMED])}")
    elif report.passed == 0:
        problem = "no test passed"
    if tests and report.passed + report.failed != len(tests):
        # A name that matches no test must not pass for a test that ran.
        problem = (f"{len(tests)} tests were asked for and {report.passed + report.failed} ran"
                   + (f"; {problem}" if problem else ""))
    if problem:
        problem += f"; replay: {replay_command(env, binary, seed, report.failures)}"
    return SeedRun(seed, report, problem, time.monotonic() - started, log)


def seeds_at_once(jobs: int) -> int:
    """How many seeds' programs run at the same time on JOBS CPUs: two per CPU, because a program
    under the simulator spends about half its time asleep in the adversarial delays of its
    streams (six seeds of the PyTorch CUDA tests took 150 s one after another on 2 CPUs, and 39 s
    all at once)."""
    return max(1, 2 * jobs)


def run_seeds(seeds: Sequence[int], run_one: Callable[[int], SeedRun], *, at_once: int,
              say: Callable[[str], None], program: str) -> list[SeedRun]:
    """RUN_ONE for each of SEEDS, AT_ONCE at a time, each seed with its own log; the runs in
    seed order. Each seed's result is said as it ends. An interrupt (or any error here) kills
    every program still running before it goes on up, so no seed outlives the level."""
    if not seeds:
        return []
    at_once = max(1, min(at_once, len(seeds)))
    say(f"{LEVEL}: {program}, seeds {seeds[0]}-{seeds[-1]}, {at_once} at a time"
        if len(seeds) > 1 else f"{LEVEL}: {program}, seed {seeds[0]}")
    runs: dict[int, SeedRun] = {}
    pool = ThreadPoolExecutor(max_workers=at_once, thread_name_prefix="seed")
    futures: dict[Future[SeedRun], int] = {}
    try:
        for seed in seeds:
            futures[pool.submit(run_one, seed)] = seed
        for future in as_completed(futures):
            run = future.result()
            runs[run.seed] = run
            outcome = "passed" if not run.problem else "failed"
            say(f"{LEVEL}: seed {run.seed} {outcome} ({len(runs)} of {len(seeds)} done, "
                f"{run.seconds:.0f} s)")
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        # Kill until every seed that started has ended: a thread may start its program just
        # after a kill.
        while not all(future.done() for future in futures):
            process.stop_all()
            wait(futures, timeout=0.05)
        raise
    finally:
        pool.shutdown(wait=True)
    return [runs[seed] for seed in seeds]


def seeds_failed(runs: Sequence[SeedRun], facts: dict[str, object],
                 log: str) -> LevelResult | None:
    """The level's failure when there was no seed or a seed failed (naming the first and how
    to replay it), else None."""
    if not runs:
        return LevelResult(LEVEL, FAIL, detail="no seed to run", facts=facts, log=log)
    failed = [run for run in runs if run.problem]
    if failed:
        first = failed[0]
        return LevelResult(LEVEL, FAIL, facts=facts, log=log,
                           detail=f"{len(failed)} of {len(runs)} seeds failed; seed "
                                  f"{first.seed}: {first.problem}")
    return None
