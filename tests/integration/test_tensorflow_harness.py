"""The TensorFlow levels on the real patched v2.14.1 tree (slow: real compiles, a 490 MB wheel)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lmsforge import git
from lmsforge.frameworks import tensorflow
from lmsforge.verify.levels import FAIL, PASS, LevelContext

REPO = Path(__file__).resolve().parents[2]
MUTATION = REPO / "tests/data/mutations/tensorflow-v2.14.1/corrupt-host-copy.patch"


@pytest.fixture(scope="module")
def tensorflow_tree(tensorflow_v2141_lms_tree: Path) -> Path:
    """A TensorFlow v2.14.1 work tree with the LMS series applied, tag v2.14.1 at its base."""
    return tensorflow_v2141_lms_tree


@pytest.fixture
def shared_cache(monkeypatch: pytest.MonkeyPatch, real_cache_dir: Path) -> None:
    """Keep the 490 MB wheel between runs: use the machine's test cache, not the per-test one."""
    monkeypatch.setenv("LMSFORGE_CACHE_DIR", str(real_cache_dir))


def _ctx(tree: Path, work: Path) -> LevelContext:
    return LevelContext("tensorflow", "v2.14.1", tree, git.out(["rev-parse", "v2.14.1"], cwd=tree),
                        work, say=print)


@pytest.mark.slow
def test_compile_level_compiles_every_touched_unit(tensorflow_tree: Path, shared_cache: None,
                                                  tmp_path: Path) -> None:
    result = tensorflow.run_level("compile", _ctx(tensorflow_tree, tmp_path))
    assert result.status == PASS, result.detail
    assert result.facts["tus"] >= 10 and result.facts["tus_failed"] == 0
    assert "tfe_wrapper.cc" in " ".join(result.facts["syntax_only"])
    assert any(name.endswith("config.pb.cc") for name in result.facts["units"])


@pytest.mark.slow
def test_core_cpu_level_runs_the_series_tests(tensorflow_tree: Path, shared_cache: None,
                                              tmp_path: Path) -> None:
    result = tensorflow.run_level("core-cpu", _ctx(tensorflow_tree, tmp_path))
    assert result.status == PASS, result.detail
    assert result.facts["tests_passed"] >= 10 and result.facts["tests_failed"] == 0


@pytest.mark.slow
def test_core_cpu_level_catches_a_corrupted_host_copy(tensorflow_tree: Path, shared_cache: None,
                                                      tmp_path: Path) -> None:
    mutant = tmp_path / "mutant"
    subprocess.run(["git", "worktree", "add", "--detach", str(mutant), "HEAD"],
                   cwd=tensorflow_tree, check=True, capture_output=True)
    try:
        subprocess.run(["git", "apply", str(MUTATION)], cwd=mutant, check=True)
        result = tensorflow.run_level("core-cpu", _ctx(mutant, tmp_path / "work"))
        assert result.status == FAIL
        assert "tests failed" in result.detail and "DataIntact" in result.detail
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(mutant)],
                       cwd=tensorflow_tree, capture_output=True)
        shutil.rmtree(mutant, ignore_errors=True)
