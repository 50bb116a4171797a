"""PyTorch's `compile` level on the real patched v2.6.0 tree: torchgen, the pin guard in every
CUDA wrapper, the touched translation units (slow: torchgen and g++ on real sources).

The level's verdict on the bundled series is read from the session's one verify run of it
(conftest.bundled_verification); the mutation runs the codegen check on a clone."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from lmsforge.cache import default_cache_dir
from lmsforge.verify.levels import PASS
from lmsforge.verify.pytorch_codegen import check as codegen_check

REPO = Path(__file__).resolve().parents[2]
MUTATION = REPO / "tests/data/mutations/pytorch-v2.6.0-compile/drop-structured-guard.patch"
# Every translation unit of the series outside c10, and the generated registrations.
EXPECTED_TUS = {
    "aten/src/ATen/DLConvertor.cpp",
    "aten/src/ATen/native/cudnn/Conv_v7.cpp",
    "aten/src/ATen/native/cudnn/Conv_v8.cpp",
    "aten/src/ATen/native/cudnn/RNN.cpp",
    "torch/csrc/StorageMethods.cpp",
    "torch/csrc/cuda/LargeModelSupport.cpp",
    "torch/csrc/cuda/Module.cpp",
    "generated: ATen/RegisterCUDA.cpp",
}

pytestmark = pytest.mark.slow


def _base(tree: Path) -> str:
    return subprocess.run(["git", "-C", str(tree), "rev-parse", "v2.6.0"], capture_output=True,
                          text=True, check=True).stdout.strip()


def test_compile_level_checks_guards_and_compiles_touched_units(bundled_verification) -> None:
    # The compile level of the one verify run of the bundled series (conftest).
    run = bundled_verification("pytorch", "v2.6.0")
    result = run.levels["compile"]
    assert result["status"] == PASS, result["detail"]
    facts = result["facts"]
    # v2.6.0 has 561 unstructured wrappers with a DeviceGuard and 654 structured op classes.
    assert facts["guarded_unstructured"] >= 561
    assert facts["guarded_structured"] == 654
    assert facts["unguarded"] == 0
    assert set(facts["syntax_tus"]) == EXPECTED_TUS
    assert all(tu["ok"] for tu in facts["syntax_tus"].values())
    assert facts["python_files"] >= 6
    assert any("pin guard:" in line and "structured" in line
               for line in run.output.splitlines())
    assert "unstructured" in result["detail"] and "8 of 8 touched TUs" in result["detail"]


def test_dropping_the_structured_guard_fails_the_level(
        pytorch_v260_lms_tree: Path, tmp_path: Path) -> None:
    mutant = tmp_path / "mutant"
    subprocess.run(["git", "clone", "-q", "--shared", str(pytorch_v260_lms_tree), str(mutant)],
                   check=True)
    subprocess.run(["git", "-C", str(mutant), "apply", str(MUTATION)], check=True)
    result = codegen_check.run(mutant, _base(mutant), tmp_path / "work", tmp_path / "unused",
                               default_cache_dir(), 2, tmp_path / "compile.log", say=lambda _: None)
    report = result.guard_report
    assert report is not None
    assert report.structured_guarded == 0
    assert len(report.missing) == 654
    assert result.failures[0].startswith("unguarded wrapper_CUDA_")
    assert "structured wrapper without at::LmsPinGuard" in result.failures[0]
    assert result.compiled == []  # the verdict is in before anything is compiled
