"""The `core-sim` level: the series' unchanged CUDA tests, linked against lmsforge's simulated
CUDA runtime (``lmsforge/sim``), run once per seed of its adversarial scheduler, then both
benchmarks in their short mode, whose data checks must pass (``docs/core-sim.md``).

A seed fixes the random delays of every stream, so a failure names its seed and the command
that replays it. Nothing here is a GPU result: the facts say ``simulated``, and the benchmark
figures they carry (bound efficiency per k, LMS/raw copy ratio per size) are times of the
simulator's timing model, calibrated on an H100 (``cuda_sim/README.md``): deterministic, and
never a measurement of a GPU.
"""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path
from typing import Any, Callable, NamedTuple, Sequence

from lmsforge.errors import CheckFailed, UsageError
from lmsforge.verify.levels import (FAIL, PASS, SKIPPED, LevelContext,
                                    LevelResult, Timer)
from lmsforge.verify.pytorch_c10 import build, expandable, plan_build, sim_seeds
from lmsforge.verify.pytorch_c10.process import run_logged
from lmsforge.verify.pytorch_c10.sim_seeds import SeedRun

LEVEL = "core-sim"
SEED_TIMEOUT_S = 600.0
BENCH_TIMEOUT_S = 600.0
# Two devices, so the two-device tests run; the rest of the simulator's defaults
# (lmsforge/sim/README.md).
SIM_ENV = {"LMS_SIM_DEVICES": "2"}
BENCHMARKS = (("lms_bench_copy_sim", "copy-engine"), ("lms_bench_oversub_sim", "oversubscription"))
# The LMS fuzzer's settings (LargeModelSupportFuzz_test.cpp, docs/core-sim.md "The fuzzer"),
# passed from lmsforge's environment to the test program and named in every replay line.
FUZZ_SETTINGS = ("LMS_FUZZ_MINUTES", "LMS_FUZZ_STEPS")


class BenchRun(NamedTuple):
    name: str
    problem: str
    result: Path
    seconds: float
    figures: dict[str, Any] | None = None  # simulated_figures() of the result

    def to_json(self) -> dict[str, object]:
        return {"ok": not self.problem, "problem": self.problem, "result": str(self.result),
                "seconds": round(self.seconds, 1), "simulated": True,
                "figures": self.figures or {}}


def simulated_figures(data: dict[str, Any]) -> dict[str, Any]:
    """What a benchmark result says about LMS, in the simulator's virtual time: bound efficiency
    per k (oversubscription), or the LMS/raw ratio and raw throughput per size (copy engine)."""
    timing = data.get("timing", {})
    figures: dict[str, Any] = {
        "simulated": True, "clock": timing.get("clock"),
        "calibration": timing.get("calibration", {}).get("name")}
    rows = data.get("results", [])
    if data.get("benchmark") == "oversubscription":
        figures["bound_efficiency"] = {str(row["k"]): round(row["bound_efficiency"], 4)
                                       for row in rows}
        figures["lms_step_ms"] = {str(row["k"]): round(row["lms"]["step_ms"], 4) for row in rows}
        # LMS's own statistic of the compute stream's waits for copies, beside what the step
        # took over the same loop without a limit (the TensorFlow benchmark reports both).
        timed = [row for row in rows if "compute_wait_ms_per_step" in row["lms"]
                 and row.get("oracle")]
        if timed:
            figures["compute_wait_ms"] = {
                str(row["k"]): round(row["lms"]["compute_wait_ms_per_step"], 4) for row in timed}
            figures["compute_only_step_ms"] = {str(row["k"]): round(row["oracle"]["step_ms"], 4)
                                               for row in timed}
        # With every LMS policy off (the TensorFlow benchmark runs both).
        if any(row.get("on_demand_bound_efficiency") is not None for row in rows):
            figures["on_demand_bound_efficiency"] = {
                str(row["k"]): round(row["on_demand_bound_efficiency"], 4) for row in rows
                if row.get("on_demand_bound_efficiency") is not None}
    else:
        for key in ("ratio_out", "ratio_in"):
            figures[key] = {str(row["size"]): round(row[key], 4) for row in rows}
        for key in ("raw_d2h", "raw_h2d"):
            figures[f"{key}_gbps"] = {str(row["size"]): round(row[key]["gbps"], 3)
                                      for row in rows}
    return figures


