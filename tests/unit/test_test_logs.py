"""`lmsforge test` keeps the logs of a temporary prefix before it is deleted (finding 12 of the
2026-11-26 hostile-inputs campaign; the command itself: tests/integration/test_test_command.py)."""

from __future__ import annotations

import shutil

from lmsforge.commands.test import keep_logs


def test_logs_outlive_their_prefix_and_each_run_gets_its_own_folder(tmp_path):
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    (prefix / "lms_core_tests.log").write_text("[  PASSED  ] 51 tests.\n")
    never_written = prefix / "lms_cuda_tests.log"
    logs = [prefix / "lms_core_tests.log", never_written]
    first = keep_logs(logs, tmp_path / "logs", "test-pytorch-v2.6.0")
    second = keep_logs(logs, tmp_path / "logs", "test-pytorch-v2.6.0")
    shutil.rmtree(prefix)
    kept = first[logs[0]]
    assert kept.read_text() == "[  PASSED  ] 51 tests.\n"
    assert kept.parent.parent == tmp_path / "logs"
    assert kept.parent.name.startswith("test-pytorch-v2.6.0-")
    assert second[logs[0]].parent != kept.parent
    assert first[never_written] == never_written  # named as it was, nothing invented
