"""bench/plan_replay_gpu.py without a GPU: its refusals, and the order in which it spends its
budget. Its input, the model benchmarks' real replays, is checked where they are made
(tests/integration/test_core_sim.py)."""

import json
import subprocess
import sys
from pathlib import Path

from script_module import load_script

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "plan_replay_gpu.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=60)


def test_a_missing_program_is_refused_with_what_builds_it(tmp_path: Path) -> None:
    done = _run("--runs", str(tmp_path), "--program", str(tmp_path / "lms_plan_replay"),
                "--out", str(tmp_path / "out.json"))
    assert done.returncode == 2
    assert "lms_plan_replay not found: build it with run-gpu.sh" in done.stderr
    assert not (tmp_path / "out.json").exists()


def test_a_folder_without_simulated_replays_is_refused(tmp_path: Path) -> None:
    program = tmp_path / "lms_plan_replay"
    program.write_text("")
    model = tmp_path / "models" / "resnet50"
    model.mkdir(parents=True)
    # A GPU result, and a simulated one from before replays said how they were run: neither
    # can be run again as it was.
    (model / "gpu.json").write_text(json.dumps({"program": "lms_plan_replay", "simulated": False,
                                                "completed": True, "record": False}))
    (model / "old.json").write_text(json.dumps({"program": "lms_plan_replay", "simulated": True,
                                                "completed": True}))
    done = _run("--runs", str(tmp_path / "models"), "--program", str(program),
                "--out", str(tmp_path / "out.json"))
    assert done.returncode == 2
    assert "no simulated replay with its arguments" in done.stderr


def test_the_budget_goes_to_half_the_peak_first() -> None:
    module = load_script(SCRIPT, "plan_replay_gpu")
    names = ["without-lms.json", "lms-1of4-3.json", "played-1of2-lead1.json", "lms-1of4.json",
             "lms-1of2-2.json", "recorded-1of2.json", "lms-1of2.json", "zz-other.json"]
    ordered = sorted((Path("m") / name for name in names), key=module.order_key)
    assert [path.name for path in ordered] == [
        "lms-1of2.json", "recorded-1of2.json", "played-1of2-lead1.json", "lms-1of2-2.json",
        "lms-1of4.json", "lms-1of4-3.json", "without-lms.json", "zz-other.json"]


def _replay_json(step_ms: float, stats: dict[str, int], recorder: dict[str, int]) -> dict:
    """A replay's JSON as lms_plan_replay writes it (docs/plan-trace-format.md), three steps."""
    return {"program": "lms_plan_replay", "device_memory_bytes": 8 << 30, "completed": True,
            "lms_limit_bytes": 4 << 30, "data_ok": True, "record": True, "plan": None,
            "alloc_conf": "lms:True,lms_limit:4294967296", "recorder": recorder,
            "steps": [{"step_ms": step_ms * 3, "memory_stats": {}},
                      {"step_ms": step_ms, "memory_stats": stats},
                      {"step_ms": step_ms, "memory_stats": stats}]}


def test_a_row_puts_the_simulated_and_gpu_counters_side_by_side() -> None:
    module = load_script(SCRIPT, "plan_replay_gpu")
    sim = _replay_json(100.0, {"reclaimed": 10, "page_out_waits": 12, "page_in_wait_us": 900,
                               "clean_reclaims": 7}, {"steps_planned": 4})
    gpu = {**_replay_json(150.0, {"reclaimed": 10, "page_out_waits": 30,
                                  "page_in_wait_us": 5000, "clean_reclaims": 2},
                          {"steps_planned": 3}),
           "exit_code": 0, "wall_s": 2.0}
    row = module.row(Path("m/gpt2-medium/recorded-1of2.json"), sim, gpu)
    assert (row["model"], row["run"], row["gpu_over_sim"]) == ("gpt2-medium", "recorded-1of2", 1.5)
    assert row["counters"]["page_out_waits"] == {"sim": 12, "gpu": 30}
    assert row["counters"]["page_in_wait_us"] == {"sim": 900, "gpu": 5000}
    assert row["counters"]["prefetch_hits"] == {"sim": 0, "gpu": 0}
    assert (row["sim_recorder"], row["gpu_recorder"]) == ({"steps_planned": 4},
                                                          {"steps_planned": 3})
    # Every step's, not only the reported one's: a first step unlike the later ones shows.
    assert row["each_step"]["clean_reclaims"] == {"sim": [0, 7, 7], "gpu": [0, 2, 2]}
    # Without timelines (replays from before ended_us_after_op) nothing is named.
    assert row["gaps_differing_most"] == []
    # With them, the operators whose time since the one before differs most, largest first:
    # the third (1 ms simulated, 4 on the GPU), then the first (1 and 1.5); the second is the
    # same on both and is not named.
    sim["ended_us_after_op"], gpu["ended_us_after_op"] = [1000, 2000, 3000], [1500, 2500, 6500]
    row = module.row(Path("m/gpt2-medium/recorded-1of2.json"), sim, gpu)
    assert row["gaps_differing_most"] == [{"position": 2, "sim_ms": 1.0, "gpu_ms": 4.0},
                                          {"position": 0, "sim_ms": 1.0, "gpu_ms": 1.5}]


