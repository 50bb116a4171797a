"""bench/plan_fluid_bound.py on a small report: the rows it writes, and its refusals. The real
report's rows are measured by hand (docs/recorded-order-policy.md): minutes a row."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "bench" / "plan_fluid_bound.py"
# A U-Net small enough to trace and solve in seconds, under about half its peak (129 MB).
MODEL = {"model": "unet3d", "input": "1x48x48x48", "batch": 1}
LIMIT = 64_000_000


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True,
                          timeout=300)


def test_each_step_is_given_over_the_bound_and_a_mean_below_it_fails(tmp_path: Path):
    # One run (seconds): LMS's defaults claim steps faster than any schedule, the recorder's
    # are plausible.
    row = {"fraction": "1/2", "limit_bytes": LIMIT, "completed": True, "step_ms": 100.0,
           "step_ms_each": [0.001, 0.001],
           "recorded": {"step_ms": 50.0, "step_ms_each": [50.0, 50.0]}}
    path = tmp_path / "report.json"
    path.write_text(json.dumps({"gpu": "h100-pcie", "models": [{**MODEL, "limits": [row]}]}))
    out = tmp_path / "fluid.json"
    done = run(str(path), "--out", str(out))
    assert done.returncode == 1, done.stderr
    (found,) = json.loads(out.read_text())["rows"]
    assert found["problems"] == ["defaults's mean step beats the bound"]
    assert "defaults's mean step beats the bound" in done.stdout
    steps = found["steps"]
    # The clairvoyant schedule on the simulator's link, no slower with both directions always
    # at the duplex rate, and neither beats the bound.
    assert 0 < found["cut_bound_ms"] <= found["fluid_bound_ms"] \
        <= steps["clairvoyant"]["step_ms"] <= steps["clairvoyant at duplex"]["step_ms"]
    assert steps["recorder"]["fluid_efficiency"] == pytest.approx(
        found["fluid_bound_ms"] / 50.0, abs=1e-4)
    assert "unet3d 1/2: fluid" in done.stdout


def test_a_file_that_is_not_a_report_is_refused_in_one_line(tmp_path: Path):
    bad = tmp_path / "report.json"
    bad.write_text("{}")
    done = run(str(bad))
    assert done.returncode == 2 and done.stdout == ""
    assert len(done.stderr.strip().splitlines()) == 1
    assert "is not a model benchmarks' report.json" in done.stderr
    assert run(str(tmp_path / "missing.json")).returncode == 2