def fuzz_env() -> dict[str, str]:
    """The fuzzer's settings given to lmsforge; a bad one fails before any build."""
    settings = {}
    for key in FUZZ_SETTINGS:
        text = os.environ.get(key, "").strip()
        if not text:
            continue
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not (math.isfinite(value) and value > 0):
            raise UsageError(f"{key}={text!r} is not a positive number; unset it for the CI run")
        settings[key] = text
    return settings


def seed_timeout() -> float:
    """A seed's time limit: the CI one, plus the minutes the fuzzer was asked to run."""
    minutes = float(fuzz_env().get("LMS_FUZZ_MINUTES", "0"))
    return SEED_TIMEOUT_S + minutes * 60.0


def env_for(seed: int) -> dict[str, str]:
    return {**SIM_ENV, **fuzz_env(), "LMS_SIM_SEED": str(seed)}


def replay_command(binary: Path, seed: int, tests: Sequence[str] = ()) -> str:
    return sim_seeds.replay_command(env_for(seed), binary, seed, tests)


def run_seed(binary: Path, seed: int, work_dir: Path, tests: Sequence[str] = ()) -> SeedRun:
    """One run of the CUDA tests (all, or only TESTS) under SEED."""
    return sim_seeds.run_seed(binary, seed, env_for(seed), work_dir, kind="CUDA",
                              timeout=seed_timeout(), tests=tests)


def run_expandable_seed(binary: Path, seed: int, work_dir: Path) -> SeedRun:
    """One run of the CUDA tests under SEED with expandable segments on, but those of
    expandable.NOT_RUN."""
    return sim_seeds.run_seed(binary, seed, expandable.env_for(env_for(seed)), work_dir,
                              kind="CUDA", timeout=seed_timeout(),
                              excluded=list(expandable.NOT_RUN), name="expandable-seed")


def expandable_skip_reason(only: Sequence[str], tree: Path,
                           first_pass: Sequence[SeedRun]) -> str:
    """Why the expandable-segments pass does not run, or "": ONLY some tests were asked for,
    TREE's PyTorch has no expandable segments, or the FIRST_PASS failed (that failure is the
    level's, and the facts say the pass did not run rather than show it with no seed)."""
    if only:
        return "only some tests were asked for"
    if any(run.problem for run in first_pass):
        return "the first pass failed"
    return expandable.unavailable(tree)


def run_benchmark(binary: Path, name: str, seed: int, work_dir: Path,
                  env: dict[str, str] | None = None) -> BenchRun:
    """One benchmark in its short mode under SEED (ENV: the simulator's settings, if not this
    level's), whose JSON must say the data was checked on the simulator."""
    result = work_dir / f"{LEVEL}.{name}.json"
    result.unlink(missing_ok=True)  # a stale result must never stand in for this run
    log = work_dir / f"{LEVEL}.{name}.log"
    with open(log, "w") as out, Timer() as timer:
        finished = run_logged([binary, "--short", "--out", result], out,
                              timeout=BENCH_TIMEOUT_S,
                              env=env_for(seed) if env is None else env)
    if finished.timed_out:
        return BenchRun(name, f"{binary.name} did not finish within {BENCH_TIMEOUT_S:.0f} s; "
                              f"log: {log}", result, timer.seconds)
    if finished.returncode != 0 or not result.is_file():
        return BenchRun(name, f"{binary.name} exited with {finished.returncode}: "
                              f"{last_message(finished.lines)}; log: {log}", result,
                        timer.seconds)
    data = json.loads(result.read_text())
    if data.get("data_ok") is not True or data.get("simulated") is not True:
        return BenchRun(name, f"{result.name} does not report checked data from the "
                              f"simulator", result, timer.seconds)
    return BenchRun(name, "", result, timer.seconds, simulated_figures(data))


def last_message(lines: Sequence[str]) -> str:
    """The line of a program's output that says why it stopped (not a stack frame)."""
    for line in reversed(lines):
        text = line.strip()
        if text.startswith("what():"):
            return text
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith("frame #"):
            return text
    return "no output"


