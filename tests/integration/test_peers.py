"""bench/peers.py, the peers of LMS (save_on_cpu, checkpoint) on the oversubscription shapes,
run for real on this machine's CPU torch in its smoke mode: it executes every method, checks
every gradient against the oracle's, and writes a JSON and a plot. Its CUDA path needs a GPU and
says so with exit 4 here; what it measures on a GPU is for run-gpu.sh, never for a test."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from script_module import load_script

REPO = Path(__file__).resolve().parents[2]
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _load() -> ModuleType:
    return load_script(REPO / "bench" / "peers.py", register=True)


peers = _load()


def _assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 20_000


def _small_lms_result(tmp_path: Path) -> Path:
    """An lms_bench_oversub result (the sample's, made-up figures) cut to smoke-run shapes."""
    data: dict[str, Any] = json.loads((REPO / "bench" / "samples" /
                                       "oversubscription.json").read_text())
    data["settings"].update(limit_bytes=2 << 20, activation_bytes=512 << 10, layers_per_limit=4)
    data["results"] = [row for row in data["results"] if row["k"] in (1, 2)]
    path = tmp_path / "oversubscription.json"
    path.write_text(json.dumps(data))
    return path


def test_cpu_smoke_run_writes_its_json_and_plot(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert peers.main(["--device", "cpu", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "CUDA path skipped" in out and "data check: passed" in out
    data = peers.load(tmp_path / "peers.json")
    assert data["smoke"] is True and data["device"]["kind"] == "cpu"
    assert data["methods"] == ["oracle", "save_on_cpu", "checkpoint"]
    assert data["skipped"]["lms"].endswith("CUDA only")
    assert data["settings"]["pin_memory"] is False
    assert [row["k"] for row in data["results"]] == [1, 2]
    for row in data["results"]:
        assert row["layers"] == 4 * row["k"]
        for method in data["methods"]:
            assert row[method]["matches_oracle"] is True
            assert row[method]["step_ms"] > 0 and row[method]["bound_efficiency"] > 0
    _assert_png(tmp_path / "peers.png")
    assert peers.main(["plot", str(tmp_path / "peers.json")]) == 0


def test_an_lms_result_sets_the_shapes_and_joins_the_table(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lms = _small_lms_result(tmp_path)
    assert peers.main(["--device", "cpu", "--out", str(tmp_path / "out"),
                       "--lms-result", str(lms)]) == 0
    data = peers.load(tmp_path / "out" / "peers.json")
    assert data["settings"]["activation_bytes"] == 512 << 10
    assert data["settings"]["layers_per_limit"] == 4
    joined = data["lms_benchmark"]
    assert joined["source"] == str(lms) and joined["simulated"] is False
    source = {row["k"]: row for row in json.loads(lms.read_text())["results"]}
    for row in joined["results"]:
        expected = source[row["k"]]["bound"]["min_traffic_step_ms"] / \
            source[row["k"]]["lms"]["step_ms"]
        assert row["bound_efficiency"] == pytest.approx(expected)
    assert "LMS (lms_bench_oversub)" in capsys.readouterr().out
    _assert_png(tmp_path / "out" / "peers.png")


def test_a_method_whose_gradient_differs_fails_the_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    forward = peers.Workload.forward

    def off_by_a_little(self: Any, method: str, x: Any, layers: int) -> Any:
        y = forward(self, method, x, layers)
        return y * 1.001 if method == "checkpoint" else y

    monkeypatch.setattr(peers.Workload, "forward", off_by_a_little)
    assert peers.main(["--device", "cpu", "--out", str(tmp_path)]) == 1
    assert "checkpoint" in capsys.readouterr().out.split("GRADIENT DIFFERS")[0].splitlines()[-1]
    assert peers.load(tmp_path / "peers.json")["data_ok"] is False


def test_cuda_without_a_device_says_why(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a CUDA device: the GPU path is run-gpu.sh's")
    assert peers.main(["--out", str(tmp_path)]) == 4
    assert "no CUDA device for torch" in capsys.readouterr().err
    assert not (tmp_path / "peers.json").exists()


@pytest.mark.parametrize("extra, message", [
    (["--limit", "8M"], "--lms-result sets the shapes; drop --limit"),
    (["--factors", "1,x"], "not a list of integers"),
])
def test_bad_usage(tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str],
                   message: str) -> None:
    args = ["--device", "cpu", "--out", str(tmp_path), "--lms-result",
            str(_small_lms_result(tmp_path)), *extra]
    if "x" in extra[-1]:
        with pytest.raises(SystemExit) as stopped:
            peers.main(args)
        assert stopped.value.code == 2
    else:
        assert peers.main(args) == 2
    assert message in capsys.readouterr().err


def test_inputs_that_are_not_results_are_refused(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "copy-engine.json"
    other.write_text(json.dumps({"benchmark": "copy-engine", "schema": 1, "results": []}))
    assert peers.main(["--device", "cpu", "--out", str(tmp_path), "--lms-result",
                       str(other)]) == 2
    assert "not an lms_bench_oversub result" in capsys.readouterr().err
    assert peers.main(["plot", str(other)]) == 2
    assert "not a peers result" in capsys.readouterr().err
