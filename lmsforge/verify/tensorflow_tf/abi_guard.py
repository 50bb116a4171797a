"""Prebuilt custom ops must not load into an LMS build (finding 3 of the v2.14.1 review).

A custom-op library compiled against stock TensorFlow headers inlines the stock
``TensorBuffer::data()``, which reads a buffer's first address: once LMS has moved the bytes, the
op would read and write freed device memory. The series tags kernel registration
(``OpKernelRegistrar::InitInternal``, which every kernel library calls while it loads) with an ABI
tag, so such a library fails to load with an undefined symbol, and a library rebuilt against the
series' headers loads.

The check compiles one small kernel library twice, against the wheel's stock headers and against
the patched tree, and compares the registration symbols each needs with those the patched
``op_kernel.cc`` defines: the stock one must be missing, the rebuilt one present.
"""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from lmsforge.verify.tensorflow_tf.toolchain import CXX, WHEEL_FLAGS, Paths, include_flags

OP_KERNEL = "tensorflow/core/framework/op_kernel.cc"
REGISTRATION = re.compile(r"\S*OpKernelRegistrar\S*InitInternal\S*")
PROBE = """\
// A custom-op library in miniature: one kernel, registered as every library does.
#include "tensorflow/core/framework/op_kernel.h"

namespace {

class LmsAbiProbeOp : public tensorflow::OpKernel {
 public:
  explicit LmsAbiProbeOp(tensorflow::OpKernelConstruction* context)
      : OpKernel(context) {}
  void Compute(tensorflow::OpKernelContext* context) override {
    context->set_output(0, context->input(0));
  }
};

REGISTER_KERNEL_BUILDER(Name("LmsAbiProbe").Device(tensorflow::DEVICE_CPU),
                        LmsAbiProbeOp);

}  // namespace
"""


@dataclass(frozen=True)
class Verdict:
    ok: bool
    detail: str  # one line


def check(paths: Paths, op_kernel_object: Path, work: Path) -> Verdict:
    """Compile the probe both ways and compare with the patched op_kernel.cc object."""
    work.mkdir(parents=True, exist_ok=True)
    probe = work / "lms_abi_probe.cc"
    probe.write_text(PROBE)
    stock_paths = paths._replace(tree=paths.wheel_include, generated=paths.wheel_include)
    try:
        stock = _needed_registration(_compile(probe, stock_paths, work / "probe_stock.o"))
        rebuilt = _needed_registration(_compile(probe, paths, work / "probe_rebuilt.o"))
    except _ProbeFailed as error:
        return Verdict(False, f"the ABI probe kernel does not compile: {error}")
    defined = set(_symbols(op_kernel_object, defined=True))
    if not stock or not rebuilt:
        return Verdict(False, "the probe kernel library references no kernel registration "
                              "symbol; the check no longer matches op_kernel.h")
    if stock <= defined:
        return Verdict(False, f"a custom op built against stock headers would load: "
                              f"{OP_KERNEL} still defines {sorted(stock)[0]}; keep "
                              f"TF_LMS_ABI_TAG on OpKernelRegistrar::InitInternal")
    if not rebuilt <= defined:
        return Verdict(False, f"a custom op rebuilt against the series' headers would not load: "
                              f"{OP_KERNEL} does not define {sorted(rebuilt - defined)[0]}")
    return Verdict(True, "prebuilt custom ops fail to load (undefined "
                         f"{sorted(stock)[0]}); rebuilt ones load")


def _compile(source: Path, paths: Paths, obj: Path) -> Path:
    cmd = [CXX, *WHEEL_FLAGS, "-O0", "-w", *include_flags(paths), "-c", str(source), "-o",
           str(obj)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        errors = [line for line in proc.stderr.splitlines() if "error" in line]
        raise _ProbeFailed((errors or proc.stderr.strip().splitlines() or ["no output"])[0])
    return obj


class _ProbeFailed(RuntimeError):
    pass


def _needed_registration(obj: Path) -> set[str]:
    return {s for s in _symbols(obj, defined=False) if REGISTRATION.fullmatch(s)}


def _symbols(obj: Path, *, defined: bool) -> list[str]:
    flag = "--defined-only" if defined else "--undefined-only"
    proc = subprocess.run(["nm", flag, "--format=posix", str(obj)], capture_output=True,
                          text=True, check=True)
    return [line.split()[0] for line in proc.stdout.splitlines() if line.strip()]
