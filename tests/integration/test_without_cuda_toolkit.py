"""Without a CUDA toolkit, the levels that need CUDA headers take them (and libcudart) from
NVIDIA's PyPI wheels instead of failing or passing on nothing (issue 11).

The toolkit is hidden for real: a mount namespace puts an empty tmpfs over /usr/local/cuda, so
nothing of it can be read, and CUDA_HOME/CUDA_PATH are unset.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fixtures import lmsforge
from lmsforge.verify.pytorch_c10 import inputs as c10_inputs

pytestmark = pytest.mark.slow

TOOLKIT = Path("/usr/local/cuda")
PROGRAM = r"""
#include <cstdio>
#include <cuda_fp16.h>
#include <cuda_runtime.h>
int main() {
  int devices = -1;
  cudaError_t status = cudaGetDeviceCount(&devices);
  __half half = __float2half(1.5f);  // cuda_fp16.h: what the cuDNN/ATen units include
  std::printf("runtime %d, status %d, half %.1f\n", CUDART_VERSION, static_cast<int>(status),
              __half2float(half));
  return 0;
}
"""


def test_cuda_runtime_from_wheels_compiles_links_and_runs(real_cache_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "no-toolkit"))  # nothing there
    root = c10_inputs.ensure_cuda_toolkit(real_cache_dir)
    assert root == real_cache_dir / "build-inputs" / c10_inputs.CUDA_WHEEL_ROOT
    assert (root / "include" / "crt" / "host_config.h").is_file()  # from nvidia-cuda-crt
    source = tmp_path / "probe.cpp"
    source.write_text(PROGRAM)
    binary = tmp_path / "probe"
    subprocess.run(["g++", "-std=c++17", f"-I{root / 'include'}", str(source), "-o", str(binary),
                    f"-L{root / 'lib64'}", "-lcudart", f"-Wl,-rpath,{root / 'lib64'}"],
                   check=True)
    run = subprocess.run([str(binary)], capture_output=True, text=True, check=True)
    assert run.stdout.startswith("runtime 13000,"), run.stdout  # CUDA 13.0's runtime API
    assert run.stdout.strip().endswith("half 1.5"), run.stdout


def _hidden_toolkit_usable() -> str | None:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        return "needs root and unshare to hide the CUDA toolkit in a mount namespace"
    if not (TOOLKIT / "include" / "cuda_runtime_api.h").is_file():
        return ("no toolkit at /usr/local/cuda to hide (this host has none: the other tests "
                "cover it)")
    probe = subprocess.run(["unshare", "-m", "sh", "-c", f"mount -t tmpfs none {TOOLKIT}"],
                           capture_output=True)
    return None if probe.returncode == 0 else "mount namespaces are not allowed here"


def test_pytorch_levels_pass_with_the_toolkit_hidden(real_cache_dir, tmp_path):
    reason = _hidden_toolkit_usable()
    if reason:
        pytest.skip(reason)
    fetched = lmsforge("--cache-dir", str(real_cache_dir), "fetch", "-f", "pytorch", "-t",
                       "v2.6.0")
    assert fetched.exit_code == 0, fetched.output
    # A cache of its own (its build must not flip the shared one between CUDA roots), sharing
    # the downloaded archive and wheels, and the git import of the archive with its identity
    # (made by the fetch above; importing it again would add a minute and prove nothing here).
    cache = tmp_path / "cache"
    cache.mkdir()
    for shared in ("archives", "build-inputs", "repos", "identities"):
        (cache / shared).symlink_to(real_cache_dir / shared)
    report = tmp_path / "report.json"
    command = [sys.executable, "-m", "lmsforge", "--cache-dir", str(cache), "verify", "-f",
               "pytorch", "-t", "v2.6.0", "--level", "core-cpu", "--report", str(report)]
    script = (f"mount -t tmpfs none {TOOLKIT} && test ! -e {TOOLKIT}/include && "
              f"exec env -u CUDA_HOME -u CUDA_PATH {' '.join(command)}")
    proc = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                          timeout=3600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (entry,) = json.loads(report.read_text())["series"]
    assert [(r["level"], r["status"]) for r in entry["results"]] == [
        ("apply", "pass"), ("compile", "pass"), ("core-cpu", "pass")]
    # The wheels' CUDA root, as lmsforge names it: through this cache's symlink to the shared one.
    wheel_roots = [cache / "build-inputs" / c10_inputs.CUDA_WHEEL_ROOT,
                   real_cache_dir / "build-inputs" / c10_inputs.CUDA_WHEEL_ROOT]
    cmake_cache = (cache / "builds" / "pytorch" / "v2.6.0" / "verify" / "c10-build" /
                   "CMakeCache.txt").read_text()
    assert any(f"CUDAToolkit_INCLUDE_DIR:{kind}={root / 'include'}\n" in cmake_cache
               for kind in ("PATH", "UNINITIALIZED") for root in wheel_roots), cmake_cache[-2000:]
    build_rules = (cache / "builds" / "pytorch" / "v2.6.0" / "verify" / "c10-build" /
                   "build.ninja").read_text()
    assert str(TOOLKIT) not in build_rules
    assert any(str(root / "lib64") in build_rules for root in wheel_roots)
