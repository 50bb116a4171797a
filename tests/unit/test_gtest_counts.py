"""run-gpu.sh's one-line summary of a googletest program (bench/gtest_counts.sh).

The logs in tests/data/gtest-logs are the real output of lms_cuda_tests on the H100
(../shared/evidence/h100-2026-11-22): as landed (aborted in its first test) and with the two
throw-away changes (9 passed, 2 failed, 1 skipped). The filter run-gpu.sh used before printed
an empty summary for both, and for every passing program.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
HELPER = REPO / "bench" / "gtest_counts.sh"
LOGS = REPO / "tests" / "data" / "gtest-logs"


def counts(log: Path) -> str:
    proc = subprocess.run(["bash", "-c", f'. "{HELPER}"; gtest_counts "$1"', "_", str(log)],
                          capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def test_failed_and_skipped_tests_are_counted() -> None:
    assert counts(LOGS / "h100-two-changes.lms_cuda_tests.log") == \
        "9 passed, 2 failed, 1 skipped"


def test_a_program_that_ended_early_says_so() -> None:
    log = LOGS / "h100-as-landed.lms_cuda_tests.log"
    assert counts(log) == f"no test summary (the program ended early; see {log})"


@pytest.mark.parametrize("summary, expected", [
    ("[  PASSED  ] 25 tests.", "25 passed, 0 failed, 0 skipped"),
    ("[  PASSED  ] 1 test.", "1 passed, 0 failed, 0 skipped"),
    ("[  PASSED  ] 0 tests.\n[  FAILED  ] 1 test, listed below:\n[  FAILED  ] A.B",
     "0 passed, 1 failed, 0 skipped"),
])
def test_summary_lines(tmp_path: Path, summary: str, expected: str) -> None:
    log = tmp_path / "program.log"
    log.write_text("[==========] 25 tests from 1 test suite ran. (3 ms total)\n" + summary + "\n")
    assert counts(log) == expected


def test_run_gpu_uses_it() -> None:
    script = (REPO / "bench" / "run-gpu.sh").read_text()
    assert 'summary=$(gtest_counts "$out/$name.log")' in script
    assert '. "$here/bench/gtest_counts.sh"' in script
