"""The series' Python GPU tests (test/test_cuda_lms.py) load and skip cleanly without CUDA."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow


def test_cuda_lms_tests_skip_cleanly_without_cuda(pytorch_v260_lms_tree, tmp_path):
    torch = pytest.importorskip("torch", reason="an installed torch (any build) runs the file")
    pytest.importorskip("expecttest", reason="torch's test utilities need expecttest")
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: run the file against an LMS build instead")
    test_file = pytorch_v260_lms_tree / "test" / "test_cuda_lms.py"
    # Run from outside the tree so `import torch` finds the installed build, not the sources;
    # without CI in the environment, torch's run_tests() writes no XML reports.
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    proc = subprocess.run([sys.executable, str(test_file), "-v"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    print(output[-2000:])
    assert proc.returncode == 0, output
    ran = re.search(r"^Ran (\d+) tests?", output, re.M)
    assert ran and int(ran.group(1)) >= 10
    assert f"OK (skipped={ran.group(1)})" in output
    assert "CUDA with Large Model Support not available" in output