def run(ctx: LevelContext, build_dir: Path,
        build_targets: Callable[[Sequence[str]], build.BuildResult]) -> LevelResult:
    suite = build.SUITES["sim"]
    fuzz_env()  # a bad setting fails now, not after the build
    sources = build.test_sources(ctx.tree, "sim")
    if not sources:
        return LevelResult(LEVEL, FAIL, detail=f"no LMS CUDA test sources ({suite.sources}) in "
                                               "the tree; a level never passes without tests")
    no_benchmarks = build.benchmarks_unavailable(ctx.tree)
    benchmarks = () if no_benchmarks or ctx.sim_tests else BENCHMARKS
    no_models = "" if benchmarks else "the benchmarks do not run"
    no_models = no_models or model_benchmarks_unavailable(ctx.tag)
    targets = [*build.SIM_LIBRARIES, suite.target, *(program for program, _ in benchmarks),
               *([] if no_models else [build.PLAN_REPLAY])]
    ctx.say(f"{LEVEL}: building {', '.join(targets[1:])} against the simulated CUDA runtime")
    built = build_targets(targets)
    binary = build_dir / suite.target
    seeds = list(range(1, ctx.sim_seeds + 1))
    runs = sim_seeds.run_seeds(
        seeds, lambda seed: run_seed(binary, seed, ctx.work_dir, ctx.sim_tests),
        at_once=sim_seeds.seeds_at_once(ctx.jobs), say=ctx.say, program=suite.target)
    no_expandable = expandable_skip_reason(ctx.sim_tests, ctx.tree, runs)
    expandable_runs: list[SeedRun] = []
    if not no_expandable:
        expandable_runs = sim_seeds.run_seeds(
            list(expandable.SEEDS), lambda seed: run_expandable_seed(binary, seed, ctx.work_dir),
            at_once=sim_seeds.seeds_at_once(ctx.jobs), say=ctx.say,
            program=f"{suite.target} with {expandable.ALLOC_CONF}")
    bench_runs = []
    # The benchmarks check data the tests already found wrong: not worth their time then.
    for program, name in (benchmarks if not any(run.problem for run in [*runs, *expandable_runs])
                          else ()):
        ctx.say(f"{LEVEL}: {program} --short")
        bench_runs.append(run_benchmark(build_dir / "bench" / program, name, seeds[0],
                                        ctx.work_dir))
    models: dict[str, Any] = {"skipped": no_models} if no_models else {}
    if bench_runs and not no_models and not any(run.problem for run in bench_runs):
        models = run_model_benchmarks(build_dir / "plan" / build.PLAN_REPLAY,
                                      ctx.work_dir / "models", ctx.say)
    elif no_models and benchmarks:
        ctx.say(f"{LEVEL}: model benchmarks skipped: {no_models}")
    return judge(runs, bench_runs, built, log=str(built.log), no_benchmarks=no_benchmarks,
                 only=ctx.sim_tests, models=models, expandable_runs=expandable_runs,
                 no_expandable=no_expandable)


def model_benchmarks_unavailable(tag: str) -> str:
    """Why the model-level benchmarks (lmsforge/plan/model_bench.py) cannot run for TAG, or
    "": they trace with PyTorch (the `plan` extra) and replay with the planner's program, which
    follows the v2.6.0 series' c10 API."""
    if tag != plan_build.TAG:
        return f"the planner's replay follows the {plan_build.TAG} series' c10 API, not {tag}'s"
    try:
        import torch  # noqa: F401  (the `plan` extra; lmsforge itself does not need it)
    except ImportError:
        return "PyTorch is not installed (python3 -m pip install 'lmsforge[plan]')"
    return ""


def run_model_benchmarks(program: Path, work: Path, say: Callable[[str], None]) -> dict[str, Any]:
    """The model-level report, or {"problem": ...} when a model could not be traced or
    replayed, or a replay found wrong data."""
    from lmsforge.plan import model_bench, replay
    problem = ""
    report: dict[str, Any] = {}
    with Timer() as timer:
        try:
            report = model_bench.run_all(program, work, say)
        except (CheckFailed, UsageError) as err:
            problem = str(err)
    if problem:
        return {"problem": problem, "seconds": round(timer.seconds, 1)}
    report["seconds"] = round(timer.seconds, 1)
    report["summary"] = model_bench.summary(report)
    report["work"] = str(work)  # every replay's script and JSON: bench/plan_replay_gpu.py's input
    # Beside them, the report: which replay is each limit's tuned pick (run first on a GPU).
    (work / replay.MODEL_BENCH_REPORT).write_text(json.dumps(report, indent=1) + "\n")
    return report


