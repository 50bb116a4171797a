"""The `compile` level: every C++ translation unit the series touches, plus regenerated protos.

Which units come from the series itself (``git diff --name-only base..HEAD``), so a new hook file
is compiled without anyone updating a list. Each unit gets a plan: a full object compile at -O0,
or ``-fsyntax-only`` where the wheel lacks what linking an object would prove (pybind11 modules),
with the reason written down for the report.

Every unit but the Python bindings is compiled as the wheel was built, a CUDA build:
``GOOGLE_CUDA=1`` against the wheel's CUDA 11.8 headers, GPU sources or not (Bazel's ``tf_copts``
define it for every target of a CUDA build, so a unit's ``#if GOOGLE_CUDA`` side is the one users
run). That is `core-sim`'s command, word for word, so through the object cache that level reuses
these objects instead of compiling them again (measured: its build 79 -> 57 s on 2 cores). The
CPU side of the units `core-cpu` tests is compiled there, at its own flags. The bindings' syntax
check keeps the CPU configuration: nothing reuses it, and the CUDA headers made it 25 -> 40 s.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, Sequence

from lmsforge.verify.tensorflow_tf.toolchain import (CXX, WHEEL_FLAGS, Paths,
                                                     as_the_wheel_was_built, compile_cached,
                                                     include_flags)

PYTHON_PREFIXES = ("tensorflow/python/",)
CUDNN_SHIMMED = ("tensorflow/core/common_runtime/gpu/gpu_device.cc",)
LLVM_SHIMMED_PREFIXES = ("tensorflow/core/kernels/mlir_generated/",)


class Unit(NamedTuple):
    source: str  # path in the tree, or absolute for generated code
    python: bool  # a pybind11 module: checked for syntax only
    note: str  # what was special about this unit, for the report; "" if nothing

    @property
    def syntax_only(self) -> bool:
        # Linking a pybind11 module needs the Python build, which the wheel lacks.
        return self.python


class Compiled(NamedTuple):
    unit: Unit
    ok: bool
    seconds: float
    first_error: str


def plan(touched: Sequence[str]) -> list[Unit]:
    """Compile plans for the touched C++ sources (headers are compiled through them)."""
    units = []
    for path in sorted(touched):
        if not path.endswith(".cc"):
            continue
        python = path.startswith(PYTHON_PREFIXES)
        notes = []
        if path in CUDNN_SHIMMED:
            notes.append("cudnn.h replaced by a version-macro shim (not in the wheel)")
        if path.startswith(LLVM_SHIMMED_PREFIXES):
            notes.append("LLVM's SmallVector and MLIR's CRunnerUtils.h replaced by stand-ins "
                         "(not in the wheel)")
        if python:
            notes.append("syntax only: pybind11 module, linking needs the Python build")
        units.append(Unit(path, python, "; ".join(notes)))
    return units


def is_test(source: str) -> bool:
    return source.endswith("_test.cc")


def compile_units(units: Sequence[Unit], paths: Paths, objects: Path, log: Path,
                  jobs: int) -> list[Compiled]:
    objects.mkdir(parents=True, exist_ok=True)
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda unit: _compile_one(unit, paths, objects), units))
    with open(log, "a") as out:
        for result in results:
            out.write(f"== {result.unit.source}: {'ok' if result.ok else 'FAILED'} "
                      f"({result.seconds:.1f} s){' — ' + result.unit.note if result.unit.note else ''}\n")
            if not result.ok:
                out.write(result.first_error + "\n")
    return results


def command(unit: Unit, paths: Paths, objects: Path) -> list[str]:
    source = Path(unit.source) if Path(unit.source).is_absolute() else paths.tree / unit.source
    if unit.python:  # the CPU configuration: nothing reuses it (module docstring)
        return [CXX, *WHEEL_FLAGS, "-O0", "-w", *include_flags(paths, python=True),
                "-fsyntax-only", str(source)]
    return [*as_the_wheel_was_built(paths), "-c", str(source), "-o",
            str(object_path(objects, unit.source))]


def object_path(objects: Path, source: str) -> Path:
    return objects / (source.strip("/").replace("/", "__") + ".o")


def byte_compile(tree: Path, touched: Sequence[str]) -> list[tuple[str, str]]:
    """Byte-compile the touched Python files; returns (path, error) for each that fails."""
    failures = []
    for path in touched:
        if path.endswith(".py"):
            try:
                compile((tree / path).read_bytes(), path, "exec", dont_inherit=True)
            except SyntaxError as error:
                failures.append((path, f"line {error.lineno}: {error.msg}"))
    return failures


def _compile_one(unit: Unit, paths: Paths, objects: Path) -> Compiled:
    start = time.monotonic()
    proc = compile_cached(command(unit, paths, objects), paths)
    errors = [line for line in proc.stderr.splitlines() if "error" in line]
    first = errors[0] if errors else (proc.stderr.strip().splitlines() or [""])[-1]
    return Compiled(unit, proc.returncode == 0, time.monotonic() - start,
                    "" if proc.returncode == 0 else first)
