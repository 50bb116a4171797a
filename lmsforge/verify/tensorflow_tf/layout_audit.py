"""The layout and symbol audit of TensorFlow's `core-sim` program (``docs/core-sim.md``).

The program links patched translation units into a process whose other code is the
tensorflow==2.14.1 wheel's ``libtensorflow_framework.so.2``, built from stock headers. The
program's definitions interpose the library's, so a class whose layout the series changes is
safe only while no stock-compiled code touches an object of the new layout: a stock
``new GPUBFCAllocator`` allocates the old size and then runs the patched constructor over it.
The audit finds such places before a test runs and fails naming them, instead of letting them
corrupt memory:

1. **Layouts.** A probe compiled once against the wheel's stock headers and once against the
   patched tree prints ``sizeof`` of the classes of every header the series changes
   (``LAYOUT_CLASSES``; a changed header with no entry fails the audit) and measures the vtable
   of ``tsl::Allocator`` through a subclass; the regenerated protobuf messages must keep every
   stock field where it was (new fields only after them). What differs is a *changed class*.
2. **Members.** Every non-inline member function of a changed class that the library exports
   must be defined by the program (its whole translation unit recompiled), so no stock member
   runs on a new object.
3. **Constructor sites.** Every library function that calls a changed class's constructor
   allocates the stock size. Each must be defined by the program, or, when the library exports
   it, is replaced by a *guard* that aborts naming it; a local function that no guard can reach
   must be listed in ``UNREACHABLE`` with the reason the test never runs it.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path
from typing import Iterable, NamedTuple, Sequence

from lmsforge.errors import CheckFailed
from lmsforge.verify.tensorflow_tf.toolchain import CXX, GPU_DEFINES, WHEEL_FLAGS, Paths

# The classes of each header whose layout the program depends on: the series' changed headers,
# and the classes around them that the test and TensorFlow pass between each other.
LAYOUT_CLASSES: dict[str, tuple[str, ...]] = {
    "tensorflow/core/framework/tensor.h": ("tensorflow::TensorBuffer", "tensorflow::Tensor"),
    "tensorflow/core/framework/op_kernel.h": ("tensorflow::OpKernelContext",
                                              "tensorflow::OpKernelContext::Params",
                                              "tensorflow::OpKernel",
                                              "tensorflow::OpKernelConstruction"),
    "tensorflow/tsl/framework/allocator.h": ("tsl::Allocator", "tsl::AllocationAttributes",
                                             "tsl::SubAllocator"),
    "tensorflow/tsl/framework/bfc_allocator.h": ("tsl::BFCAllocator",),
    "tensorflow/core/common_runtime/gpu/gpu_bfc_allocator.h": ("tensorflow::GPUBFCAllocator",),
    "tensorflow/core/common_runtime/scoped_allocator.h": ("tensorflow::ScopedAllocator",),
    "tensorflow/core/common_runtime/gpu/gpu_device.h": ("tensorflow::BaseGPUDevice",),
    "tensorflow/core/common_runtime/gpu_device_context.h": ("tensorflow::GPUDeviceContext",),
    "tensorflow/core/framework/device_base.h": ("tensorflow::DeviceBase",),
    "tensorflow/core/protobuf/config.pb.h": ("tensorflow::GPUOptions_Experimental",
                                             "tensorflow::GPUOptions",
                                             "tensorflow::ConfigProto"),
}
# Headers the series changes that define no class of the program's (declarations only).
LAYOUT_NEUTRAL: dict[str, str] = {
    "tensorflow/core/framework/lms_tensor.h": "new header, compiled only from the tree",
    "tensorflow/core/kernels/mlir_generated/base_op.h":
        "MLIROpKernel::Compute pins its output (no member added); no MLIR kernel is in the "
        "program",
}
# Messages of the regenerated protos whose fields the audit compares with the wheel's.
PROTO_MESSAGES = {"tensorflow/core/protobuf/config.pb.h": ("GPUOptions_Experimental",
                                                           "GPUOptions", "ConfigProto")}
# Library functions that construct a changed class which no guard can replace (local symbols),
# by the start of their demangled name, and why the test never runs them.
UNREACHABLE: dict[str, str] = {
    "tensorflow::(anonymous namespace)::ExecutorState<":
        "the executor: the test builds its OpKernelContexts itself and runs no graph",
    "tensorflow::(anonymous namespace)::SingleThreadedExecutorImpl::":
        "the single-threaded executor: no graph runs",
}
ALLOCATOR_PROBE = "_ZTVN16lms_layout_probe14AllocatorProbeE"
GUARD_SOURCE = "layout_guards.cc"


class Verdict(NamedTuple):
    ok: bool
    detail: str  # one line
    changed: dict[str, str]  # class -> "stock -> patched" (bytes, vtable or fields)
    guards: list[str]  # demangled library functions replaced by aborting guards
    unreachable: list[str]  # local constructor sites allowed by UNREACHABLE
    interposed_members: int  # exported members of changed classes the program defines

    def facts(self) -> dict[str, object]:
        return {"ok": self.ok, "detail": self.detail, "changed_classes": self.changed,
                "guards": self.guards, "unreachable_sites": self.unreachable,
                "interposed_members": self.interposed_members}


def probe_source(headers: Iterable[str]) -> str:
    classes = [c for h in headers for c in LAYOUT_CLASSES.get(h, ())]
    lines = ["// Generated by lmsforge (layout_audit.py): sizes of the classes the "
             "core-sim program shares with the framework library.",
             *(f'#include "{h}"' for h in sorted(set(headers))),
             "#include <cstdio>", "#include <string>",
             "namespace lms_layout_probe {",
             "class AllocatorProbe final : public tsl::Allocator {",
             " public:",
             "  std::string Name() override;",
             "  void* AllocateRaw(size_t alignment, size_t bytes) override;",
             "  void DeallocateRaw(void* ptr) override;",
             "};",
             "std::string AllocatorProbe::Name() { return \"probe\"; }",
             "void* AllocatorProbe::AllocateRaw(size_t, size_t) { return nullptr; }",
             "void AllocatorProbe::DeallocateRaw(void*) {}",
             "}  // namespace lms_layout_probe",
             "int main() {"]
    lines += [f'  std::printf("%s %zu\\n", "{c}", sizeof({c}));' for c in classes]
    lines += ["  return 0;", "}", ""]
    return "\n".join(lines)


def measure(paths: Paths, library_dir: Path, out: Path, headers: Sequence[str]) -> \
        tuple[dict[str, int], dict[str, int]]:
    """sizeof (and the Allocator probe's vtable bytes) against stock and patched headers."""
    out.mkdir(parents=True, exist_ok=True)
    source = out / "layout_probe.cc"
    source.write_text(probe_source(headers))
    inc = paths.wheel_include
    cuda = [f"-I{inc / 'third_party' / 'gpus' / 'cuda' / 'include'}", f"-I{paths.shim}"]
    stock_includes = [f"-I{inc}", f"-I{inc / 'external' / 'farmhash_archive' / 'src'}", *cuda]
    patched_includes = [f"-I{paths.generated}", f"-I{paths.tree}", *stock_includes]
    results = []
    for name, includes in (("stock", stock_includes), ("patched", patched_includes)):
        obj, binary = out / f"layout_probe_{name}.o", out / f"layout_probe_{name}"
        for cmd in ([CXX, *WHEEL_FLAGS, *GPU_DEFINES, "-O0", "-w", *includes, "-c",
                     str(source), "-o", str(obj)],
                    [CXX, "-o", str(binary), str(obj), f"-L{library_dir}",
                     "-l:libtensorflow_framework.so.2", f"-Wl,-rpath,{library_dir}"]):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode != 0:
                raise CheckFailed(f"the layout probe against {name} headers does not build: "
                                  f"{_first_error(proc.stderr)}")
        run = subprocess.run([str(binary)], capture_output=True, text=True, timeout=120)
        sizes = {}
        for line in run.stdout.splitlines():
            cls, _, size = line.rpartition(" ")
            if cls:
                sizes[cls] = int(size)
        sizes["vtable of tsl::Allocator"] = _symbol_size(obj, ALLOCATOR_PROBE)
        results.append(sizes)
    return results[0], results[1]


def proto_changes(stock_header: Path, patched_header: Path, messages: Sequence[str]) -> \
        dict[str, str]:
    """Messages whose stock fields moved (stock-compiled accessors would read the wrong bytes);
    fields added after every stock one are reported, not counted as a change."""
    changes = {}
    for message in messages:
        stock = _impl_fields(stock_header.read_text(), message)
        patched = _impl_fields(patched_header.read_text(), message)
        if patched[:len(stock)] != stock:
            changes[f"tensorflow::{message}"] = (f"fields {', '.join(stock)} -> "
                                                 f"{', '.join(patched)}")
        elif len(patched) > len(stock):
            changes[f"tensorflow::{message} (fields added)"] = ", ".join(patched[len(stock):])
    return changes


def _impl_fields(header: str, message: str) -> list[str]:
    start = header.find(f"class {message} final")
    impl = header.find("struct Impl_ {", start)
    end = header.find("};", impl)
    if start < 0 or impl < 0:
        raise CheckFailed(f"no message {message} in a generated header")
    fields = re.findall(r"(\w+_);\s*$", header[impl:end], flags=re.M)
    return [field for field in fields if field != "_cached_size_"]


def wheel_constructor_sites(library: Path, cache: Path) -> dict[str, list[str]]:
    """For every constructor the library calls through its PLT: the mangled names of the
    functions that call it (from objdump, cached beside the library)."""
    cached = cache / "constructor-sites.json"
    if cached.is_file() and cached.stat().st_mtime >= library.stat().st_mtime:
        return json.loads(cached.read_text())
    proc = subprocess.Popen(["objdump", "-d", "--no-show-raw-insn", str(library)],
                            stdout=subprocess.PIPE, text=True)
    sites: dict[str, set[str]] = {}
    current = ""
    call = re.compile(r"\s(?:call|jmp)\s+[0-9a-f]+ <(_Z\w*C[12]E\w*)@plt>")
    assert proc.stdout is not None
    for line in proc.stdout:
        if line.endswith(">:\n") and not line.startswith(" "):
            current = line[line.index("<") + 1:-3]
            continue
        if "@plt>" in line:
            found = call.search(line)
            if found:
                sites.setdefault(found.group(1), set()).add(current)
    if proc.wait() != 0:
        raise CheckFailed(f"objdump failed on {library}")
    result = {callee: sorted(callers) for callee, callers in sites.items()}
    cache.mkdir(parents=True, exist_ok=True)
    cached.write_text(json.dumps(result))
    return result


def constructor_prefix(cls: str) -> str:
    """The mangled prefix of CLS's constructors: tsl::BFCAllocator -> _ZN3tsl12BFCAllocatorC."""
    return "_ZN" + "".join(f"{len(part)}{part}" for part in cls.split("::")) + "C"


def audit(paths: Paths, library_dir: Path, work: Path, changed_headers: Sequence[str],
          program_objects: Sequence[Path], cache: Path) -> Verdict:
    """Steps 1-3 of the module docstring; writes the guard source for the program."""
    uncovered = [h for h in changed_headers
                 if h not in LAYOUT_CLASSES and h not in LAYOUT_NEUTRAL]
    if uncovered:
        return Verdict(False, f"the series changes {uncovered[0]}, which the layout audit "
                              "does not cover: add its classes to LAYOUT_CLASSES "
                              "(layout_audit.py)", {}, [], [], 0)
    headers = [h for h in LAYOUT_CLASSES
               if h.endswith(".pb.h") or (paths.tree / h).is_file()]
    stock, patched = measure(paths, library_dir, work, headers)
    changed = {cls: f"{stock[cls]} -> {patched[cls]} bytes"
               for cls in stock if cls in patched and stock[cls] != patched[cls]}
    for header, messages in PROTO_MESSAGES.items():
        changed.update(proto_changes(paths.wheel_include / header, paths.generated / header,
                                     messages))
    layout_changed = [cls for cls in changed if not cls.startswith("vtable of ")
                      and not cls.endswith("(fields added)")]
    library = library_dir / "libtensorflow_framework.so.2"
    exported = _defined_symbols(["nm", "-D", "--defined-only", str(library)])
    defined = _defined_symbols(["nm", "--defined-only", *map(str, program_objects)])
    names = _demangle(sorted(exported))

    missing = []
    interposed = 0
    for cls in layout_changed:
        members = [m for m, kind in exported.items() if kind == "T"
                   and names[m].startswith(cls + "::")]
        interposed += sum(1 for m in members if m in defined)
        missing += [names[m] for m in members if m not in defined]
    if missing:
        return Verdict(False, f"{len(missing)} members of classes whose layout the series "
                              f"changes would run stock-compiled code on new objects; first: "
                              f"{missing[0]}; compile its translation unit into the program",
                       changed, [], [], interposed)

    sites = wheel_constructor_sites(library, cache)
    guards, unreachable, unguarded = [], [], []
    for cls in layout_changed:
        prefix = constructor_prefix(cls.split(" ")[0])
        callers = sorted({c for callee, cs in sites.items() if callee.startswith(prefix)
                          for c in cs})
        caller_names = _demangle(callers)
        for caller in callers:
            if caller in defined or caller.startswith(prefix):
                continue  # the program's own definition runs, or the constructor itself
            name = caller_names[caller]
            if caller in exported:
                guards.append(caller)
            elif any(name.startswith(allowed) for allowed in UNREACHABLE):
                unreachable.append(name)
            else:
                unguarded.append(f"{name} (constructs {cls})")
    if unguarded:
        return Verdict(False, f"{len(unguarded)} stock-compiled functions construct a class "
                              f"whose layout the series changes and cannot be guarded; first: "
                              f"{unguarded[0]}", changed, [], unreachable, interposed)
    guard_names = _demangle(guards)
    (work / GUARD_SOURCE).write_text(guard_source([(g, guard_names[g]) for g in guards]))
    detail = (f"{len(layout_changed)} classes change layout "
              f"({', '.join(f'{c}: {changed[c]}' for c in layout_changed)}); "
              f"{interposed} library members of theirs interposed by the program, "
              f"{len(guards)} library functions that construct them guarded, "
              f"{len(unreachable)} unreachable sites")
    return Verdict(True, detail, changed, [guard_names[g] for g in guards], unreachable,
                   interposed)


def guard_source(guards: Sequence[tuple[str, str]]) -> str:
    lines = ['// Generated by lmsforge (layout_audit.py): stock-compiled functions of the',
             '// framework library that construct a class whose layout the series changes.',
             '// The program defines them, so any call aborts here naming the function',
             '// instead of running a patched constructor over a stock-sized object.',
             "#include <cstdio>", "#include <cstdlib>", "",
             "namespace {",
             "[[noreturn]] void Fail(const char* function) {",
             '  std::fprintf(stderr, "layout guard: %s was called; it constructs a class '
             'whose layout the series changes with the stock size (lmsforge '
             'layout_audit.py)\\n", function);',
             "  std::abort();",
             "}",
             "}  // namespace", ""]
    for index, (mangled, name) in enumerate(guards):
        text = name.replace("\\", "\\\\").replace('"', '\\"')
        lines += [f'extern "C" void lms_layout_guard_{index}() __asm__("{mangled}");',
                  f'extern "C" void lms_layout_guard_{index}() {{ Fail("{text}"); }}']
    return "\n".join(lines) + "\n"


def _defined_symbols(cmd: list[str]) -> dict[str, str]:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise CheckFailed(f"{' '.join(cmd[:3])} failed: {_first_error(proc.stderr)}")
    symbols = {}
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TWVDBR":
            symbols[parts[2]] = parts[1]
    return symbols


def _demangle(names: Sequence[str]) -> dict[str, str]:
    if not names:
        return {}
    proc = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True,
                          check=True)
    return dict(zip(names, proc.stdout.splitlines()))


def _symbol_size(obj: Path, symbol: str) -> int:
    proc = subprocess.run(["nm", "-S", "--defined-only", str(obj)], capture_output=True,
                          text=True, check=True)
    for line in proc.stdout.splitlines():
        parts = line.split()
        if len(parts) == 4 and parts[3] == symbol:
            return int(parts[1], 16)
    raise CheckFailed(f"the layout probe has no {symbol}")


def _first_error(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if "error" in line]
    return (lines or stderr.strip().splitlines() or ["no output"])[0].strip()