def judge(runs: Sequence[SeedRun], bench_runs: Sequence[BenchRun], built: build.BuildResult,
          log: str, no_benchmarks: str = "", only: Sequence[str] = (),
          models: dict[str, Any] | None = None, expandable_runs: Sequence[SeedRun] = (),
          no_expandable: str = "not run") -> LevelResult:
    """PASS only when every seed ran every test and passed, with expandable segments too
    (EXPANDABLE_RUNS; NO_EXPANDABLE says why there are none), and every benchmark checked its
    data; a failure names the first failing seed and how to replay it. A run of ONLY some
    tests that all passed is no pass of the level: it is reported skipped, with why."""
    facts: dict[str, object] = {
        "simulated": True, "gpu": False, "seeds": [run.to_json() for run in runs],
        "benchmarks": {run.name: run.to_json() for run in bench_runs},
        "model_benchmarks": models or {},
        "tus_compiled": built.tus, "build_seconds": round(built.seconds, 1),
        "test_seconds": round(sum(run.seconds for run in [*runs, *expandable_runs]), 1),
        "expandable_segments": (
            {"skipped": no_expandable} if no_expandable else
            {"alloc_conf": expandable.ALLOC_CONF, "seeds": [run.to_json() for run in
                                                            expandable_runs],
             "not_run": dict(expandable.NOT_RUN)})}
    failure = sim_seeds.seeds_failed(runs, facts, log)
    if failure is not None:
        return failure
    if not no_expandable:
        failure = sim_seeds.seeds_failed(expandable_runs, facts, log)
        if failure is not None:
            return LevelResult(LEVEL, FAIL, facts=facts, log=log,
                               detail=f"with {expandable.ALLOC_CONF}: {failure.detail}")
    bench_failed = [run for run in bench_runs if run.problem]
    if bench_failed:
        return LevelResult(LEVEL, FAIL, facts=facts, log=log,
                           detail=f"benchmark {bench_failed[0].name}: {bench_failed[0].problem}")
    if models and models.get("problem"):
        return LevelResult(LEVEL, FAIL, facts=facts, log=log,
                           detail=f"model benchmarks: {models['problem']}")
    passed = runs[0].report.passed if runs[0].report else 0
    if only:
        return LevelResult(LEVEL, SKIPPED, facts=facts, log=log,
                           detail=f"only the {len(only)} CUDA tests asked for ran, and passed "
                                  f"under each of {len(runs)} seeds; the level passes only "
                                  f"when every test and both benchmarks run")
    detail = f"{passed} CUDA tests passed under each of {len(runs)} seeds"
    if expandable_runs:
        detail += (f", {expandable_runs[0].report.passed if expandable_runs[0].report else 0} "
                   f"of them again with {expandable.ALLOC_CONF} under each of "
                   f"{len(expandable_runs)} ({len(expandable.NOT_RUN)} not run there: "
                   f"docs/core-sim.md)")
    if bench_runs:
        detail += "; both benchmarks' data checks passed"
        efficiency = next((run.figures["bound_efficiency"] for run in bench_runs
                           if run.figures and "bound_efficiency" in run.figures), {})
        if efficiency:
            values = " ".join(f"{value:.2f}" for value in efficiency.values())
            detail += f"; simulated bound efficiency {values} at k = {' '.join(efficiency)}"
        if models and models.get("summary"):
            detail += f"; models' least-time efficiency (simulated) {models['summary']}"
    else:
        detail += f"; benchmarks not built: {no_benchmarks}"
        facts["benchmarks_not_built"] = no_benchmarks
    detail += " (simulated CUDA runtime, not a GPU result)"
    return LevelResult(LEVEL, PASS, detail=detail, facts=facts, log=log)
