"""The TensorFlow GPU bundle's parts that need no TensorFlow, fast: the dependency output it
reads, the stripped library's proof, and its run-gpu.sh's interface (docs/gpu.md)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from lmsforge.errors import LmsforgeError
from lmsforge.verify.tensorflow_tf import gpu_bundle, header_closure, stripped_library
from lmsforge.verify.tensorflow_tf.header_closure import Root


def test_dependency_command_lists_instead_of_compiling() -> None:
    cmd = ["g++", "-std=c++17", "-Ia", "-c", "x.cc", "-o", "x.o"]
    assert header_closure.dependency_command(cmd) == ["g++", "-std=c++17", "-Ia", "-M", "x.cc"]


def test_make_rule_with_continuations_and_escaped_spaces() -> None:
    text = "x.o: x.cc /a/b.h \\\n /a/with\\ space.h \\\n /c/d.h\ny.o: x.cc /e.h\n"
    assert header_closure.parse_make_rule(text) == ["x.cc", "/a/b.h", "/a/with space.h",
                                                    "/c/d.h", "/e.h"]


def test_closure_sorts_files_by_root_and_refuses_strays(tmp_path: Path) -> None:
    outer, stray, src = tmp_path / "outer", tmp_path / "stray", tmp_path / "src"
    inner = outer / "inner"  # roots may nest: a file belongs to the innermost
    for folder in (inner, stray, src):
        folder.mkdir(parents=True)
    (inner / "a.h").write_text("#pragma once\n")
    (outer / "b.h").write_text('#pragma once\n#include "a.h"\n')
    (stray / "c.h").write_text("#pragma once\n")
    (src / "x.cc").write_text('#include <vector>\n#include "b.h"\n')
    cmd = ["g++", f"-I{outer}", f"-I{inner}", "-c", str(src / "x.cc"), "-o", "x.o"]
    roots = [Root("outer", outer), Root("inner", inner), Root("src", src)]
    found = header_closure.closure([cmd], roots, "g++", 1)
    assert found.files == {"outer": {"b.h"}, "inner": {"a.h"}, "src": {"x.cc"}}
    assert any(path.endswith("/vector") for path in found.system)
    (src / "x.cc").write_text(f'#include "{stray / "c.h"}"\n')
    with pytest.raises(LmsforgeError, match=r"c\.h is read by the build but lies under no"):
        header_closure.closure([cmd], roots, "g++", 1)


@pytest.mark.skipif(shutil.which("objcopy") is None, reason="needs binutils")
def test_strip_copy_keeps_what_the_loader_maps(tmp_path: Path) -> None:
    printed = subprocess.run(["g++", "-print-file-name=libstdc++.so"], capture_output=True,
                             text=True).stdout.strip()
    if not Path(printed).is_absolute():
        pytest.skip("g++ names no libstdc++.so")
    library = Path(printed).resolve()
    stripped = tmp_path / "stripped.so"
    stripped_library.strip_copy(library, stripped)
    assert stripped_library.loaded_image(stripped) == stripped_library.loaded_image(library)
    changed = tmp_path / "changed.so"
    subprocess.run(["objcopy", "--remove-section=.note.gnu.build-id", str(library),
                    str(changed)], check=True)
    assert stripped_library.loaded_image(changed) != stripped_library.loaded_image(library)


# ---- run-gpu.sh ---------------------------------------------------------------------------

@pytest.fixture
def script_bundle(tmp_path: Path) -> Path:
    """The bundle's scripts alone: enough for what run-gpu.sh decides before it builds."""
    root = tmp_path / "bundle"
    (root / "probe").mkdir(parents=True)
    shutil.copy2(gpu_bundle.TEMPLATE_DIR / "run-gpu.sh", root / "run-gpu.sh")
    shutil.copy2(gpu_bundle.GTEST_COUNTS, root / "probe" / gpu_bundle.GTEST_COUNTS.name)
    (root / "MANIFEST.json").write_text(json.dumps({"framework": "tensorflow"}))
    return root


def run_gpu(bundle_dir: Path, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(bundle_dir / "run-gpu.sh"), *args], capture_output=True,
                          text=True, env=env, timeout=60)


@pytest.mark.parametrize("args, message", [
    ((), "the results folder is missing"),
    (("out", "--frobnicate"), "unknown option --frobnicate"),
    (("out", "--jobs", "0"), "--jobs needs a positive integer"),
    (("out", "--build-dir"), "--build-dir needs a value"),
    (("a", "b"), "one RESULTS_DIR only"),
])
def test_run_gpu_usage_errors(script_bundle: Path, args: tuple[str, ...], message: str) -> None:
    proc = run_gpu(script_bundle, *args)
    assert proc.returncode == 2
    assert message in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_run_gpu_help(script_bundle: Path) -> None:
    proc = run_gpu(script_bundle, "--help")
    assert proc.returncode == 0
    assert "gpu_lms_test" in proc.stdout and "4  no CUDA device" in proc.stdout


def test_run_gpu_skips_a_host_the_wheel_cannot_run_on(script_bundle: Path,
                                                       tmp_path: Path) -> None:
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    (fake_bin / "uname").write_text("#!/bin/sh\necho aarch64\n")
    (fake_bin / "uname").chmod(0o755)
    results = tmp_path / "results"
    proc = run_gpu(script_bundle, str(results),
                   env={"PATH": f"{fake_bin}:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert proc.returncode == 4, proc.stdout + proc.stderr
    summary = json.loads((results / "summary.json").read_text())
    assert summary["status"] == "skipped" and summary["exit_code"] == 4
    assert summary["reason"] == ("the bundled tensorflow==2.14.1 wheel is for x86_64; this host "
                                 "is aarch64")
    assert json.loads((results / "MANIFEST.json").read_text())["framework"] == "tensorflow"
