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
