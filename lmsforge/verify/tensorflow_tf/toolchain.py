"""Compiler command lines for TensorFlow translation units outside Bazel (``framework-internals.md`` §4.3).

Include order: regenerated protobuf headers, then the patched tree, then the wheel's headers (so the
tree's own headers win over the wheel's copies of them, and the regenerated ``config.pb.h`` wins
over the wheel's). Flags are the ones ``tf.sysconfig.get_compile_flags()`` reports for 2.14.1.
"""

from __future__ import annotations

import subprocess
import sysconfig
from pathlib import Path
from typing import NamedTuple

from lmsforge.cache import default_cache_dir
from lmsforge.errors import LmsforgeError
from lmsforge.verify import object_cache
from lmsforge.verify.tensorflow_tf import inputs

CXX = "g++"
WHEEL_FLAGS = ("-std=c++17", "-D_GLIBCXX_USE_CXX11_ABI=1", "-DEIGEN_MAX_ALIGN_BYTES=64")
GPU_DEFINES = ("-DGOOGLE_CUDA=1",)
# The wheel has no cuDNN headers; gpu_device.cc only prints CUDNN_MAJOR/MINOR/PATCHLEVEL.
CUDNN_SHIM = "#define CUDNN_MAJOR 8\n#define CUDNN_MINOR 6\n#define CUDNN_PATCHLEVEL 0\n"
PROTOS = ("tensorflow/core/protobuf/config.proto",)


# The wheel has no LLVM or MLIR headers; MLIR-generated kernels' base_op.{h,cc} use only these
# (a descriptor's byte buffer and the argument list of the generated function).
LLVM_SHIMS = {
    "llvm/ADT/SmallVector.h": """\
// lmsforge's stand-in for LLVM's SmallVector: the members base_op.{h,cc} use.
#pragma once
#include <cstddef>
#include <vector>
namespace llvm {
template <typename T>
class SmallVectorImpl {
 public:
  T* data() { return items_.data(); }
  const T* data() const { return items_.data(); }
  size_t size() const { return items_.size(); }
  T* begin() { return items_.data(); }
  T* end() { return items_.data() + items_.size(); }
  T& operator[](size_t i) { return items_[i]; }
  void push_back(const T& item) { items_.push_back(item); }
  void resize(size_t n) { items_.resize(n); }
  void resize_for_overwrite(size_t n) { items_.resize(n); }
 protected:
  SmallVectorImpl() = default;
  explicit SmallVectorImpl(size_t n) : items_(n) {}
 private:
  std::vector<T> items_;
};
template <typename T, unsigned N = 0>
class SmallVector : public SmallVectorImpl<T> {
 public:
  SmallVector() = default;
  explicit SmallVector(size_t n) : SmallVectorImpl<T>(n) {}
};
}  // namespace llvm
""",
    "llvm/ADT/ArrayRef.h": """\
// lmsforge's stand-in for LLVM's ArrayRef (base_op.h includes it).
#pragma once
namespace llvm {
template <typename T>
class ArrayRef;
}  // namespace llvm
""",
    "mlir/ExecutionEngine/CRunnerUtils.h": """\
// lmsforge's stand-in for MLIR's CRunnerUtils.h (base_op.h includes it, uses none of it).
#pragma once
""",
}


class Paths(NamedTuple):
    tree: Path
    wheel_include: Path
    generated: Path  # protoc output
    shim: Path  # stand-ins for headers the wheel lacks (cuDNN's version, LLVM's SmallVector)


def compile_cached(cmd: list[str], paths: Paths,
                   wrappers: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run a compile command of the levels through the object cache shared by every tree and
    run (object_cache.py), with this level's folders named by role; WRAPPERS is the folder of
    a generated wrapper source (tensor.cc's), if the unit is one."""
    roots = {paths.tree: "tree", paths.generated: "generated", paths.shim: "shim"}
    if wrappers is not None:
        roots[wrappers] = "wrappers"
    return object_cache.compile_unit(cmd, roots, default_cache_dir())


def as_the_wheel_was_built(paths: Paths) -> list[str]:
    """The compiler and flags of a unit compiled as the wheel was built, a CUDA build
    (``GOOGLE_CUDA=1``), at -O0: the `compile` and `core-sim` levels' command up to its input,
    one list so that the object cache gives core-sim the compile level's objects."""
    return [CXX, *WHEEL_FLAGS, "-O0", "-w", *GPU_DEFINES, *include_flags(paths, gpu=True)]


def include_flags(paths: Paths, *, gpu: bool = False, python: bool = False) -> list[str]:
    inc = paths.wheel_include
    dirs = [paths.generated, paths.tree, inc, inc / "external" / "farmhash_archive" / "src"]
    if gpu:
        dirs += [inc / "third_party" / "gpus" / "cuda" / "include"]
    dirs.append(paths.shim)  # last: only what nothing before it has
    if python:
        dirs += [inc / "external" / "pybind11" / "include", Path(sysconfig.get_paths()["include"])]
        dirs.append(inputs.numpy_include(default_cache_dir()))
    return [f"-I{d}" for d in dirs]


def write_cudnn_shim(shim: Path) -> None:
    header = shim / "third_party" / "gpus" / "cudnn" / "cudnn.h"
    header.parent.mkdir(parents=True, exist_ok=True)
    header.write_text(CUDNN_SHIM)


def write_llvm_shims(shim: Path) -> None:
    for name, text in LLVM_SHIMS.items():
        header = shim / name
        header.parent.mkdir(parents=True, exist_ok=True)
        header.write_text(text)


def generate_protos(protoc: Path, paths: Paths) -> list[Path]:
    """Regenerate the C++ code of the patched protos; returns the generated ``.pb.cc`` files."""
    paths.generated.mkdir(parents=True, exist_ok=True)
    outputs = []
    for proto in PROTOS:
        cmd = [str(protoc), f"--proto_path={paths.tree}", f"--proto_path={paths.wheel_include}",
               f"--cpp_out={paths.generated}", proto]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["no output"])[0]
            raise LmsforgeError(f"protoc failed on {proto}: {first}")
        outputs.append(paths.generated / proto.replace(".proto", ".pb.cc"))
    return outputs
