"""Fast tests of the TensorFlow harness: plans, command lines, level outcomes (no compiler runs)."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from lmsforge.errors import UsageError
from lmsforge.frameworks import tensorflow
from lmsforge.verify.levels import FAIL, LEVELS, SKIPPED, LevelContext
from lmsforge.verify.tensorflow_tf import compile_units, core_cpu, core_sim, inputs, toolchain


def _ctx(tmp_path: Path, tree: Path | None = None) -> LevelContext:
    return LevelContext("tensorflow", "v2.14.1", tree or tmp_path / "tree", "0" * 40,
                        tmp_path / "work", say=lambda line: None)


def _paths(tmp_path: Path) -> toolchain.Paths:
    return toolchain.Paths(tmp_path / "tree", tmp_path / "wheel" / "include", tmp_path / "gen",
                           tmp_path / "shim")


def test_every_level_above_apply_has_a_runner() -> None:
    assert set(tensorflow._RUNNERS) == set(LEVELS) - {"apply"}


def test_unknown_level_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError):
        tensorflow.run_level("nope", _ctx(tmp_path))


def test_gpu_levels_skip_with_reasons(tmp_path: Path) -> None:
    gpu = tensorflow.run_level("core-gpu", _ctx(tmp_path))
    full = tensorflow.run_level("full", _ctx(tmp_path))
    assert gpu.status == SKIPPED
    assert gpu.detail.startswith("no TensorFlow GPU harness on the GPU host image; run the GPU "
                                 "test there from `lmsforge bundle --framework tensorflow`")
    assert full.status == SKIPPED and "Bazel" in full.detail


def test_plan_keeps_cc_files_and_marks_gpu_python_and_shim() -> None:
    touched = ["tensorflow/tsl/framework/bfc_allocator.cc",
               "tensorflow/tsl/framework/bfc_allocator.h",
               "tensorflow/core/common_runtime/gpu/gpu_device.cc",
               "tensorflow/python/tfe_wrapper.cc",
               "tensorflow/python/framework/config.py",
               "tensorflow/core/protobuf/config.proto"]
    units = {u.source: u for u in compile_units.plan(touched)}
    assert sorted(units) == ["tensorflow/core/common_runtime/gpu/gpu_device.cc",
                             "tensorflow/python/tfe_wrapper.cc",
                             "tensorflow/tsl/framework/bfc_allocator.cc"]
    device = units["tensorflow/core/common_runtime/gpu/gpu_device.cc"]
    assert not device.syntax_only and "shim" in device.note
    wrapper = units["tensorflow/python/tfe_wrapper.cc"]
    assert wrapper.syntax_only and wrapper.python and "syntax only" in wrapper.note
    assert units["tensorflow/tsl/framework/bfc_allocator.cc"].note == ""


def test_command_puts_generated_then_tree_then_wheel_headers(tmp_path: Path) -> None:
    paths = _paths(tmp_path)
    unit = compile_units.Unit("tensorflow/core/common_runtime/gpu/gpu_bfc_allocator.cc",
                              False, "")
    cmd = compile_units.command(unit, paths, tmp_path / "obj")
    includes = [arg for arg in cmd if arg.startswith("-I")]
    assert includes[:3] == [f"-I{paths.generated}", f"-I{paths.tree}", f"-I{paths.wheel_include}"]
    for flag in ("-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1", "-DEIGEN_MAX_ALIGN_BYTES=64",
                 "-DGOOGLE_CUDA=1", "-c"):
        assert flag in cmd
    assert f"-I{paths.shim}" in includes


def test_compile_level_compiles_a_unit_as_core_sim_does(tmp_path: Path) -> None:
    """The wheel's CUDA build for every unit, GPU source or not, word for word core-sim's
    command: through the object cache core-sim reuses the compile level's objects."""
    paths = _paths(tmp_path)
    for source in ("tensorflow/tsl/framework/bfc_allocator.cc",
                   "tensorflow/tsl/framework/lms/lms_manager.cc",
                   "tensorflow/core/common_runtime/gpu/gpu_bfc_allocator.cc"):
        [unit] = compile_units.plan([source])
        cmd = compile_units.command(unit, paths, tmp_path / "obj")
        assert "-DGOOGLE_CUDA=1" in cmd, source
        assert cmd == core_sim.command(source, paths, tmp_path / "obj"), source


