"""lmsforge built as a wheel and installed into a folder of its own, once per session.

test_wheel_install checks what the installed copy carries and does; test_core_package runs its
no-CUDA build with this copy (issue 27: a wheel-installed lmsforge builds the core package), so
the session's builds are shared, not repeated.

The wheel is built with pip from a copy of this checkout and installed with pip --target; a
command runs it with only that folder on PYTHONPATH, from a folder with no checkout near it (the
dependencies come from the interpreter running the tests)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_sites: dict[Path, Path] = {}


def _build_isolation_flag() -> list[str]:
    """Without build isolation when this interpreter has a setuptools that can build us (no
    download); otherwise pip fetches one, as any user's pip would."""
    try:
        import setuptools
    except ImportError:
        return []
    return ["--no-build-isolation"] if int(setuptools.__version__.split(".")[0]) >= 64 else []


def install_wheel(root: Path) -> Path:
    """Build lmsforge's wheel under ROOT and install it into ROOT/site; return that folder."""
    if root in _sites:
        return _sites[root]
    source = root / "src"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", "build", "dist", "*.egg-info", "__pycache__", ".pytest_cache", "_bundled"))
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    built = subprocess.run([*pip, "wheel", "--quiet", "--no-deps", *_build_isolation_flag(),
                            "-w", str(root / "dist"), str(source)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (wheel,) = (root / "dist").glob("lmsforge-*.whl")
    assert zipfile.is_zipfile(wheel)
    site = root / "site"
    done = subprocess.run([*pip, "install", "--quiet", "--no-deps", "--target", str(site),
                           str(wheel)], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    _sites[root] = site
    return site


def environment(site: Path) -> dict[str, str]:
    """The environment that runs the copy installed in SITE and nothing of this checkout."""
    env = {k: v for k, v in os.environ.items() if k not in ("LMSFORGE_PATCHES_DIR",)}
    env["PYTHONPATH"] = str(site)
    return env


def imported_from(site: Path, cwd: Path) -> Path:
    """Where `import lmsforge` finds the package in SITE's environment, run in CWD."""
    found = subprocess.run([sys.executable, "-c", "import lmsforge; print(lmsforge.__file__)"],
                           cwd=cwd, env=environment(site), capture_output=True, text=True,
                           timeout=120)
    assert found.returncode == 0, found.stderr
    return Path(found.stdout.strip())
