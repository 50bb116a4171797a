"""many_models.py's arguments and its recorder columns (CPU only: no torch needed; training
itself needs a GPU and a build of the series)."""

from __future__ import annotations

from pathlib import Path

import pytest

from script_module import load_script

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pytorch" / "many_models.py"


@pytest.fixture(scope="module")
def example():
    return load_script(EXAMPLE)


def test_lms_step_is_an_lms_setting_for_training(example) -> None:
    args = example.parse_args(["--lms-step", "--swapout-threshold", "1.0"])
    assert args.lms_step and example.alloc_conf(args) == "lms:True,lms_swapout_threshold:1.0"
    assert not example.parse_args([]).lms_step


@pytest.mark.parametrize("argv, message", [
    (["--no-lms", "--lms-step"], "the LMS settings need LMS"),
    (["--plan", "--lms-step"], "--lms-step goes with training"),
])
def test_lms_step_where_it_cannot_apply_is_a_usage_error(example, argv, message, capsys) -> None:
    with pytest.raises(SystemExit) as exit_info:
        example.parse_args(argv)
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


def test_the_recorder_columns_are_the_change_over_the_step(example) -> None:
    assert example.recorder_columns({}, {}) == {}
    first = {"steps": 1, "positions_played": 0, "divergences": 0, "moves_asked": 0,
             "moves_started": 0}
    second = {"steps": 2, "positions_played": 500, "divergences": 1, "moves_asked": 40,
              "moves_started": 38}
    assert example.recorder_columns(first, {}) == {
        "recorder_positions_played": 0, "recorder_divergences": 0, "recorder_moves_asked": 0,
        "recorder_moves_started": 0}
    assert example.recorder_columns(second, first) == {
        "recorder_positions_played": 500, "recorder_divergences": 1, "recorder_moves_asked": 40,
        "recorder_moves_started": 38}