def test_syntax_only_units_produce_no_object(tmp_path: Path) -> None:
    unit = compile_units.Unit("tensorflow/python/tfe_wrapper.cc", True, "")
    cmd = compile_units.command(unit, _paths(tmp_path), tmp_path / "obj")
    assert "-fsyntax-only" in cmd and "-c" not in cmd and "-o" not in cmd


def test_cudnn_shim_defines_only_version_macros(tmp_path: Path) -> None:
    toolchain.write_cudnn_shim(tmp_path)
    text = (tmp_path / "third_party/gpus/cudnn/cudnn.h").read_text()
    assert {line.split()[1] for line in text.splitlines()} == {
        "CUDNN_MAJOR", "CUDNN_MINOR", "CUDNN_PATCHLEVEL"}


def test_byte_compile_reports_syntax_errors(tmp_path: Path) -> None:
    (tmp_path / "good.py").write_text("x = 1\n")
    (tmp_path / "bad.py").write_text("def f(:\n")
    failures = compile_units.byte_compile(tmp_path, ["good.py", "bad.py", "notes.txt"])
    assert [path for path, _ in failures] == ["bad.py"]


def test_core_cpu_sources_split_tests_from_library(tmp_path: Path) -> None:
    lms = tmp_path / core_cpu.LMS_DIR
    lms.mkdir(parents=True)
    for name in ("lms_manager.cc", "lms_stats.cc", "bfc_allocator_lms_test.cc", "BUILD"):
        (lms / name).write_text("")
    (tmp_path / core_cpu.ALLOCATOR_SOURCES[0]).write_text("")
    sources = core_cpu.find_sources(tmp_path)
    assert sources.tests == [f"{core_cpu.LMS_DIR}/bfc_allocator_lms_test.cc"]
    assert sources.library == [core_cpu.ALLOCATOR_SOURCES[0], f"{core_cpu.LMS_DIR}/lms_manager.cc",
                               f"{core_cpu.LMS_DIR}/lms_stats.cc"]


def test_core_cpu_fails_without_tests(tmp_path: Path) -> None:
    (tmp_path / "tree").mkdir()
    result = tensorflow.run_level("core-cpu", _ctx(tmp_path))
    assert result.status == FAIL and "never passes without tests" in result.detail


def test_unpacked_wheel_takes_only_headers_and_framework_library(tmp_path: Path) -> None:
    wheels = inputs.wheels_dir(tmp_path)
    wheels.mkdir(parents=True)
    wheel = wheels / f"tensorflow-{inputs.TF_VERSION}-cp311-cp311-manylinux_2_17_x86_64.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        archive.writestr("tensorflow/include/tensorflow/core/framework/tensor.h", "// h\n")
        archive.writestr(f"tensorflow/{inputs.FRAMEWORK_LIBRARY}", "elf")
        archive.writestr("tensorflow/python/_pywrap_tensorflow_internal.so", "big")
    unpacked = inputs.unpacked_wheel(tmp_path)
    assert (inputs.include_dir(unpacked) / "tensorflow/core/framework/tensor.h").is_file()
    assert (inputs.library_dir(unpacked) / inputs.FRAMEWORK_LIBRARY).is_file()
    assert not (unpacked / "tensorflow/python").exists()
    wheel.unlink()  # a second call must not need the wheel again
    assert inputs.unpacked_wheel(tmp_path) == unpacked


def test_missing_packages_without_root_is_a_one_line_error(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from lmsforge.upstream import debian

    monkeypatch.setattr(debian, "missing_packages", lambda packages: list(packages))
    monkeypatch.setattr(debian.os, "geteuid", lambda: 1000)
    with pytest.raises(inputs.LmsforgeError, match="apt-get install protobuf-compiler"):
        inputs.ensure_protoc()