def test_each_limits_tuned_pick_runs_right_after_its_defaults(tmp_path: Path) -> None:
    module = load_script(SCRIPT, "plan_replay_gpu")
    models = tmp_path / "models"
    names = {"resnet50": ["lms-1of2.json", "recorded-1of2.json", "lms-1of2-9.json",
                          "lms-1of4.json", "lms-1of4-3.json"],
             "unet3d": ["lms-1of2.json", "recorded-1of2.json", "lms-1of2-4.json"]}
    for model, files in names.items():
        (models / model).mkdir(parents=True)
        for name in files:
            (models / model / name).write_text(json.dumps(
                {"program": "lms_plan_replay", "simulated": True, "completed": True,
                 "record": False}))
    # The model benchmarks' report beside the folders (sim_level.run_model_benchmarks).
    (models / "report.json").write_text(json.dumps({"models": [
        {"model": "resnet50", "limits": [
            {"fraction": "1/2", "completed": True, "tuned": {"replay": "lms-1of2-9"}},
            {"fraction": "1/4", "completed": True, "tuned": {"replay": "lms-1of4-3"}}]},
        {"model": "unet3d", "limits": [
            {"fraction": "1/2", "completed": True, "tuned": {"replay": "lms-1of2"}},
            {"fraction": "1/4", "completed": False}]}]}))
    order = [f"{path.parent.name}/{path.stem}" for path, _ in module.simulated_runs(models)]
    assert order == ["resnet50/lms-1of2", "unet3d/lms-1of2", "resnet50/lms-1of2-9",
                     "resnet50/recorded-1of2", "unet3d/recorded-1of2", "unet3d/lms-1of2-4",
                     "resnet50/lms-1of4", "resnet50/lms-1of4-3"]
    # Without the report (an older folder), the fixed order alone.
    (models / "report.json").unlink()
    order = [f"{path.parent.name}/{path.stem}" for path, _ in module.simulated_runs(models)]
    assert order.index("resnet50/lms-1of2-9") > order.index("unet3d/recorded-1of2")


def test_a_program_named_from_the_working_folder_runs(tmp_path: Path) -> None:
    # "./lms_plan_replay", as one types it beside the program: pathlib drops the "./", and
    # subprocess then looked for the name on PATH and failed with a traceback.
    sim = _replay_json(100.0, {"clean_reclaims": 3}, {"steps_planned": 1})
    sim.update(simulated=True)
    model = tmp_path / "models" / "gpt2-medium"
    model.mkdir(parents=True)
    (model / "recorded-1of2.json").write_text(json.dumps(sim))
    (model / "replay.txt").write_text("lmsforge-replay 1\n")
    # A stand-in for the GPU program: writes what the simulated run wrote to --out.
    program = tmp_path / "lms_plan_replay"
    program.write_text(f"#!{sys.executable}\nimport sys, shutil\n"
                       f"shutil.copy({str(model / 'recorded-1of2.json')!r}, "
                       "sys.argv[sys.argv.index('--out') + 1])\n")
    program.chmod(0o755)
    done = subprocess.run([sys.executable, str(SCRIPT), "--runs", "models", "--program",
                           "./lms_plan_replay", "--out", "out.json"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    rows = json.loads((tmp_path / "out.json").read_text())["rows"]
    assert [(r["run"], r["gpu_step_ms"]) for r in rows] == [("recorded-1of2", 100.0)]
