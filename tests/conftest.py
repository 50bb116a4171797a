import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from fixtures import build_series, make_archive, make_upstream, write_upstream_yaml  # noqa: E402

REPO_ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Each test gets its own cache and no inherited lmsforge settings."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("LMSFORGE_CACHE_DIR", str(cache))
    # Compiled objects are the exception: keyed on content (lmsforge/verify/object_cache.py),
    # they are shared by every test, so a tree built by one test is not compiled again by the
    # next.
    monkeypatch.setenv("LMSFORGE_OBJECT_CACHE_DIR", str(real_test_cache() / "objects"))
    monkeypatch.delenv("LMSFORGE_PATCHES_DIR", raising=False)
    return cache


@pytest.fixture
def toy(tmp_path: Path) -> dict[str, Path]:
    """A toy upstream (git, three tags), an archive of v1.0.0, and a patches dir declaring both."""
    upstream = make_upstream(tmp_path)
    archive = make_archive(upstream, "v1.0.0", tmp_path / "dist")
    patches = tmp_path / "patches"
    write_upstream_yaml(patches, upstream, archive)
    return {"upstream": upstream, "patches": patches, "archive": archive[0],
            "work": tmp_path / "work", "root": tmp_path}


@pytest.fixture
def toy_series(toy: dict[str, Path]) -> dict[str, Path]:
    """The toy setup plus an exported three-patch series for v1.0.0 and its work tree."""
    toy["tree"] = build_series(toy["patches"], toy["work"])
    toy["series"] = toy["patches"] / "toy" / "v1.0.0"
    return toy


