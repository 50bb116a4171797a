"""A real conda client for the tests: conda 24.7.1, vendored by conda-lock, from PyPI.

The venv is made once per machine from ``tests/data/conda-requirements.txt`` in the shared test
cache (keyed by a hash of the pins and of the launcher), like ``quetz_venv``. ``Conda`` runs it
with a private home, condarc and package cache, the classic solver (the libmamba solver is not
on PyPI) and ``CONDA_OVERRIDE_CUDA`` always set: conda's CUDA detector spawns a process that
would not get the launcher's import alias, and the tests choose what "the driver" says anyway.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tool_venv import cached_venv

DATA = Path(__file__).parent / "data"
REQUIREMENTS = DATA / "conda-requirements.txt"
LAUNCHER = DATA / "conda_launcher.py"


def conda_venv(cache: Path) -> Path:
    """The venv holding the vendored conda (made on first use, from PyPI)."""
    return cached_venv(cache, "conda", REQUIREMENTS, pip_args=["--no-deps"], files=[LAUNCHER])


class Conda:
    """``Conda(venv, home)("create", ...)``: conda in VENV, its home and package cache in HOME."""

    def __init__(self, venv: Path, home: Path) -> None:
        self.venv, self.home = venv, home
        home.mkdir(parents=True, exist_ok=True)
        self.condarc = home / "condarc"
        # no channel of its own: a command names its channel with --override-channels -c
        self.condarc.write_text("channels: []\ndefault_channels: []\nauto_update_conda: false\n"
                                "notify_outdated_conda: false\nreport_errors: false\n"
                                "number_channel_notices: 0\n")

    def env(self, cuda: str) -> dict[str, str]:
        keep = ("PATH", "LANG", "LC_ALL", "TMPDIR")
        env = {k: v for k, v in os.environ.items() if k in keep}
        env.update(HOME=str(self.home), XDG_CONFIG_HOME=str(self.home / ".config"),
                   CONDARC=str(self.condarc), CONDA_PKGS_DIRS=str(self.home / "pkgs"),
                   CONDA_ENVS_DIRS=str(self.home / "envs"), CONDA_SOLVER="classic",
                   CONDA_OVERRIDE_CUDA=cuda, PYTHONNOUSERSITE="1", NO_PROXY="*")
        return env

    def __call__(self, *args: str, cuda: str, timeout: int = 600) -> subprocess.CompletedProcess:
        return subprocess.run([str(self.venv / "bin" / "python"),
                               str(self.venv / "bin" / "conda_launcher.py"), *args],
                              env=self.env(cuda), capture_output=True, text=True, timeout=timeout)


def installed_records(prefix: Path) -> dict[str, dict]:
    """The conda-meta/*.json records of PREFIX by package name."""
    records = (json.loads(p.read_text()) for p in (prefix / "conda-meta").glob("*.json"))
    return {r["name"]: r for r in records}
