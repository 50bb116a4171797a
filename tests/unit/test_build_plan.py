"""Which core variants a build makes on a host, decided for the whole matrix before building."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lmsforge.errors import UsageError
from lmsforge.packaging import plan as build_plan, recipes, toolchain

CUDA_13 = toolchain.CudaToolkit(Path("/opt/cuda-13.0"), (13, 0, 48))
CUDA_12_8 = toolchain.CudaToolkit(Path("/opt/cuda-12.8"), (12, 8))


def _core_matrix(platform: str, overrides: dict | None = None) -> list[dict[str, str]]:
    variants = recipes.load_variants("pytorch", "v2.6.0")
    return recipes.variant_matrix(variants, "core", platform, overrides or {})


def test_core_matrix_lists_cuda_13_for_linux_64_only_and_full_never():
    assert [c["cuda_version"] for c in _core_matrix("linux-64")] == ["None", "12.4", "12.6", "13.0"]
    assert [c["cuda_version"] for c in _core_matrix("linux-ppc64le")] == ["None", "12.4"]
    full = recipes.variant_matrix(recipes.load_variants("pytorch", "v2.6.0"), "full", "linux-64")
    assert {c["cuda_version"] for c in full} == {"None", "12.4", "12.6"}


def test_host_with_cuda_13_builds_cpu_and_cuda_13_and_says_what_it_left_out():
    plan = build_plan.plan("core", "linux-64", _core_matrix("linux-64"), CUDA_13)
    assert [c["cuda_version"] for c in plan.combinations] == ["None", "13.0"]
    [notice] = plan.notices
    assert "13.0 (/opt/cuda-13.0)" in notice and "CPU and CUDA 13.0" in notice
    assert "CUDA 12.4, 12.6 left out" in notice and "\n" not in notice


def test_host_without_a_toolkit_builds_the_cpu_variant_with_one_notice():
    plan = build_plan.plan("core", "linux-64", _core_matrix("linux-64"), None)
    assert [c["cuda_version"] for c in plan.combinations] == ["None"]
    [notice] = plan.notices
    assert notice.startswith("no CUDA toolkit here") and "12.4, 12.6, 13.0 left out" in notice


def test_a_host_toolkit_the_tag_does_not_list_builds_cpu_only():
    plan = build_plan.plan("core", "linux-64", _core_matrix("linux-64"), CUDA_12_8)
    assert [c["cuda_version"] for c in plan.combinations] == ["None"]
    assert "12.8" in plan.notices[0]


def test_ppc64le_builds_cpu_only_here():
    plan = build_plan.plan("core", "linux-ppc64le", _core_matrix("linux-ppc64le"),
                           toolchain.host_cuda("linux-ppc64le"))
    assert [c["cuda_version"] for c in plan.combinations] == ["None"]
    assert plan.notices[0].startswith("no linux-ppc64le CUDA toolkit here")


def test_a_cuda_variant_asked_for_by_name_that_the_host_cannot_build_is_refused():
    matrix = _core_matrix("linux-64", {"cuda_version": ["12.4"]})
    with pytest.raises(UsageError) as refused:
        build_plan.plan("core", "linux-64", matrix, CUDA_13, ["12.4"])
    message = str(refused.value)
    assert "CUDA 12.4" in message and "13.0" in message
    assert "--variant cuda=cpu or --variant cuda=13.0" in message and "\n" not in message


def test_asking_for_what_the_host_has_needs_no_notice():
    matrix = _core_matrix("linux-64", {"cuda_version": ["13.0", "None"]})
    plan = build_plan.plan("core", "linux-64", matrix, CUDA_13, ["13.0", "None"])
    assert [c["cuda_version"] for c in plan.combinations] == ["13.0", "None"]
    assert plan.notices == ()


def test_full_profile_is_built_as_rendered():
    full = recipes.variant_matrix(recipes.load_variants("pytorch", "v2.6.0"), "full", "linux-64")
    assert build_plan.plan("full", "linux-64", full, None).combinations == tuple(full)


def test_host_cuda_reads_the_toolkit_named_by_cuda_home(tmp_path, monkeypatch):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "cuda_runtime_api.h").write_text("/* header */\n")
    (tmp_path / "version.json").write_text(json.dumps({"cuda": {"version": "12.6.85"}}))
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    found = toolchain.host_cuda("linux-64")
    assert found == toolchain.CudaToolkit(tmp_path, (12, 6, 85))
    assert found.matches("12.6") and not found.matches("12.4") and found.short == "12.6"
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "elsewhere"))
    assert toolchain.host_cuda("linux-64") is None
