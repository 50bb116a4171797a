"""Every Python module lmsforge's levels import comes from a declared dependency.

A venv made from `pyproject.toml`'s dependencies only (no torch, nothing the developer happens to
have) must import every lmsforge module, the real PyTorch tree's torchgen exactly as the compile
level runs it, and the benchmark driver. The venv is built once per dependency list and kept in
the shared test cache, so this costs seconds after the first run.
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import filelock
import pytest

from conftest import real_test_cache

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]


def declared_dependencies() -> list[str]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    return sorted(project["dependencies"])


@pytest.fixture(scope="session")
def declared_venv() -> Path:
    """A venv holding exactly the declared dependencies (and what they depend on)."""
    deps = declared_dependencies()
    key = hashlib.sha256("\n".join([sys.version, *deps]).encode()).hexdigest()[:16]
    root = real_test_cache() / "declared-venvs"
    venv = root / key
    root.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(root / f"{key}.lock")):
        if not (venv / "complete").is_file():
            staging = root / f"{key}.partial"
            subprocess.run(["rm", "-rf", str(staging), str(venv)], check=True)
            subprocess.run([sys.executable, "-m", "venv", str(staging)], check=True)
            subprocess.run([str(staging / "bin" / "python"), "-m", "pip", "install", "--quiet",
                            *deps], check=True)
            (staging / "complete").write_text("\n".join(deps) + "\n")
            staging.rename(venv)
    return venv


def run_in(venv: Path, code: str, cwd: Path, path: list[Path]) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in path)
    return subprocess.run([str(venv / "bin" / "python"), "-c", code], cwd=cwd, env=env,
                          capture_output=True, text=True)


def test_the_venv_has_only_the_declared_dependencies(declared_venv):
    # Guards the guard: torch would bring typing_extensions and hide a missing declaration.
    proc = run_in(declared_venv, "import importlib.util as u; print(u.find_spec('torch'))",
                  REPO, [])
    assert proc.stdout.strip() == "None", proc.stdout + proc.stderr


def optional_imports() -> set[str]:
    """Top-level names of the optional extras' packages other than the tests' (``plan``'s torch):
    a module may fail to import on these only, since its extra declares them."""
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    names = set()
    for extra, requirements in extras.get("optional-dependencies", {}).items():
        if extra != "test":
            names |= {re.split(r"[<>=!~ \[;]", req, maxsplit=1)[0].replace("-", "_")
                      for req in requirements}
    return names


def test_every_lmsforge_module_imports(declared_venv):
    optional = sorted(optional_imports())
    code = ("import importlib, pkgutil, lmsforge\n"
            f"optional = {optional!r}\n"
            "for m in pkgutil.walk_packages(lmsforge.__path__, 'lmsforge.', onerror=print):\n"
            "    if m.name.endswith('__main__'):\n"
            "        continue\n"
            "    try:\n"
            "        importlib.import_module(m.name)\n"
            "    except ModuleNotFoundError as e:\n"
            "        if (e.name or '').split('.')[0] not in optional:\n"
            "            raise\n"
            "        print('extra', m.name, e.name)\n"
            "print('ok')\n")
    proc = run_in(declared_venv, code, REPO, [REPO])
    lines = proc.stdout.split()
    assert proc.returncode == 0 and lines and lines[-1] == "ok", proc.stdout + proc.stderr


def test_torchgen_of_the_real_tree_imports(declared_venv, pytorch_v260_lms_tree):
    """What the compile level runs (`python -m torchgen.gen` with the tree on the path)."""
    code = "import torchgen.gen, torchgen.dest; print('ok')"
    proc = run_in(declared_venv, code, pytorch_v260_lms_tree, [pytorch_v260_lms_tree])
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr.strip()[-600:]


def test_the_benchmark_driver_imports(declared_venv):
    proc = run_in(declared_venv, "import lmsbench; print('ok')", REPO, [REPO / "bench"])
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr
