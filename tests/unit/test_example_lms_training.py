"""The LMS training example's argument parsing and CSV output (CPU only: no torch needed)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest

from script_module import load_script

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "lms_synthetic_training.py"


@pytest.fixture(scope="module")
def example():
    return load_script(EXAMPLE)


def test_defaults(example) -> None:
    args = example.parse_args([])
    assert args.sizes == [1024, 2048, 4096]
    assert args.lms and args.lms_limit_mb == 0 and args.steps == 10


def test_sizes_and_switches(example) -> None:
    args = example.parse_args(["--sizes", "512,8192", "--no-lms", "--steps", "3", "--csv", "-"])
    assert args.sizes == [512, 8192] and not args.lms and args.steps == 3 and args.csv == "-"


@pytest.mark.parametrize("argv", [["--sizes", "0"], ["--sizes", "a,b"], ["--sizes", ","],
                                  ["--steps", "0"], ["--lms-limit-mb", "-1"],
                                  ["--no-lms", "--lms-limit-mb", "100"]])
def test_bad_arguments_exit_with_usage(example, argv, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        example.parse_args(argv)
    assert exit_info.value.code == 2
    assert "error:" in capsys.readouterr().err


def _stats(**values: int) -> dict[str, int]:
    return {key.replace("__", "."): value for key, value in values.items()}


def test_step_rows_and_summary(example) -> None:
    s0 = {"reclaimed": 1, "reclaimed_bytes": 100, "alloc_distribution.freelist": 5}
    s1 = {"reclaimed": 3, "reclaimed_bytes": 400, "alloc_distribution.freelist": 9,
          "allocated_bytes.all.current": 1000, "pinned_bytes.all.current": 600,
          "host_bytes.current": 300}
    s2 = {"reclaimed": 4, "reclaimed_bytes": 500, "alloc_distribution.freelist": 10,
          "allocated_bytes.all.current": 800, "pinned_bytes.all.current": 700,
          "host_bytes.current": 500}
    rows = [example.step_row(64, 10, 0, 2.0, 1.5, s0, s1),
            example.step_row(64, 10, 1, 0.5, 1.25, s1, s2),
            example.step_row(64, 10, 2, 0.7, 1.0, s2, s2)]
    assert rows[0]["reclaimed"] == 2 and rows[0]["reclaimed_bytes"] == 300
    assert rows[0]["alloc_distribution_freelist"] == 4
    assert rows[0]["pinned_bytes_all_current"] == 600
    assert rows[2]["reclaimed"] == 0

    summary = example.summary_row(64, 10, rows)
    assert summary["kind"] == "summary" and summary["status"] == "ok"
    assert summary["step"] == 3
    assert summary["seconds"] == 0.6  # median without the warm-up step
    assert summary["reclaimed_bytes"] == 400
    assert summary["allocated_bytes_all_current"] == 1000
    assert summary["host_bytes_current"] == 500
    assert summary["loss"] == 1.0

    stream = io.StringIO()
    example.write_rows(stream, [*rows, summary])
    parsed = list(csv.DictReader(io.StringIO(stream.getvalue())))
    assert [row["kind"] for row in parsed] == ["step", "step", "step", "summary"]
    assert list(parsed[0]) == list(example.COLUMNS)


def test_summary_of_a_size_that_ran_out_of_memory(example) -> None:
    summary = example.summary_row(8192, 0, [], status="oom")
    assert summary["status"] == "oom" and summary["seconds"] == "" and summary["reclaimed"] == 0
