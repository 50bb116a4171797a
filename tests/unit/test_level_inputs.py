"""Each level's build inputs are declared once, checked before the level starts, and shown by
`lmsforge doctor` (issue 11: the TF compile level needed googlemock that only core-cpu got)."""

from __future__ import annotations

import json
import os
import shutil

import pytest

from fixtures import lmsforge
from lmsforge.verify import inputs
from lmsforge.errors import LmsforgeError
from lmsforge.verify.levels import FAIL, LEVELS, PASS, LevelContext, LevelResult, dispatch


def test_declarations_name_real_levels():
    for framework, levels in inputs.LEVEL_INPUTS.items():
        assert set(levels) <= set(LEVELS) - {"apply"}, framework
        for level, items in levels.items():
            assert items, f"{framework} {level} declares nothing"


def test_tensorflow_compile_declares_what_its_test_unit_includes():
    labels = {item.label for item in inputs.declared("tensorflow", "compile")}
    assert {"libgtest-dev", "libgmock-dev", "protobuf-compiler", "tensorflow==2.14.1"} <= labels


def test_pytorch_compile_declares_torchgen_modules_and_cuda():
    items = inputs.declared("pytorch", "compile")
    modules = {i.module for i in items if isinstance(i, inputs.PythonModule)}
    assert {"yaml", "typing_extensions"} <= modules
    assert any(isinstance(i, inputs.CudaRuntime) for i in items)


@pytest.fixture
def toy_level(monkeypatch, tmp_path):
    """A framework `toy` whose compile level records whether it ran."""
    ran = []

    def runner(ctx: LevelContext) -> LevelResult:
        ran.append("compile")
        return LevelResult("compile", PASS, detail="ran")

    said: list[str] = []
    ctx = LevelContext("toy", "v1.0.0", tmp_path, "HEAD", tmp_path / "work", say=said.append)

    def run(*declared: inputs.Input) -> LevelResult:
        monkeypatch.setitem(inputs.LEVEL_INPUTS, "toy", {"compile": tuple(declared)})
        return dispatch("toy", {"compile": runner}, "compile", ctx)

    return run, ran, said


def test_missing_python_module_fails_the_level_before_it_starts(toy_level):
    run, ran, _ = toy_level
    result = run(inputs.PythonModule("lmsforge_absent_module", "lmsforge-absent-dist"))
    assert result.status == FAIL and ran == []
    assert "lmsforge-absent-dist" in result.detail and "\n" not in result.detail


def test_declared_inputs_that_are_present_let_the_level_run(toy_level):
    run, ran, said = toy_level
    result = run(inputs.PythonModule("yaml", "PyYAML"), inputs.Tool("git", "git"),
                 inputs.DebianPackage("git"))
    assert result.status == PASS and ran == ["compile"]
    assert said == []  # nothing to install, nothing printed


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("apt-get") is None,
                    reason="installing Debian packages needs root and apt-get")
def test_installing_a_debian_input_as_root_is_announced_in_one_line(toy_level):
    run, ran, said = toy_level
    result = run(inputs.Tool("lmsforge-absent-tool", "lmsforge-no-such-package"))
    assert said == ["installing Debian packages lmsforge-no-such-package (toy compile needs "
                    "them) with apt-get"]
    assert result.status == FAIL and ran == []
    assert "Unable to locate package lmsforge-no-such-package" in result.detail


def test_a_tool_its_package_does_not_provide_is_named(monkeypatch):
    # git is installed, so there is nothing to install, and the tool is still missing.
    monkeypatch.setitem(inputs.LEVEL_INPUTS, "toy",
                        {"compile": (inputs.Tool("lmsforge-absent-tool", "git"),)})
    with pytest.raises(LmsforgeError, match="toy compile needs lmsforge-absent-tool on PATH"):
        inputs.ensure_level("toy", "compile", inputs.Path("/nonexistent"), print)


def test_doctor_prints_every_level_declaration(tmp_path):
    result = lmsforge("--cache-dir", str(tmp_path / "empty-cache"), "doctor", "--json")
    rows = {row["level"]: row for row in json.loads(result.stdout)["level_inputs"]}
    assert set(rows) == {f"{f} {level}" for f, levels in inputs.LEVEL_INPUTS.items()
                         for level in levels}
    tf = rows["tensorflow compile"]
    assert "libgmock-dev" in tf["detail"] and "tensorflow==2.14.1" in tf["detail"]
    # An empty cache has no wheels yet: the level fetches them itself, which is not an error.
    assert "fetched or installed when the level runs: " in tf["detail"]
    assert tf["status"] in ("warn", "missing")
