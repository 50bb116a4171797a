"""A venv with the stock ``tensorflow==2.14.1`` CPU wheel for the tensorflow-large-model-support
tests, made once per test cache (``tool_venv.cached_venv``). The package under test is never
installed there: ``tflms_python`` puts the clone's copy first on PYTHONPATH, so a test always runs
the code in this checkout."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tool_venv import cached_venv

ROOT = Path(__file__).resolve().parent.parent
REQUIREMENTS = Path(__file__).parent / "data" / "tflms-requirements.txt"
PACKAGE_ROOT = ROOT / "packages" / "tensorflow-large-model-support"


def tflms_venv(cache: Path) -> Path:
    # The TensorFlow levels keep the wheel in <cache>/wheels: reuse it rather than download again.
    return cached_venv(cache, "tflms", REQUIREMENTS,
                       pip_args=["--find-links", str(cache / "wheels")])


def run_tflms(venv: Path, script: str, *, cwd: Path, env: dict[str, str] | None = None,
              timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Runs SCRIPT (Python source) with the venv's Python and this checkout's package."""
    full_env = {**os.environ, "PYTHONPATH": str(PACKAGE_ROOT), "TF_CPP_MIN_LOG_LEVEL": "2",
                "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    return subprocess.run([str(venv / "bin" / "python"), "-c", script], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)
