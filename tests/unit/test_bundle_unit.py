"""The GPU bundle's CPU-side parts, fast: layout, manifest, size limit, run-gpu.sh without CUDA,
the benchmark driver's argument checks and the report/plot step (docs/gpu.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from types import ModuleType

import pytest

from fixtures import commit_patch
from script_module import load_script
from lmsforge.series import manifest as series_mod
from lmsforge.verify import bundle
from lmsforge.commands import bundle as bundle_command
from lmsforge.errors import LmsforgeError, UsageError
from lmsforge.options import Options

REPO = Path(__file__).resolve().parents[2]
SAMPLES = REPO / "bench" / "samples"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def load_lmsbench() -> ModuleType:
    return load_script(REPO / "bench" / "lmsbench.py")


lmsbench = load_lmsbench()


def add_c10(tree: Path) -> None:
    (tree / "c10" / "core").mkdir(parents=True)
    (tree / "c10" / "core" / "LargeModelSupport.h").write_text("#pragma once\n")
    (tree / "LICENSE").write_text("toy licence\n")


@pytest.fixture
def c10_tree(toy_series: dict[str, Path]) -> Path:
    """The toy work tree plus one more series commit that adds a c10/ folder."""
    tree = toy_series["tree"]
    commit_patch(tree, "c10-core", "new-files", "Add a c10 core", add_c10)
    return tree


@pytest.fixture
def fake_inputs(tmp_path: Path) -> bundle.BuildInputs:
    root = tmp_path / "inputs"
    (root / "include" / "fmt").mkdir(parents=True)
    (root / "include" / "fmt" / "format.h").write_text("// fmt\n")
    (root / "include" / "cpuinfo.h").write_text("// cpuinfo\n")
    (root / "lib").mkdir()
    (root / "lib" / "libcpuinfo.so.0").write_bytes(b"\x7fELF")
    (root / "googletest" / "googletest" / "src").mkdir(parents=True)
    (root / "googletest" / "CMakeLists.txt").write_text("project(googletest)\n")
    (root / "nvml").mkdir()
    (root / "nvml" / "nvml.h").write_text("// nvml\n")
    return bundle.BuildInputs(root / "include", root / "include" / "cpuinfo.h",
                              root / "lib" / "libcpuinfo.so.0", root / "googletest",
                              root / "nvml" / "nvml.h")


def test_folder_bundle_layout_and_manifest(c10_tree: Path, fake_inputs: bundle.BuildInputs,
                                           tmp_path: Path) -> None:
    dest = tmp_path / "gpu-bundle"
    result = bundle.write_bundle(c10_tree, dest, tarball=False, build_inputs=fake_inputs)
    assert result.path == dest
    for rel in ("run-gpu.sh", "MANIFEST.json", "tree/c10/core/LargeModelSupport.h",
                "tree/LICENSE", "lmsforge/verify/pytorch_c10/CMakeLists.txt",
                "bench/CMakeLists.txt", "bench/copy_engine.cpp", "bench/oversubscription.cpp",
                "bench/lmsbench.py", "deps/fmt/include/fmt/format.h",
                "deps/cpuinfo/include/cpuinfo.h", "deps/cpuinfo/lib/libcpuinfo.so.0",
                "deps/googletest/CMakeLists.txt", "deps/nvml/include/nvml.h", "docs/gpu.md"):
        assert (dest / rel).is_file(), rel
    assert not (dest / "bench" / "run-gpu.sh").exists()
    assert os.access(dest / "run-gpu.sh", os.X_OK)
    assert not list(dest.rglob("__pycache__"))

    manifest = json.loads((dest / "MANIFEST.json").read_text())
    assert manifest == result.manifest
    assert manifest["framework"] == "toy" and manifest["tag"] == "v1.0.0"
    patches = sorted((dest / "patches").glob("*.patch"))
    assert [p.name for p in patches] == manifest["patches"]
    assert len(patches) == 4 and patches[-1].name == "0040-c10-core.patch"
    assert manifest["series_hash"] == series_mod.series_hash(patches)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=c10_tree, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert manifest["tree"]["head"] == head
    assert manifest["tree"]["upstream"]["framework"] == "toy"
    assert len(manifest["tree"]["c10_sha256"]) == 64
    assert manifest["exit_codes"]["4"].startswith("no CUDA")
    assert result.files == sum(1 for p in dest.rglob("*") if p.is_file())
    assert result.size_bytes == sum(p.stat().st_size for p in dest.rglob("*") if p.is_file())


def test_dirty_tree_is_refused(c10_tree: Path, fake_inputs: bundle.BuildInputs,
                               tmp_path: Path) -> None:
    (c10_tree / "c10" / "core" / "LargeModelSupport.h").write_text("// edited\n")
    with pytest.raises(UsageError, match="uncommitted changes"):
        bundle.write_bundle(c10_tree, tmp_path / "b", tarball=False, build_inputs=fake_inputs)


def test_tarball_bundle(c10_tree: Path, fake_inputs: bundle.BuildInputs,
                        tmp_path: Path) -> None:
    dest = tmp_path / "out" / "lms-gpu.tar.gz"
    result = bundle.write_bundle(c10_tree, dest, tarball=True, build_inputs=fake_inputs)
    assert result.path == dest and dest.is_file()
    with tarfile.open(dest) as archive:
        names = archive.getnames()
        entry = archive.getmember("lms-gpu/run-gpu.sh")
        assert entry.mode & 0o111
        manifest = json.load(archive.extractfile("lms-gpu/MANIFEST.json"))  # type: ignore
    assert all(name.startswith("lms-gpu") for name in names)
    assert manifest["series_hash"] == result.manifest["series_hash"]
    assert dest.stat().st_size < bundle.MAX_BUNDLE_BYTES


def test_refusals(c10_tree: Path, fake_inputs: bundle.BuildInputs, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="must end in .tar.gz"):
        bundle.write_bundle(c10_tree, tmp_path / "x.tgz", tarball=True, build_inputs=fake_inputs)
    occupied = tmp_path / "occupied"
    occupied.mkdir()
    (occupied / "file").write_text("x")
    with pytest.raises(UsageError, match="exists"):
        bundle.write_bundle(c10_tree, occupied, tarball=False, build_inputs=fake_inputs)
    plain = tmp_path / "plain"
    plain.mkdir()
    with pytest.raises(UsageError, match="not an lmsforge work tree"):
        bundle.write_bundle(plain, tmp_path / "b", tarball=False, build_inputs=fake_inputs)


def test_no_c10_folder_is_refused(toy_series: dict[str, Path],
                                  fake_inputs: bundle.BuildInputs, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no c10/"):
        bundle.write_bundle(toy_series["tree"], tmp_path / "b", tarball=False,
                            build_inputs=fake_inputs)


@pytest.mark.parametrize("tarball", [False, True])
def test_size_limit_writes_nothing(c10_tree: Path, fake_inputs: bundle.BuildInputs,
                                   tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   tarball: bool) -> None:
    monkeypatch.setattr(bundle, "MAX_BUNDLE_BYTES", 1000)
    dest = tmp_path / ("b.tar.gz" if tarball else "b")
    with pytest.raises(LmsforgeError, match="over the 0 MB"):
        bundle.write_bundle(c10_tree, dest, tarball=tarball, build_inputs=fake_inputs)
    assert not dest.exists()


def test_bundle_command_refuses_frameworks_without_a_gpu_level(tmp_path: Path) -> None:
    opts = Options.resolve(REPO / "patches", tmp_path / "cache", 1)
    with pytest.raises(UsageError, match="supports pytorch, tensorflow; mxnet has no GPU level"):
        bundle_command.run(opts, "mxnet", "v1.9.1", tmp_path / "b", False)


# ---- run-gpu.sh ---------------------------------------------------------------------------

@pytest.fixture
def written_bundle(c10_tree: Path, fake_inputs: bundle.BuildInputs, tmp_path: Path) -> Path:
    return bundle.write_bundle(c10_tree, tmp_path / "bundle", tarball=False,
                               build_inputs=fake_inputs).path


def run_gpu(bundle_dir: Path, *args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(bundle_dir / "run-gpu.sh"), *args], capture_output=True,
                          text=True, env=env, timeout=60)


def test_run_gpu_without_cuda_toolkit_says_so(written_bundle: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    env = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(tmp_path / "no-cuda"),
           "HOME": str(tmp_path)}
    if shutil.which("nvcc", path=env["PATH"]):
        pytest.skip("nvcc is on /usr/bin here")
    proc = run_gpu(written_bundle, str(results), env=env)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert "run-gpu: skipped: no CUDA toolkit" in proc.stdout
    summary = json.loads((results / "summary.json").read_text())
    assert summary["status"] == "skipped" and summary["exit_code"] == 4
    assert "no CUDA toolkit" in summary["reason"]
    assert json.loads((results / "MANIFEST.json").read_text())["framework"] == "toy"


@pytest.mark.parametrize("args, message", [
    ((), "the results folder is missing"),
    (("out", "--frobnicate"), "unknown option --frobnicate"),
    (("out", "--jobs", "many"), "--jobs needs a positive integer"),
    (("out", "--jobs"), "--jobs needs a value"),
    (("a", "b"), "one RESULTS_DIR only"),
    (("out", "--replays"), "--replays needs the model benchmarks' folder"),
    (("out", "--replays", "/nonexistent/models"), "--replays /nonexistent/models: no such folder"),
])
def test_run_gpu_usage_errors(written_bundle: Path, args: tuple[str, ...], message: str) -> None:
    proc = run_gpu(written_bundle, *args)
    assert proc.returncode == 2
    assert message in proc.stderr


def test_run_gpu_help(written_bundle: Path) -> None:
    proc = run_gpu(written_bundle, "--help")
    assert proc.returncode == 0
    assert "RESULTS_DIR" in proc.stdout and "4  no CUDA toolkit or no CUDA device" in proc.stdout


# ---- bench/lmsbench.py ----------------------------------------------------------------------

@pytest.mark.parametrize("args, message", [
    ([], "required"),
    (["copy"], "--bin-dir"),
    (["copy", "--bin-dir", "b"], "--out"),
    (["warp"], "invalid choice"),
    (["copy", "--bin-dir", "b", "--out", "o", "--", "--out", "x"], "--out before --"),
    (["plot", "x.json", "--", "--sizes", "4K"], "no program options"),
])
def test_driver_argument_errors(args: list[str], message: str,
                                capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        lmsbench.main(args)
    assert stopped.value.code == 2
    assert message in capsys.readouterr().err


def test_driver_without_built_programs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert lmsbench.main(["copy", "--bin-dir", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "lms_bench_copy not found" in capsys.readouterr().err


def test_plot_refuses_other_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    other = tmp_path / "other.json"
    other.write_text('{"benchmark": "something-else", "schema": 1, "results": []}')
    assert lmsbench.main(["plot", str(other)]) == 2
    assert "not a benchmark result" in capsys.readouterr().err
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    assert lmsbench.main(["plot", str(broken)]) == 2


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC)
    assert len(data) > 20_000  # two panels with lines, not an empty canvas
    import matplotlib.image

    height, width = matplotlib.image.imread(str(path)).shape[:2]
    assert width > 600 and height > 600


@pytest.mark.parametrize("stem", ["copy-engine", "oversubscription"])
def test_plot_and_report_from_sample(stem: str, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    sample = tmp_path / f"{stem}.json"
    shutil.copy(SAMPLES / f"{stem}.json", sample)
    assert lmsbench.main(["plot", str(sample)]) == 0
    assert_png(sample.with_suffix(".png"))
    out = capsys.readouterr().out
    assert "data check: passed" in out
    data = lmsbench.load(sample)
    for row in data["results"]:
        label = lmsbench.size_label(row["size"]) if stem == "copy-engine" else str(row["layers"])
        assert label in out


def test_report_flags_goal_misses_and_bad_data() -> None:
    data = json.loads((SAMPLES / "copy-engine.json").read_text())
    big = next(row for row in data["results"] if row["size"] == 64 * 1024 * 1024)
    big["ratio_out"] = 0.5
    big["data_ok"] = False
    data["data_ok"] = False
    text = lmsbench.report(data)
    line = next(line for line in text.splitlines() if line.strip().startswith("64M"))
    assert "below the 0.9 goal" in line and "DATA MISMATCH" in line
    small = next(line for line in text.splitlines() if line.strip().startswith("4K"))
    assert "below" not in small  # under 16 MiB the goal does not apply
    assert text.endswith("data check: FAILED")


FAKE_PROGRAM = """#!/bin/sh
# Stands in for lms_bench_copy: copies the sample to --out, exits with $FAKE_EXIT.
while [ $# -gt 0 ]; do
  case "$1" in --out) out=$2; shift ;; *) echo "arg $1" ;; esac
  shift
