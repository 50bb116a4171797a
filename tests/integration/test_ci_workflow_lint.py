"""The workflows in ci/ against GitHub's workflow schema (check-jsonschema, which vendors it) and
every `run:` block against shellcheck. In the slow tier: shellcheck may have to come from Debian's
archive (unpacked into the test cache, the machine unchanged)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from workflows import EXPRESSION, WORKFLOWS, load

pytestmark = pytest.mark.slow


def _check_jsonschema() -> str:
    """check-jsonschema of the test extra (pyproject.toml), beside this interpreter."""
    found = shutil.which("check-jsonschema", path=str(Path(sys.executable).parent)) or \
        shutil.which("check-jsonschema")
    assert found, "check-jsonschema is missing: pip install -e '.[test]'"
    return found


def _shellcheck(cache_root: Path) -> str:
    """shellcheck on PATH, else Debian's package unpacked into the test cache (no root, the
    machine's apt and dpkg unchanged), the way cross builds get their sysroot."""
    if shutil.which("shellcheck"):
        return shutil.which("shellcheck")  # type: ignore[return-value]
    from lmsforge.packaging import sysroot

    unpacked = sysroot.ensure(cache_root, "amd64", ["shellcheck"], "the workflow test")
    return str(unpacked.path / "usr" / "bin" / "shellcheck")


def test_workflows_match_the_github_schema_and_shellcheck(real_cache_dir):
    """check-jsonschema (PyPI; it vendors SchemaStore's github-workflow schema) on every file,
    shellcheck (Debian `shellcheck`) on every `run:` block with `${{ }}` as a placeholder."""
    checker = _check_jsonschema()
    shellcheck = _shellcheck(real_cache_dir)
    proc = subprocess.run([checker, "--builtin-schema", "vendor.github-workflows",
                           *map(str, WORKFLOWS)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    blocks = 0
    for path in WORKFLOWS:
        for name, job in load(path)["jobs"].items():
            for i, step in enumerate(job["steps"]):
                if "run" not in step:
                    continue
                script = "#!/bin/bash\nset -e\n" + EXPRESSION.sub("_EXPR_", step["run"])
                proc = subprocess.run([shellcheck, "-s", "bash", "-"], input=script,
                                      capture_output=True, text=True, check=False)
                assert proc.returncode == 0, f"{path.name} {name} step {i}:\n{proc.stdout}"
                blocks += 1
    assert blocks >= 10
