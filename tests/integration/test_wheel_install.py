"""lmsforge installed from its wheel works as a checkout does (issue 27 item 8): the series, the
recipes, the benchmarks and the simulator's C++ travel in the wheel, and an installed lmsforge
finds them, with no checkout anywhere near it.

The wheel is built and installed once per session (tests/wheel_site.py); every command runs from
an empty folder with only the installed copy on PYTHONPATH. The session's no-CUDA core package
build (test_core_package) runs with this copy too, and the last test here checks it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import wheel_site

REPO = Path(__file__).resolve().parents[2]
SHIPPED_BESIDE = ("patches", "recipes", "bench", "docs/gpu.md", "packages")


def _tracked(*paths: str) -> list[str]:
    listed = subprocess.run(["git", "ls-files", "--", *paths], cwd=REPO, capture_output=True,
                            text=True)
    if listed.returncode != 0:
        pytest.skip(f"the files a wheel must carry are git's list, and {REPO} is no git "
                    f"checkout: {listed.stderr.strip()}")
    return listed.stdout.split()


@pytest.fixture(scope="module")
def installed(lmsforge_wheel_site: Path) -> Path:
    """The folder the wheel was installed into (pip install --target; once per session)."""
    return lmsforge_wheel_site


def _lmsforge(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "lmsforge", *args], cwd=cwd,
                          env=wheel_site.environment(site),
                          capture_output=True, text=True, timeout=900)


def test_the_wheel_carries_every_file_a_checkout_has(installed: Path) -> None:
    package = installed / "lmsforge"
    missing = [p for p in _tracked("lmsforge") if not (installed / p).is_file()]
    assert missing == [], f"the wheel leaves out {len(missing)} of lmsforge/: {missing[:10]}"
    shipped = [p for p in _tracked(*SHIPPED_BESIDE)
               if not (package / "_bundled" / p).is_file()]
    assert shipped == [], f"the wheel leaves out {len(shipped)} shipped files: {shipped[:10]}"


def test_an_installed_lmsforge_lists_and_renders_from_its_own_copy(installed: Path,
                                                                   tmp_path: Path) -> None:
    where = _lmsforge(installed, tmp_path, "--cache-dir", str(tmp_path / "cache"), "list",
                      "--json")
    assert where.returncode == 0, where.stderr
    listed = json.loads(where.stdout)
    assert Path(listed["patches_dir"]) == (installed / "lmsforge" / "_bundled" / "patches")
    from_checkout = subprocess.run([sys.executable, "-m", "lmsforge", "--cache-dir",
                                    str(tmp_path / "cache"), "list", "--json"], cwd=REPO,
                                   capture_output=True, text=True, timeout=300,
                                   env={**os.environ, "PYTHONPATH": str(REPO)})
    assert from_checkout.returncode == 0, from_checkout.stderr
    series = {(r["framework"], r["tag"]) for r in listed["series"]}
    assert series == {(r["framework"], r["tag"])
                      for r in json.loads(from_checkout.stdout)["series"]}
    assert ("pytorch", "v2.6.0") in series

    rendered = _lmsforge(installed, tmp_path, "--cache-dir", str(tmp_path / "cache"), "render",
                         "--framework", "pytorch", "--tag", "v2.6.0", "--platform", "linux-64",
                         "--out", str(tmp_path / "recipes"))
    assert rendered.returncode == 0, rendered.stderr
    assert list((tmp_path / "recipes").rglob("recipe.yaml")), rendered.stdout


def test_an_installed_lmsforge_applies_its_series_to_the_real_tree(
        installed: Path, tmp_path: Path, real_cache_dir: Path) -> None:
    applied = _lmsforge(installed, tmp_path, "--cache-dir", str(real_cache_dir), "apply",
                        "--framework", "pytorch", "--tag", "v2.6.0", "--into",
                        str(tmp_path / "tree"))
    assert applied.returncode == 0, applied.stderr
    assert (tmp_path / "tree" / "c10" / "core" / "LargeModelSupport.cpp").is_file()


def test_an_installed_lmsforge_writes_no_series_into_its_own_copy(installed: Path,
                                                                  tmp_path: Path) -> None:
    """An upgrade replaces the installed copy: a series exported there would be lost."""
    before = sorted(p.name for p in (installed / "lmsforge" / "_bundled" / "patches" / "pytorch")
                    .iterdir())
    refused = _lmsforge(installed, tmp_path, "--cache-dir", str(tmp_path / "cache"), "export",
                        "--framework", "pytorch", "--tag", "v2.6.0", "--tree",
                        str(tmp_path / "no-tree"))
    assert refused.returncode == 2, refused.stderr
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "installed with lmsforge" in lines[0] and "--patches-dir" in \
        lines[0], refused.stderr
    assert sorted(p.name for p in (installed / "lmsforge" / "_bundled" / "patches" / "pytorch")
                  .iterdir()) == before


@pytest.mark.slow
def test_an_installed_lmsforge_builds_the_core_package(installed: Path, core_package_builds,
                                                       tmp_path: Path) -> None:
    """The session's no-CUDA build ran `lmsforge build` with only the installed copy importable
    (test_core_package.run_builds), from a folder with no checkout: its recipe and series came
    from the wheel, and it made the CPU core package."""
    work, builds = core_package_builds
    assert wheel_site.imported_from(installed, work) == installed / "lmsforge" / "__init__.py"
    result = builds["no-cuda"]
    assert result.returncode == 0, result.stderr
    assert getattr(result, "lmsforge_site", None) == installed, \
        "the no-CUDA build did not run the wheel-installed lmsforge"
    built = [line for line in result.stdout.splitlines() if line.startswith("built ")]
    assert len(built) == 1 and "linux-64/pytorch-lms-core-2.6.0-cpu_lms_h" in built[0], \
        result.stdout
    assert (work / "lms-channel" / built[0].split()[1]).is_file(), built[0]
