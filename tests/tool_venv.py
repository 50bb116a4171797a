"""A private venv of tools from PyPI for the tests (quetz, the vendored conda), made once per test
cache under a lock, named by a hash of what it holds, and reused while that stays the same."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Sequence

import filelock


def cached_venv(cache: Path, name: str, requirements: Path, *, pip_args: Sequence[str] = (),
                files: Sequence[Path] = ()) -> Path:
    """``<cache>/<name>-venv-<hash>`` with REQUIREMENTS installed (plus PIP_ARGS) and FILES
    copied into its bin/; the hash covers the requirements and the files."""
    digest = hashlib.sha256(requirements.read_bytes() +
                            b"".join(f.read_bytes() for f in files)).hexdigest()[:12]
    venv = cache / f"{name}-venv-{digest}"
    cache.mkdir(parents=True, exist_ok=True)
    with filelock.FileLock(str(venv) + ".lock"):
        if (venv / ".complete").is_file():
            return venv
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
                              "--disable-pip-version-check", *pip_args, "-r",
                              str(requirements)], capture_output=True, text=True)
        if pip.returncode != 0:
            tail = " | ".join((pip.stderr or pip.stdout).strip().splitlines()[-3:])
            raise RuntimeError(f"installing {name} into {venv} failed: {tail}")
        for file in files:
            shutil.copy2(file, venv / "bin" / file.name)
        (venv / ".complete").touch()
    return venv
