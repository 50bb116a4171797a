"""The `core-cpu` level: the series' C++ tests, built from the tree and run on the CPU.

Two test programs, each linked against the wheel's ``libtensorflow_framework.so.2``; symbols
defined in a program take precedence over the library's unpatched copies:

- ``bfc_allocator_lms_test``: the patched ``tsl::BFCAllocator`` and the LMS core, driven
  directly (``tensorflow/tsl/framework/lms/*_test.cc``);
- ``lms_tensor_test``: the same plus the patched ``tensor.cc``, ``lms_tensor.cc``,
  ``op_kernel.cc`` and the MLIR-generated kernels' ``base_op.cc``, so real Tensors, slices,
  ``TensorBuffer::data()``, ``OpKernelContext`` pins and MLIR output buffers are under test
  (``tensorflow/core/framework/lms_*_test.cc``). ``tensor.cc`` is compiled
  without its variant-decoder registration, which the library has already made (a second one
  aborts at start-up).

Each test supplies its own host sub-allocator and host LMS backend, so "device memory" is host
memory. Objects compiled for both programs are compiled once.
"""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, Sequence

from lmsforge.errors import CheckFailed
from lmsforge.verify.tensorflow_tf.toolchain import (CXX, WHEEL_FLAGS, Paths, compile_cached,
                                                     include_flags)

LMS_DIR = "tensorflow/tsl/framework/lms"
FRAMEWORK_DIR = "tensorflow/core/framework"
ALLOCATOR_SOURCES = ("tensorflow/tsl/framework/bfc_allocator.cc",
                     "tensorflow/tsl/framework/bfc_allocator_lms.cc")
FRAMEWORK_SOURCES = ("tensorflow/core/framework/tensor.cc",
                     "tensorflow/core/framework/lms_tensor.cc",
                     "tensorflow/core/framework/op_kernel.cc",
                     # the TensorBuffer of MLIR-generated kernels' outputs (LLVM stand-ins)
                     "tensorflow/core/kernels/mlir_generated/base_op.cc")
TENSOR_SOURCE = FRAMEWORK_SOURCES[0]
TEST_BINARY = "bfc_allocator_lms_test"
TENSOR_TEST_BINARY = "lms_tensor_test"
TENSOR_WITHOUT_REGISTRATION = """\
// tensor.cc without its variant decoder registration: the framework library
// this test links against has made it already, and a second one aborts.
#include "tensorflow/core/framework/variant_op_registry.h"
#undef REGISTER_UNARY_VARIANT_DECODE_FUNCTION
#define REGISTER_UNARY_VARIANT_DECODE_FUNCTION(T, type_name) \\
  static_assert(true, "")
#include "tensorflow/core/framework/tensor.cc"
"""


class Program(NamedTuple):
    name: str
    library: list[str]  # tree sources under test
    tests: list[str]


class Sources(NamedTuple):
    programs: list[Program]

    @property
    def tests(self) -> list[str]:
        return [test for program in self.programs for test in program.tests]

    @property
    def library(self) -> list[str]:
        seen: dict[str, None] = {}
        for program in self.programs:
            seen.update(dict.fromkeys(program.library))
        return list(seen)


def find_sources(tree: Path) -> Sources:
    lms = sorted(p for p in (tree / LMS_DIR).glob("*.cc")) if (tree / LMS_DIR).is_dir() else []
    tests = [str(p.relative_to(tree)) for p in lms if p.name.endswith("_test.cc")]
    core = [str(p.relative_to(tree)) for p in lms if not p.name.endswith("_test.cc")]
    allocator = [s for s in ALLOCATOR_SOURCES if (tree / s).is_file()]
    programs = [Program(TEST_BINARY, allocator + core, tests)] if tests else []
    framework_tests = sorted(str(p.relative_to(tree))
                             for p in (tree / FRAMEWORK_DIR).glob("lms_*_test.cc"))
    if framework_tests:
        framework = [s for s in FRAMEWORK_SOURCES if (tree / s).is_file()]
        programs.append(Program(TENSOR_TEST_BINARY, allocator + core + framework,
                                framework_tests))
    return Sources(programs)


def build(sources: Sources, paths: Paths, library_dir: Path, out: Path, log: Path,
          jobs: int) -> list[Path]:
    """Compile and link every test program; raises CheckFailed naming the first error."""
    units = list(dict.fromkeys([*sources.library, *sources.tests]))
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        compiled = list(pool.map(lambda source: compile_source(source, paths, out), units))
    with open(log, "a") as out_log:
        for source, proc in zip(units, compiled):
            out_log.write(f"== compile {source}: rc={proc.returncode}\n{proc.stderr}")
    for source, proc in zip(units, compiled):
        if proc.returncode != 0:
            raise CheckFailed(f"{source} does not compile: {_first_error(proc.stderr)}; "
                              f"full log: {log}")
    return link_all(sources.programs, library_dir, out, log, jobs)


def link_all(programs: Sequence[Program], library_dir: Path, out: Path, log: Path,
             jobs: int) -> list[Path]:
    """Link PROGRAMS side by side (each link is one process on one core); the binaries in order.
    The first failure raises, as a link one after another would."""
    with ThreadPoolExecutor(max_workers=max(1, min(jobs, len(programs)))) as pool:
        futures = [pool.submit(link, program, library_dir, out, log) for program in programs]
    return [future.result() for future in futures]


def compile_source(source: str, paths: Paths, out: Path) -> subprocess.CompletedProcess[str]:
    """Compile one source of the tree into `out`/obj (tensor.cc through its wrapper)."""
    objects = out / "obj"
    objects.mkdir(parents=True, exist_ok=True)
    path = paths.tree / source
    if source == TENSOR_SOURCE:
        path = out / "tensor_without_registration.cc"
        path.write_text(TENSOR_WITHOUT_REGISTRATION)
    cmd = [CXX, *WHEEL_FLAGS, "-O1", "-g", *include_flags(paths), "-c", str(path), "-o",
           str(_object(objects, source))]
    return compile_cached(cmd, paths, wrappers=out if source == TENSOR_SOURCE else None)


def link(program: Program, library_dir: Path, out: Path, log: Path) -> Path:
    """Link `program` from the objects in `out`/obj against the framework library."""
    objects = out / "obj"
    return link_test_program(out / program.name,
                             [_object(objects, s) for s in [*program.library, *program.tests]],
                             library_dir, log)


def link_test_program(binary: Path, objects: Sequence[Path], library_dir: Path,
                      log: Path) -> Path:
    """Link a googletest program from OBJECTS against the wheel's framework library (both
    levels' programs: core-cpu's, and core-sim's GPU test with its layout guards)."""
    cmd = [CXX, "-o", str(binary), *map(str, objects),
           f"-L{library_dir}", "-l:libtensorflow_framework.so.2", f"-Wl,-rpath,{library_dir}",
           "-lgtest_main", "-lgtest", "-lpthread"]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as out_log:
        out_log.write(f"== link {binary.name}: rc={proc.returncode}\n{proc.stderr}")
    if proc.returncode != 0:
        raise CheckFailed(f"linking {binary.name} failed: {_first_error(proc.stderr)}; "
                          f"full log: {log}")
    return binary


def _object(objects: Path, source: str) -> Path:
    return objects / (source.replace("/", "__") + ".o")


def _first_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "error" in line]
    return (lines or stderr.strip().splitlines() or ["no output"])[0].strip()