done
[ "${FAKE_EXIT:-0}" = 4 ] && { echo "no CUDA device (fake)"; exit 4; }
cp "$SAMPLE" "$out"
exit "${FAKE_EXIT:-0}"
"""


@pytest.mark.parametrize("exit_code, plotted", [(0, True), (1, True), (4, False)])
def test_driver_runs_program_then_plots(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        capsys: pytest.CaptureFixture[str], exit_code: int,
                                        plotted: bool) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    program = bin_dir / "lms_bench_copy"
    program.write_text(FAKE_PROGRAM)
    program.chmod(0o755)
    monkeypatch.setenv("SAMPLE", str(SAMPLES / "copy-engine.json"))
    monkeypatch.setenv("FAKE_EXIT", str(exit_code))
    out = tmp_path / "results"
    code = lmsbench.main(["copy", "--bin-dir", str(bin_dir), "--out", str(out), "--",
                          "--sizes", "16M"])
    assert code == exit_code
    log = (out / "copy-engine.log").read_text()
    assert "arg --sizes" in log and "arg 16M" in log
    assert (out / "copy-engine.png").is_file() == plotted
    if plotted:
        assert_png(out / "copy-engine.png")
    else:
        assert "no CUDA device" in capsys.readouterr().out


def test_samples_say_they_are_not_measurements() -> None:
    for sample in SAMPLES.glob("*.json"):
        assert "not a measurement" in lmsbench.load(sample)["device"]["name"]


def test_python_version_is_enough_for_the_driver() -> None:
    # The driver runs on GPU hosts with their own Python; it must not need lmsforge.
    source = (REPO / "bench" / "lmsbench.py").read_text()
    assert "import lmsforge" not in source and "from lmsforge" not in source
    assert sys.version_info >= (3, 8)


def test_compare_puts_two_results_side_by_side(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    reference = SAMPLES / "oversubscription.json"
    data = json.loads(reference.read_text())
    data["simulated"] = True
    data["timing"] = {"clock": "virtual", "calibration": {"name": "h100-2026-11-22"}}
    data["settings"]["limit_bytes"] //= 2
    data["results"] = [row for row in data["results"] if row["k"] != 4]
    for row in data["results"]:
        row["bound_efficiency"] *= 1.1
    mine = tmp_path / "simulated.json"
    mine.write_text(json.dumps(data))
    assert lmsbench.main(["compare", str(mine), str(reference)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "SIMULATED, calibration h100-2026-11-22: not a GPU result" in lines[0]
    assert lines[2].startswith("  settings that differ: limit_bytes 536870912 vs 1073741824")
    rows = [line.split() for line in lines[4:]]
    assert [row[0] for row in rows] == ["1", "2", "8"]  # k = 4 is not in both
    assert all(row[-1] == "+10.0%" for row in rows)  # bound efficiency, the last column
    assert all(row[3] == "+0.0%" for row in rows)  # the same LMS step times


def test_compare_refuses_two_different_benchmarks(capsys: pytest.CaptureFixture[str]) -> None:
    assert lmsbench.main(["compare", str(SAMPLES / "copy-engine.json"),
                          str(SAMPLES / "oversubscription.json")]) == 2
    assert "cannot compare copy-engine with oversubscription" in capsys.readouterr().err
