"""Syntax-compile the translation units the series touches; byte-compile its Python files.

The units are read from the series itself (``git diff --name-only base..HEAD``): every touched
``.cpp`` outside ``c10/`` (which the c10 build compiles for real), test folders and torchgen's
templates, plus
the generated ``RegisterCUDA.cpp``. They are compiled with ``-fsyntax-only`` against the tree,
torchgen's output, c10's generated macros and the headers of ``inputs.WHEELS``: linking them would
need the whole of libtorch. Python files are compiled in memory, so the tree gets no __pycache__.
"""

from __future__ import annotations

import re
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, Sequence

from lmsforge.verify.pytorch_c10 import inputs as c10_inputs

CXX = "g++"
DEFINES = ("-DUSE_CUDA", "-DUSE_CUDNN", "-DFMT_HEADER_ONLY", "-DAT_PER_OPERATOR_HEADERS",
           "-DTORCH_CUDA_BUILD_MAIN_LIB")
# Include folders inside the tree, besides its root and aten/src.
TREE_INCLUDES = ("torch/csrc/api/include", "torch/lib/libshm")
SKIPPED_PREFIXES = ("c10/", "test/")
TIMEOUT_S = 600


class Unit(NamedTuple):
    source: Path  # absolute
    name: str  # for the report: the path in the tree, or "generated: ATen/RegisterCUDA.cpp"


class Compiled(NamedTuple):
    unit: Unit
    ok: bool
    seconds: float
    first_error: str


def touched_files(tree: Path, base: str) -> list[str] | None:
    """The files the series adds or changes; None if TREE has no history back to BASE."""
    proc = subprocess.run(["git", "-C", str(tree), "diff", "--name-only", "--diff-filter=d",
                           f"{base}..HEAD"], capture_output=True, text=True)
    if proc.returncode != 0:
        return None
    return sorted(line for line in proc.stdout.splitlines() if line)


def plan(tree: Path, touched: Sequence[str], generated: Sequence[Path]) -> list[Unit]:
    units = [Unit(tree / path, path) for path in touched
             if path.endswith(".cpp") and not path.startswith(SKIPPED_PREFIXES)
             and "/test/" not in path and "/templates/" not in path]
    return units + [Unit(path, f"generated: {path.parent.name}/{path.name}") for path in generated]


def flags(tree: Path, generated_root: Path, c10_generated: Path,
          header_dirs: Sequence[Path], python_include: Path) -> list[str]:
    includes = [generated_root, tree, tree / "aten/src", c10_generated,
                *(tree / path for path in TREE_INCLUDES),
                c10_inputs.ensure_cuda_toolkit() / "include", *header_dirs, python_include]
    standard = cxx_standard(tree)
    # gcc only warns about C++17 language features under -std=c++14; 1.13.1's own code has none.
    checks = ["-Werror=c++17-extensions"] if standard < 17 else []
    return [f"-std=c++{standard}", *checks, "-fsyntax-only", *DEFINES,
            *(f"-I{path}" for path in includes)]


def cxx_standard(tree: Path) -> int:
    """The tree's C++ standard, as its CMakeLists.txt sets it (14 for 1.x, 17 for 2.x): a series
    that uses a newer language feature must fail here as in the tree's own build."""
    cmakelists = tree / "CMakeLists.txt"
    text = cmakelists.read_text(errors="replace") if cmakelists.is_file() else ""
    match = re.search(r"set\(CMAKE_CXX_STANDARD\s+(\d+)", text)
    return int(match.group(1)) if match else 17


def compile_units(units: Sequence[Unit], cxx_flags: Sequence[str], log: Path,
                  jobs: int) -> list[Compiled]:
    def one(unit: Unit) -> tuple[Compiled, str]:
        cmd = [CXX, *cxx_flags, str(unit.source)]
        start = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S)
            output, ok = proc.stdout + proc.stderr, proc.returncode == 0
        except subprocess.TimeoutExpired:
            output, ok = f"timed out after {TIMEOUT_S} s\n", False
        seconds = time.monotonic() - start
        error = "" if ok else first_error(output)
        return Compiled(unit, ok, seconds, error), f"$ {' '.join(cmd)}\n{output}"

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        done = list(pool.map(one, units))
    with open(log, "a") as stream:
        for compiled, text in done:
            stream.write(text)
            stream.write(f"[{'ok' if compiled.ok else 'FAILED'} {compiled.seconds:.1f} s]\n")
    return [compiled for compiled, _ in done]


def first_error(output: str) -> str:
    lines = output.splitlines()
    for line in lines:
        if "error" in line:
            return line.strip()
    return lines[-1].strip() if lines else "no output"


def byte_compile(tree: Path, touched: Sequence[str]) -> tuple[list[str], list[str]]:
    """Compile the touched Python files in memory; returns (compiled, failures)."""
    compiled, failures = [], []
    for path in touched:
        if not path.endswith(".py"):
            continue
        try:
            compile((tree / path).read_text(), path, "exec", dont_inherit=True)
            compiled.append(path)
        except SyntaxError as error:
            failures.append(f"{path}:{error.lineno}: {error.msg}")
    return compiled, failures