def real_test_cache() -> Path:
    """Downloads of real upstream archives, shared by every test run on this machine."""
    env = os.environ.get("LMSFORGE_TEST_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "lmsforge-test"


@pytest.fixture(scope="session")
def real_cache_dir() -> Path:
    path = real_test_cache()
    path.mkdir(parents=True, exist_ok=True)
    return path


def _apply_real_series(framework: str, tag: str, into: Path) -> Path:
    """A work tree of the real upstream tag with the bundled series, made by `lmsforge apply`."""
    from fixtures import lmsforge

    result = lmsforge("--cache-dir", str(real_test_cache()), "apply", "--framework", framework,
                      "--tag", tag, "--into", str(into))
    assert result.exit_code == 0, result.output
    return into


@pytest.fixture(scope="session")
def pytorch_v260_lms_tree(tmp_path_factory: pytest.TempPathFactory, real_cache_dir: Path) -> Path:
    """The real PyTorch v2.6.0 tree with patches/pytorch/v2.6.0 applied (read-only for tests)."""
    return _apply_real_series("pytorch", "v2.6.0", tmp_path_factory.mktemp("pt260") / "tree")


@pytest.fixture(scope="session")
def pytorch_v260_mutation_worktree(pytorch_v260_lms_tree: Path,
                                   tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A git worktree of the v2.6.0 tree for the tests that mutate the series (core-cpu and
    core-sim mutations, the simulated benchmarks), and the one build folder they all share, so
    c10 and c10_cuda are compiled once per session and each mutation recompiles one file."""
    base = tmp_path_factory.getbasetemp()
    tree = base / "pt260-mutated"
    if not tree.exists():
        subprocess.run(["git", "worktree", "add", "--quiet", "--detach", str(tree), "HEAD"],
                       cwd=pytorch_v260_lms_tree, check=True)
    return tree, base / "pt260-mutated-build"


@pytest.fixture
def shared_cache(real_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """LMSFORGE_CACHE_DIR is the real test cache, not the test's own (isolated_env): for tests
    that build in a folder another test built in. The build's commands name the cache (the
    compiler launcher's --cache, the NVML headers under build-inputs/), so with each test's own,
    CMake rewrote every command and ninja ran all 127 compile steps again in each test (40-50 s
    of object-cache hits a mutation)."""
    monkeypatch.setenv("LMSFORGE_CACHE_DIR", str(real_cache_dir))


@pytest.fixture
def pytorch_v260_mutable(pytorch_v260_mutation_worktree: tuple[Path, Path],
                         shared_cache: None) -> tuple[Path, Path]:
    """The shared mutation worktree back at the series, and its build folder, with the shared
    cache."""
    tree, build_dir = pytorch_v260_mutation_worktree
    subprocess.run(["git", "checkout", "--quiet", "--", "."], cwd=tree, check=True)
    return tree, build_dir


@pytest.fixture(scope="session")
def tensorflow_v2141_lms_tree(tmp_path_factory: pytest.TempPathFactory,
                              real_cache_dir: Path) -> Path:
    """The real TensorFlow v2.14.1 tree with patches/tensorflow/v2.14.1 applied (read-only)."""
    if not (REPO_ROOT / "patches" / "tensorflow" / "v2.14.1" / "series.yaml").is_file():
        pytest.skip("no TensorFlow v2.14.1 series in patches/ yet")
    return _apply_real_series("tensorflow", "v2.14.1",
                              tmp_path_factory.mktemp("tf2141") / "tree")


@pytest.fixture(scope="session")
def lmsforge_wheel_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """lmsforge built as a wheel and installed into a folder of its own (tests/wheel_site.py)."""
    import wheel_site

    return wheel_site.install_wheel(tmp_path_factory.mktemp("wheel"))


@pytest.fixture(scope="session")
def core_package_builds(tmp_path_factory: pytest.TempPathFactory, real_cache_dir: Path,
                        lmsforge_wheel_site: Path) -> tuple[Path, dict]:
    """The README's core package builds (no CUDA, host CUDA, ppc64le) into one lms-channel, made
    once per session: test_core_package checks them, the quetz test publishes the CPU package.
    The no-CUDA build runs the wheel-installed lmsforge (test_wheel_install checks it)."""
    from test_core_package import run_builds  # a test module: imported only when needed

    work = tmp_path_factory.mktemp("readme")
    return work, run_builds(work, lmsforge_wheel_site)



# 20 seeds took 532 s of CI's 45 minutes for the two series, one after another; 6 took ~160 s,
# and side by side (sim_seeds.run_seeds, four at a time on 2 CPUs) about 62 s a series. The
# series owners run 20 (`lmsforge verify --level core-sim --sim-seeds 20`).
CORE_SIM_SEEDS = 6


# The highest level CI can run per framework.
CI_LEVEL = {"pytorch": "core-sim", "tensorflow": "core-sim"}


@dataclasses.dataclass
class Verification:
    """One `lmsforge verify` of a bundled series up to CI_LEVEL: its report entry."""

    exit_code: int
    output: str
    entry: dict
    levels: dict[str, dict]


_verifications: dict[tuple[str, str], Verification] = {}


@pytest.fixture(scope="session")
def bundled_verification(tmp_path_factory: pytest.TempPathFactory,
                         real_cache_dir: Path) -> Callable[[str, str], Verification]:
    """`lmsforge verify --level CI_LEVEL` of the bundled series (FRAMEWORK, TAG) in the shared
    real cache, run once per session.

    That one run goes through every level CI can run for the series (apply, compile, core-cpu,
    core-sim), so the tests that check those levels on a bundled series (test_core_sim,
    test_tensorflow_core_sim, test_bundled_series, test_pytorch_codegen,
    test_declared_inputs_cover_builds) read its report and its tree and build folders instead
    of building the same tree again.
    """
    from fixtures import lmsforge

    def verify(framework: str, tag: str) -> Verification:
        key = (framework, tag)
        if key not in _verifications:
            report = tmp_path_factory.mktemp("verify-report") / "verify.json"
            extra = ["--sim-seeds", str(CORE_SIM_SEEDS)]
            result = lmsforge("--cache-dir", str(real_cache_dir), "verify", "--framework",
                              framework, "--tag", tag, "--level", CI_LEVEL[framework], *extra,
                              "--report", str(report))
            print(result.stdout)
            assert report.is_file(), result.output
            (entry,) = json.loads(report.read_text())["series"]
            _verifications[key] = Verification(result.exit_code, result.output, entry,
                                               {r["level"]: r for r in entry["results"]})
        return _verifications[key]

    return verify
