"""The port's state file, its pasteable commands and the report's table cells (no git runs)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from lmsforge.errors import UsageError
from lmsforge.port.report import cell
from lmsforge.port.state import STATE_FILE, FinishJournal, PatchState, PortState, command


def _state(patches_dir: str = "/src/lms forge/patches") -> PortState:
    return PortState(framework="toy", from_tag="v1.0.0", to_tag="v2.0.0",
                     patches_dir=patches_dir, identity_a={"commit": "a" * 40},
                     identity_b={"commit": "b" * 40, "kind": "git"}, from_series_hash="h",
                     from_series_base="a" * 40, created_folder=True, phase="replay",
                     patches=[PatchState("core", "0010-core.patch", "c" * 40, "picked"),
                              PatchState("hook", "0020-hook.patch", "d" * 40)],
                     current="hook", stop_head="e" * 40,
                     finish=FinishJournal(staging="/x/.v2.0.0.port-staging",
                                          folder_existed=False, rr_cache_existed=True,
                                          rr_added=["f" * 40]))


def test_the_state_survives_a_save_and_a_load(tmp_path):
    (tmp_path / ".git").mkdir()
    state = _state()
    state.save(tmp_path)
    assert PortState.load(tmp_path) == state
    assert not list((tmp_path / ".git").glob("*.tmp"))  # written by rename


def test_a_state_of_another_format_is_refused_in_one_line(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / STATE_FILE).write_text(json.dumps({"framework": "toy"}))
    with pytest.raises(UsageError, match="written by another lmsforge version") as info:
        PortState.load(tmp_path)
    assert "\n" not in str(info.value)


def test_no_state_means_no_port(tmp_path):
    (tmp_path / ".git").mkdir()
    with pytest.raises(UsageError, match="no port in progress"):
        PortState.load(tmp_path)


def test_commands_carry_the_patches_folder_and_quote_paths():
    tree = Path("/work/my port")
    words = shlex.split(command(_state(), tree, "continue"))
    assert words == ["lmsforge", "--patches-dir", "/src/lms forge/patches", "port",
                     "--continue", "--into", "/work/my port"]
    assert shlex.split(command(_state(), tree, "skip"))[4:7] == ["--skip", "--reason", "WHY"]


def test_report_cells_stay_on_one_line_with_pipes_escaped():
    assert cell("a | b\nc\r\n  d") == "a \\| b c d"
    assert cell(12) == "12"
