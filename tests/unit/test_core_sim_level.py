"""The core-sim level's plumbing without a build: its place among the levels, its verdicts and
the lines a failure prints (the runs themselves: tests/integration/test_core_sim.py)."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from fixtures import lmsforge
from lmsforge.errors import UsageError
from lmsforge.frameworks import pytorch, tensorflow
from lmsforge.verify.levels import FAIL, LEVELS, PASS, SKIPPED, LevelContext
from lmsforge.verify.pytorch_c10 import build, expandable, process, sim_level, sim_seeds
from lmsforge.verify.pytorch_c10.gtest import GtestReport
from lmsforge.verify.tensorflow_tf import core_sim

BINARY = Path("/b/lms_cuda_tests_sim")
BUILT = build.BuildResult(12.0, 3, Path("/b/build.log"))


def _seed(seed: int, passed: int = 12, failures: tuple[str, ...] = (),
          skips: tuple[str, ...] = ()) -> sim_level.SeedRun:
    report = GtestReport(passed, len(failures), len(skips), 0, failures, skips)
    problem = ""
    if failures or skips:
        problem = f"something; replay: {sim_level.replay_command(BINARY, seed, failures)}"
    return sim_level.SeedRun(seed, report, problem, 1.5, Path(f"/w/core-sim.seed-{seed}.log"))


def _bench(name: str, problem: str = "") -> sim_level.BenchRun:
    return sim_level.BenchRun(name, problem, Path(f"/w/{name}.json"), 3.0)


def test_core_sim_sits_between_core_cpu_and_core_gpu() -> None:
    assert LEVELS.index("core-cpu") + 1 == LEVELS.index("core-sim") == LEVELS.index("core-gpu") - 1
    assert set(pytorch._RUNNERS) == set(tensorflow._RUNNERS) == set(LEVELS) - {"apply"}


def test_tensorflow_core_sim_builds_the_gpu_test_with_its_closure(tmp_path: Path) -> None:
    """What TensorFlow's core-sim compiles: core-cpu's library, the series' touched GPU and
    common_runtime units (not tests), the closure, the regenerated protos, and the GPU test."""
    for path in ("tensorflow/tsl/framework/bfc_allocator.cc",
                 "tensorflow/tsl/framework/lms/lms_manager.cc",
                 "tensorflow/tsl/framework/lms/bfc_allocator_lms_test.cc",
                 "tensorflow/core/common_runtime/gpu/gpu_lms_test.cc",
                 "tensorflow/core/common_runtime/scoped_allocator_mgr.cc"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    touched = ["tensorflow/core/common_runtime/gpu/gpu_device.cc",
               "tensorflow/core/common_runtime/gpu/gpu_lms_test.cc",
               "tensorflow/core/common_runtime/scoped_allocator.cc",
               "tensorflow/core/common_runtime/gpu/gpu_bfc_allocator.h",
               "tensorflow/python/tfe_wrapper.cc"]
    generated = [tmp_path / "gen" / "tensorflow/core/protobuf/config.pb.cc"]
    sources = core_sim.find_sources(tmp_path, touched, generated)
    assert sources.tests == ["tensorflow/core/common_runtime/gpu/gpu_lms_test.cc"]
    assert sources.library == [
        "tensorflow/tsl/framework/bfc_allocator.cc", "tensorflow/tsl/framework/lms/lms_manager.cc",
        "tensorflow/core/common_runtime/gpu/gpu_device.cc",
        "tensorflow/core/common_runtime/scoped_allocator.cc",
        "tensorflow/core/common_runtime/scoped_allocator_mgr.cc", str(generated[0])]
    assert core_sim.find_sources(tmp_path / "empty", [], []).tests == []


def test_a_tensorflow_core_sim_failure_names_its_seed_and_replay(tmp_path: Path) -> None:
    report = GtestReport(16, 1, 0, 0, ("GpuLmsTest.PageOutWaits",))
    runs = [core_sim.SeedRun(1, GtestReport(17, 0, 0, 0, ()), "", 1.0, tmp_path / "1.log"),
            core_sim.SeedRun(2, report, "1 tests failed: GpuLmsTest.PageOutWaits; replay: "
                             "LMS_SIM_DEVICES=2 LMS_SIM_SEED=2 ...", 1.0, tmp_path / "2.log")]
    result = core_sim.judge(runs, {"audit_summary": "ok"}, "log")
    assert result.status == FAIL
    assert result.detail.startswith("1 of 2 seeds failed; seed 2: 1 tests failed")
    assert result.facts["simulated"] is True and result.facts["gpu"] is False
    passed = core_sim.judge(runs[:1], {"audit_summary": "5 classes change layout"}, "log")
    assert passed.status == PASS and "not a GPU result" in passed.detail


def test_a_tensorflow_pass_carries_the_benchmarks_simulated_efficiency(tmp_path: Path) -> None:
    runs = [core_sim.SeedRun(1, GtestReport(19, 0, 0, 0, ()), "", 1.0, tmp_path / "1.log")]
    bench = sim_level.BenchRun("oversubscription", "", tmp_path / "o.json", 11.0,
                               sim_level.simulated_figures(OVERSUB))
    result = core_sim.judge(runs, {"audit_summary": "ok"}, "log", [bench])
    assert result.status == PASS
    assert ("simulated bound efficiency 0.76 0.59 0.67 0.70 at k = 1 2 4 8 (simulated CUDA "
            "driver, not a GPU result)") in result.detail
    assert result.facts["benchmarks"]["oversubscription"]["figures"]["simulated"] is True
    wrong = sim_level.BenchRun("oversubscription", "lms_tf_bench_oversub exited with 1: "
                               "computed a wrong gradient", tmp_path / "o.json", 11.0)
    failed = core_sim.judge(runs, {"audit_summary": "ok"}, "log", [wrong])
    assert failed.status == FAIL
    assert failed.detail.startswith("benchmark oversubscription: lms_tf_bench_oversub exited")
    unbuilt = core_sim.judge(runs, {"audit_summary": "ok"}, "log", [], "no bench/ beside it")
    assert unbuilt.status == PASS and "benchmark not built: no bench/ beside it" in \
        unbuilt.detail and unbuilt.facts["benchmarks_not_built"] == "no bench/ beside it"


def test_a_tree_without_cuda_tests_fails(tmp_path: Path) -> None:
    (tmp_path / "c10" / "cuda" / "test").mkdir(parents=True)
    ctx = LevelContext("pytorch", "v2.6.0", tmp_path, "0" * 40, tmp_path / "w",
                       say=lambda _: None)
    result = pytorch.run_level("core-sim", ctx)
    assert result.status == FAIL
    assert result.detail.startswith("no LMS CUDA test sources")


def test_every_seed_passing_is_a_simulated_pass() -> None:
    result = sim_level.judge([_seed(1), _seed(2)], [_bench("copy-engine")], BUILT, "log")
    assert result.status == PASS
    assert result.detail == ("12 CUDA tests passed under each of 2 seeds; both benchmarks' data "
                             "checks passed (simulated CUDA runtime, not a GPU result)")
    assert result.facts["simulated"] is True and result.facts["gpu"] is False
    assert [run["seed"] for run in result.facts["seeds"]] == [1, 2]


def test_benchmarks_that_cannot_be_built_are_said(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    assert build.benchmarks_unavailable(tmp_path) == ""  # a source checkout, any tree
    monkeypatch.setattr(build, "BENCH_DIR", tmp_path / "installed-without-bench")
    result = sim_level.judge([_seed(1)], [], BUILT, "log",
                             no_benchmarks=build.benchmarks_unavailable(tmp_path))
    assert result.status == PASS
    assert "benchmarks not built: no bench/ beside lmsforge (not a source checkout)" in result.detail


def test_a_failing_seed_is_named_with_its_replay() -> None:
    runs = [_seed(1), _seed(2, passed=11, failures=("Suite.Broken",)), _seed(3)]
    result = sim_level.judge(runs, [], BUILT, "log")
    assert result.status == FAIL
    assert result.detail.startswith("1 of 3 seeds failed; seed 2: something; replay: "
                                    "LMS_SIM_DEVICES=2 LMS_SIM_SEED=2 /b/lms_cuda_tests_sim "
                                    "--gtest_shuffle --gtest_random_seed=2 "
                                    "--gtest_filter=Suite.Broken")


def test_a_skipped_test_fails_the_level() -> None:
    result = sim_level.judge([_seed(1, skips=("Suite.NeedsTwo",))], [], BUILT, "log")
    assert result.status == FAIL and "seed 1" in result.detail


def test_a_benchmark_with_wrong_data_fails_the_level() -> None:
    result = sim_level.judge([_seed(1)], [_bench("oversubscription", "bad gradient")], BUILT, "l")
    assert (result.status, result.detail) == (FAIL, "benchmark oversubscription: bad gradient")


def test_the_stop_message_of_a_crashed_program() -> None:
    lines = ["LMS active", "terminate called after throwing an instance of 'c10::Error'",
             "  what():  Should never been called", "frame #0: c10::Error::Error", "frame #1: x"]
    assert sim_level.last_message(lines) == "what():  Should never been called"
    assert sim_level.last_message(["ok", "frame #0: y"]) == "ok"


def test_sim_seeds_must_be_positive() -> None:
    result = lmsforge("verify", "--level", "core-sim", "--sim-seeds", "0")
    assert result.exit_code == 2
    assert "--sim-seeds" in result.output


# Benchmark results as the simulator's programs write them (trimmed to what the level reads).
OVERSUB = {"benchmark": "oversubscription", "simulated": True, "data_ok": True,
           "timing": {"clock": "virtual", "calibration": {"name": "h100-2026-11-22"}},
           "results": [{"k": k, "bound_efficiency": e, "lms": {"step_ms": ms}}
                       for k, e, ms in ((1, 0.75512, 1.64), (2, 0.59149, 6.07),
                                        (4, 0.66713, 14.94), (8, 0.69531, 32.68))]}
COPY = {"benchmark": "copy-engine", "simulated": True, "data_ok": True,
        "timing": {"clock": "virtual", "calibration": {"name": "h100-2026-11-22"}},
        "results": [{"size": size, "ratio_out": 0.5, "ratio_in": 0.25,
                     "raw_d2h": {"gbps": 54.0}, "raw_h2d": {"gbps": 51.9}}
                    for size in (4096, 16777216)]}


def test_simulated_figures_of_the_oversubscription_benchmark() -> None:
    figures = sim_level.simulated_figures(OVERSUB)
    assert figures["simulated"] is True and figures["clock"] == "virtual"
    assert figures["calibration"] == "h100-2026-11-22"
    assert figures["bound_efficiency"] == {"1": 0.7551, "2": 0.5915, "4": 0.6671, "8": 0.6953}
    assert figures["lms_step_ms"]["8"] == 32.68


def test_simulated_figures_carry_the_waits_lms_timed_beside_the_compute_only_step() -> None:
    rows = [{"k": 2, "bound_efficiency": 0.903,
             "lms": {"step_ms": 3.9734, "compute_wait_ms_per_step": 1.507},
             "oracle": {"step_ms": 2.4659}},
            {"k": 4, "bound_efficiency": 0.963,  # --no-oracle: nothing to set it beside
             "lms": {"step_ms": 10.34, "compute_wait_ms_per_step": 5.417}, "oracle": None}]
    figures = sim_level.simulated_figures({**OVERSUB, "results": rows})
    assert figures["compute_wait_ms"] == {"2": 1.507}
    assert figures["compute_only_step_ms"] == {"2": 2.4659}
    assert "compute_wait_ms" not in sim_level.simulated_figures(OVERSUB)


def test_simulated_figures_of_the_copy_benchmark() -> None:
    figures = sim_level.simulated_figures(COPY)
    assert figures["ratio_out"] == {"4096": 0.5, "16777216": 0.5}
    assert figures["ratio_in"]["4096"] == 0.25
    assert figures["raw_d2h_gbps"]["16777216"] == 54.0


def test_a_pass_reports_the_simulated_efficiency_per_k() -> None:
    benches = [sim_level.BenchRun("copy-engine", "", Path("/w/c.json"), 1.0,
                                  sim_level.simulated_figures(COPY)),
               sim_level.BenchRun("oversubscription", "", Path("/w/o.json"), 6.0,
                                  sim_level.simulated_figures(OVERSUB))]
    result = sim_level.judge([_seed(1)], benches, BUILT, "log")
    assert result.status == PASS
    assert ("simulated bound efficiency 0.76 0.59 0.67 0.70 at k = 1 2 4 8 (simulated CUDA "
            "runtime, not a GPU result)") in result.detail
    facts = result.facts["benchmarks"]
    assert facts["oversubscription"]["figures"]["bound_efficiency"]["2"] == 0.5915
    assert facts["copy-engine"]["figures"]["simulated"] is True


def test_the_level_runs_a_benchmark_and_keeps_its_figures(tmp_path: Path) -> None:
    # A stand-in program that writes the result a simulated benchmark writes.
    program = tmp_path / "lms_bench_oversub_sim"
    program.write_text("#!/bin/sh\nwhile [ \"$1\" != --out ]; do shift; done\n"
                       f"cat > \"$2\" <<'END'\n{json.dumps(OVERSUB)}\nEND\n")
    program.chmod(0o755)
    run = sim_level.run_benchmark(program, "oversubscription", 1, tmp_path)
    assert run.problem == ""
    assert run.figures["bound_efficiency"]["4"] == 0.6671
    assert (tmp_path / "core-sim.oversubscription.json").is_file()


def test_the_fuzzers_settings_reach_the_program_and_its_replay(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LMS_FUZZ_STEPS", raising=False)
    monkeypatch.delenv("LMS_FUZZ_MINUTES", raising=False)
    assert sim_level.env_for(3) == {"LMS_SIM_DEVICES": "2", "LMS_SIM_SEED": "3"}
    assert sim_level.seed_timeout() == sim_level.SEED_TIMEOUT_S
    monkeypatch.setenv("LMS_FUZZ_MINUTES", "30")
    assert sim_level.env_for(3)["LMS_FUZZ_MINUTES"] == "30"
    # A long run gets its minutes on top of the CI limit, and its replay line says them.
    assert sim_level.seed_timeout() == sim_level.SEED_TIMEOUT_S + 1800
    assert "LMS_FUZZ_MINUTES=30 " in sim_level.replay_command(BINARY, 3)


@pytest.mark.parametrize("value", ["soon", "0", "-1", "nan"])
def test_a_bad_fuzzer_setting_is_a_usage_error(monkeypatch: pytest.MonkeyPatch,
                                               value: str) -> None:
    monkeypatch.setenv("LMS_FUZZ_MINUTES", value)
    with pytest.raises(UsageError, match="LMS_FUZZ_MINUTES"):
        sim_level.env_for(1)


def test_a_run_of_some_tests_only_never_passes_the_level() -> None:
    result = sim_level.judge([_seed(1, passed=2), _seed(2, passed=2)], [], BUILT, "log",
                             only=("A.B", "A.C"))
    assert result.status == SKIPPED
    assert result.detail.startswith("only the 2 CUDA tests asked for ran, and passed")


def test_a_run_of_some_tests_fails_the_level_when_one_fails() -> None:
    result = sim_level.judge([_seed(1, passed=1, failures=("A.B",))], [], BUILT, "log",
                             only=("A.B", "A.C"))
    assert result.status == FAIL
    assert "replay: " in result.detail and "--gtest_filter=A.B" in result.detail


def test_model_benchmarks_are_in_the_report_and_their_summary_in_the_detail() -> None:
    benches = [sim_level.BenchRun("oversubscription", "", Path("/w/o.json"), 6.0,
                                  sim_level.simulated_figures(OVERSUB))]
    models = {"simulated": True, "models": [], "summary": "resnet50 1/2 0.50 1/4 0.35"}
    result = sim_level.judge([_seed(1)], benches, BUILT, "log", models=models)
    assert result.status == PASS
    assert ("; models' least-time efficiency (simulated) resnet50 1/2 0.50 1/4 0.35 (simulated "
            "CUDA runtime, not a GPU result)") in result.detail
    assert result.facts["model_benchmarks"] is models


def test_a_model_benchmark_that_failed_fails_the_level() -> None:
    benches = [sim_level.BenchRun("oversubscription", "", Path("/w/o.json"), 6.0,
                                  sim_level.simulated_figures(OVERSUB))]
    models = {"problem": "the replay (lms:True) found wrong data: storage 7"}
    result = sim_level.judge([_seed(1)], benches, BUILT, "log", models=models)
    assert (result.status, result.detail) == (
        FAIL, "model benchmarks: the replay (lms:True) found wrong data: storage 7")


def test_model_benchmarks_run_for_the_planner_series_only() -> None:
    assert "v2.6.0 series' c10 API, not v1.13.1's" in \
        sim_level.model_benchmarks_unavailable("v1.13.1")
    assert sim_level.model_benchmarks_unavailable("v2.6.0") == ""  # torch: the test extra


def test_each_seed_runs_the_tests_in_its_own_order_and_its_replay_keeps_it() -> None:
    # Shuffled by the seed: an order the author never ran, the same again for the replay.
    assert sim_level.sim_seeds.order_args(4) == ["--gtest_shuffle", "--gtest_random_seed=4"]
    assert sim_level.replay_command(BINARY, 4).endswith(
        f"{BINARY} --gtest_shuffle --gtest_random_seed=4")
    assert sim_level.replay_command(BINARY, 5, ["A.B"]).endswith(
        "--gtest_shuffle --gtest_random_seed=5 --gtest_filter=A.B")


def _program_seed(seed: int, tmp_path: Path, script: str, live: list[int],
                  most: list[int], lock: threading.Lock) -> sim_level.SeedRun:
    """SEED's run as a real program (sh -c SCRIPT, logged as a seed's program is), counting how
    many such programs are running at once."""
    with lock:
        live[0] += 1
        most[0] = max(most[0], live[0])
    try:
        with open(tmp_path / f"seed-{seed}.log", "w") as log:
            finished = process.run_logged(["sh", "-c", script], log)
    finally:
        with lock:
            live[0] -= 1
    problem = "" if finished.returncode == 0 else f"exited with {finished.returncode}"
    return sim_level.SeedRun(seed, None, problem, 0.0, tmp_path / f"seed-{seed}.log")


def test_seeds_run_side_by_side_and_come_back_in_seed_order(tmp_path: Path) -> None:
    live, most, lock, said = [0], [0], threading.Lock(), []
    # Seed 1 ends last: the runs still come back in seed order.
    runs = sim_seeds.run_seeds(
        [1, 2, 3],
        lambda seed: _program_seed(seed, tmp_path, f"sleep {0.2 * (4 - seed)}", live, most,
                                   lock),
        at_once=3, say=said.append, program="tests")
    assert [run.seed for run in runs] == [1, 2, 3] and not any(run.problem for run in runs)
    assert most[0] > 1
    assert said[0] == "core-sim: tests, seeds 1-3, 3 at a time"
    assert said[1].startswith("core-sim: seed 3 passed (1 of 3 done")


def test_no_more_seeds_run_at_once_than_asked(tmp_path: Path) -> None:
    live, most, lock = [0], [0], threading.Lock()
    runs = sim_seeds.run_seeds(
        range(1, 6), lambda seed: _program_seed(seed, tmp_path, "sleep 0.1", live, most, lock),
        at_once=2, say=lambda _: None, program="tests")
    assert [run.seed for run in runs] == [1, 2, 3, 4, 5] and most[0] == 2
    # Two programs per CPU: each sleeps about half its time in the simulator's delays.
    assert sim_seeds.seeds_at_once(2) == 4 and sim_seeds.seeds_at_once(0) == 1


def test_an_interrupt_stops_the_seeds_still_running(tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    live, most, lock = [0], [0], threading.Lock()

    def run_one(seed: int) -> sim_level.SeedRun:
        if seed == 1:  # interrupted once seed 2's program is running
            while not pid_file.exists() or not pid_file.read_text().strip():
                time.sleep(0.01)
            raise KeyboardInterrupt
        return _program_seed(seed, tmp_path, f"echo $$ > {pid_file}; exec sleep 5", live,
                             most, lock)

    with pytest.raises(KeyboardInterrupt):
        sim_seeds.run_seeds([1, 2], run_one, at_once=2, say=lambda _: None, program="tests")
    # Seed 2's program was killed (a signal ended it, not its 5 s sleep) and reaped before the
    # interrupt went on up.
    log = (tmp_path / "seed-2.log").read_text()
    assert "[exit code -" in log and "[exit code 0]" not in log, log
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)
    assert live[0] == 0


def test_the_expandable_segments_pass_is_part_of_the_verdict() -> None:
    again = [_seed(1, passed=10), _seed(2, passed=10)]
    result = sim_level.judge([_seed(1), _seed(2)], [], BUILT, "log", expandable_runs=again,
                             no_expandable="")
    assert result.status == PASS
    assert result.detail.startswith(
        "12 CUDA tests passed under each of 2 seeds, 10 of them again with "
        f"expandable_segments:True under each of 2 ({len(expandable.NOT_RUN)} not run there")
    facts = result.facts["expandable_segments"]
    assert facts["alloc_conf"] == "expandable_segments:True"
    assert [run["seed"] for run in facts["seeds"]] == [1, 2]
    assert facts["not_run"] == dict(expandable.NOT_RUN)  # each with why

    broken = [_seed(1, passed=9), _seed(2, passed=9, failures=("Suite.Broken",))]
    failed = sim_level.judge([_seed(1)], [], BUILT, "log", expandable_runs=broken,
                             no_expandable="")
    assert failed.status == FAIL
    assert failed.detail.startswith("with expandable_segments:True: 1 of 2 seeds failed; seed 2")
    # Asked for and not run: no pass.
    missing = sim_level.judge([_seed(1)], [], BUILT, "log", no_expandable="")
    assert (missing.status, missing.detail) == (FAIL, "with expandable_segments:True: no seed "
                                                      "to run")


def test_expandable_segments_exist_from_pytorch_2_1(tmp_path: Path) -> None:
    assert expandable.unavailable(tmp_path) == \
        "this PyTorch has no expandable segments (they came in 2.1)"
    (tmp_path / "c10" / "cuda").mkdir(parents=True)
    (tmp_path / "c10" / "cuda" / "driver_api.h").write_text("")
    assert expandable.unavailable(tmp_path) == ""
    skipped = sim_level.judge([_seed(1)], [], BUILT, "log",
                              no_expandable=expandable.unavailable(tmp_path / "none"))
    assert skipped.status == PASS
    assert skipped.facts["expandable_segments"] == {
        "skipped": "this PyTorch has no expandable segments (they came in 2.1)"}


def test_the_expandable_pass_says_why_it_did_not_run(tmp_path: Path) -> None:
    (tmp_path / "c10" / "cuda").mkdir(parents=True)
    (tmp_path / "c10" / "cuda" / "driver_api.h").write_text("")
    assert sim_level.expandable_skip_reason((), tmp_path, [_seed(1), _seed(2)]) == ""
    assert sim_level.expandable_skip_reason(("A.B",), tmp_path, [_seed(1)]) == \
        "only some tests were asked for"
    failed = [_seed(1), _seed(2, failures=("A.B",))]
    reason = sim_level.expandable_skip_reason((), tmp_path, failed)
    assert reason == "the first pass failed"
    assert sim_level.expandable_skip_reason((), tmp_path / "none", [_seed(1)]) == \
        "this PyTorch has no expandable segments (they came in 2.1)"
    # The first pass's failure is the verdict; the facts say the second pass did not run.
    result = sim_level.judge(failed, [], BUILT, "log", no_expandable=reason)
    assert result.status == FAIL and "seed 2" in result.detail
    assert result.facts["expandable_segments"] == {"skipped": "the first pass failed"}


def test_an_expandable_seed_runs_every_test_but_those_named_with_expandable_segments(
        tmp_path: Path) -> None:
    """The program gets the first pass's settings plus expandable segments, and a filter that
    leaves out exactly the tests named with why; its log is its own."""
    program = tmp_path / "lms_cuda_tests_sim"
    program.write_text(
        "#!/bin/sh\n"
        f"echo \"$PYTORCH_CUDA_ALLOC_CONF $LMS_SIM_DEVICES $LMS_SIM_SEED $*\" > {tmp_path}/argv\n"
        "out=${1#--gtest_output=json:}\n"
        "echo '{\"testsuites\": [{\"name\": \"S\", \"testsuite\": "
        "[{\"name\": \"T\", \"result\": \"COMPLETED\", \"status\": \"RUN\"}]}]}' > $out\n")
    program.chmod(0o755)
    run = sim_level.run_expandable_seed(program, 2, tmp_path)
    assert run.problem == "" and run.report is not None and run.report.passed == 1
    assert run.log == tmp_path / "core-sim.expandable-seed-2.log"
    words = (tmp_path / "argv").read_text().split()
    assert words[:3] == ["expandable_segments:True", "2", "2"]
    assert words[-1] == "--gtest_filter=-" + ":".join(expandable.NOT_RUN)
    assert "--gtest_random_seed=2" in words
