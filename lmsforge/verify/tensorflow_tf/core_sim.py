"""The `core-sim` level: the series' C++ GPU test on the simulated CUDA driver.

One program, ``gpu_lms_test``, built without Bazel from the tree and linked against the
tensorflow==2.14.1 wheel's ``libtensorflow_framework.so.2``, whose StreamExecutor CUDA platform
dlopens ``libcuda.so.1``: with lmsforge's simulator (``lmsforge/sim``: the driver front end
``libcuda.so.1`` and the CUDA 11.8 runtime shim ``libcudart.so.11.0``) first on
``LD_LIBRARY_PATH``, TensorFlow's real GPU runtime (streams, events, ``EventMgr``, the BFC
allocators, ``BaseGPUDevice``) runs the series' GPU code with no GPU. The same program runs
unchanged on a GPU with the node's driver.

The program holds what the series patches plus its *ODR closure*: the translation units whose
classes change layout (the allocators, ``tensor.cc``, ``op_kernel.cc``, ``scoped_allocator.cc``,
the regenerated ``config.pb.cc``) and ``scoped_allocator_mgr.cc``, which constructs one of them.
The layout audit (``layout_audit.py``) proves no stock-compiled code of the library runs on an
object of a changed layout, and links guards that abort naming the library functions that would.
Every unit is compiled as the wheel was (``GOOGLE_CUDA=1``), at -O0.

The test runs once per seed of the simulator's adversarial scheduler (``LMS_SIM_SEED``) with two
simulated devices; a failure names its seed and the command that replays it. Nothing here is a
GPU result: the facts say ``simulated``.
"""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, Sequence

from lmsforge.errors import CheckFailed
from lmsforge.verify.cmake_cache import forget_foreign_configuration
from lmsforge.verify.levels import PASS, LevelResult
from lmsforge.verify.pytorch_c10 import sim_seeds
from lmsforge.verify.pytorch_c10.sim_seeds import SeedRun
from lmsforge.verify.tensorflow_tf import compile_units, core_cpu, layout_audit
from lmsforge.verify.tensorflow_tf.toolchain import (CXX, GPU_DEFINES, WHEEL_FLAGS, Paths,
                                                     include_flags)

LEVEL = "core-sim"
# lmsforge/sim, the simulator's CMake project (a folder of C++, not imported).
SIM_SOURCE_DIR = Path(__file__).resolve().parents[2] / "sim"
GPU_DIR = "tensorflow/core/common_runtime/gpu"
TEST_GLOB = "gpu_lms*_test.cc"
PROGRAM = "gpu_lms_test"
# Stock translation units the program needs because they construct a class whose layout the
# series changes (the layout audit says which; the rest of such functions are guarded).
CLOSURE = ("tensorflow/core/common_runtime/scoped_allocator_mgr.cc",)
# The series' other touched units the program compiles: every touched .cc under these, except
# tests and Python bindings.
SERIES_PREFIXES = (GPU_DIR + "/", "tensorflow/core/common_runtime/")
SIM_TARGETS = ("lms_cuda_sim_driver", "lms_cuda_sim_cudart11")
# Two devices; EventMgr polls its events, so a not-ready query moves the poller's virtual clock
# on (lmsforge/sim/README.md).
SIM_ENV = {"LMS_SIM_DEVICES": "2", "LMS_SIM_POLL_CLOCK": "1"}
SEED_TIMEOUT_S = 300.0


class Sources(NamedTuple):
    library: list[str]  # tree paths (and the generated config.pb.cc, absolute)
    tests: list[str]


def find_sources(tree: Path, touched: Sequence[str], generated: Sequence[Path]) -> Sources:
    tests = sorted(str(p.relative_to(tree)) for p in (tree / GPU_DIR).glob(TEST_GLOB))
    cpu = core_cpu.find_sources(tree)
    library = list(cpu.library)
    for path in sorted(touched):
        if path.endswith(".cc") and path.startswith(SERIES_PREFIXES) and \
                not path.endswith("_test.cc") and path not in library:
            library.append(path)
    library += [path for path in CLOSURE if (tree / path).is_file() and path not in library]
    library += [str(path) for path in generated]
    return Sources(library, tests)


def changed_headers(touched: Sequence[str], generated: Sequence[Path], paths: Paths) -> \
        list[str]:
    """Headers the series changes (not adds), and the regenerated protobuf headers."""
    headers = [path for path in touched if path.endswith(".h")]
    headers += [str(Path(p).with_suffix(".h").relative_to(paths.generated)) for p in generated]
    return headers


def command(source: str, paths: Paths, objects: Path) -> list[str]:
    """The compiler command for one unit (tensor.cc through its wrapper), as the wheel was
    built: a CUDA build."""
    path = Path(source) if Path(source).is_absolute() else paths.tree / source
    if source == core_cpu.TENSOR_SOURCE:
        path = objects / "tensor_without_registration.cc"
        path.write_text(core_cpu.TENSOR_WITHOUT_REGISTRATION)
    return [CXX, *WHEEL_FLAGS, "-O0", "-w", *GPU_DEFINES, *include_flags(paths, gpu=True),
            "-c", str(path), "-o", str(object_path(objects, source))]


def compile_unit(source: str, paths: Paths, objects: Path) -> subprocess.CompletedProcess[str]:
    objects.mkdir(parents=True, exist_ok=True)
    return subprocess.run(command(source, paths, objects), capture_output=True, text=True)


def object_path(objects: Path, source: str) -> Path:
    return objects / (source.strip("/").replace("/", "__") + ".o")


def reuse_compiled(units: Sequence[str], paths: Paths, objects: Path, compiled: Paths,
                   compiled_objects: Path) -> list[str]:
    """Copies the `compile` level's object of each unit it compiled with this level's very command
    (the GPU units: same flags; its regenerated protos and shims have the same contents) after
    the unit's source last changed; returns the units still to compile."""
    objects.mkdir(parents=True, exist_ok=True)
    todo = []
    for unit in units:
        planned = [] if Path(unit).is_absolute() else compile_units.plan([unit])
        if not planned:
            todo.append(unit)
            continue
        source, old = paths.tree / unit, compile_units.object_path(compiled_objects, unit)
        same = _normalised(compile_units.command(planned[0], compiled, compiled_objects),
                           compiled) == _normalised(command(unit, paths, objects), paths)
        if same and old.is_file() and source.is_file() and \
                old.stat().st_mtime > source.stat().st_mtime:
            shutil.copyfile(old, object_path(objects, unit))
        else:
            todo.append(unit)
    return todo


def _normalised(cmd: Sequence[str], paths: Paths) -> list[str]:
    """A compile command with the level's own folders and its output named alike."""
    words = list(cmd[:cmd.index("-o")]) if "-o" in cmd else list(cmd)
    return [word.replace(str(paths.generated), "<generated>").replace(str(paths.shim), "<shim>")
            for word in words]


def compile_all(units: Sequence[str], paths: Paths, objects: Path, log: Path, jobs: int) -> None:
    """Compile UNITS into OBJECTS; raises CheckFailed naming the first that fails."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        compiled = list(pool.map(lambda unit: compile_unit(unit, paths, objects), units))
    with open(log, "a") as out:
        for unit, proc in zip(units, compiled):
            out.write(f"== compile {unit}: rc={proc.returncode}\n{proc.stderr}")
    for unit, proc in zip(units, compiled):
        if proc.returncode != 0:
            raise CheckFailed(f"{unit} does not compile: {_first_error(proc.stderr)}; "
                              f"full log: {log}")


def link(sources: Sources, objects: Path, guards: Path, library_dir: Path, out: Path,
         log: Path) -> Path:
    return core_cpu.link_test_program(
        out / PROGRAM, [*(object_path(objects, s) for s in [*sources.library, *sources.tests]),
                        guards], library_dir, log)


def compile_guards(audit_dir: Path, objects: Path) -> Path:
    source = audit_dir / layout_audit.GUARD_SOURCE
    guards = objects / "layout_guards.o"
    proc = subprocess.run([CXX, "-std=c++17", "-O0", "-c", str(source), "-o", str(guards)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise CheckFailed(f"the layout guards do not compile: {_first_error(proc.stderr)}")
    return guards


def build_simulator(build_dir: Path, cuda_root: Path, wheel_cuda_include: Path, log: Path,
                    jobs: int) -> Path:
    """The simulator's driver front end and CUDA 11.8 runtime shim, built against the wheel's
    CUDA 11.8 headers; returns the folder that holds libcuda.so.1 and libcudart.so.11.0."""
    forget_foreign_configuration(build_dir, SIM_SOURCE_DIR)
    configure = ["cmake", "-G", "Ninja", "-S", str(SIM_SOURCE_DIR), "-B", str(build_dir),
                 f"-DCUDAToolkit_ROOT={cuda_root}",
                 f"-DCUDAToolkit_INCLUDE_DIR={cuda_root / 'include'}",
                 f"-DLMS_SIM_DRIVER_CUDA_INCLUDE={wheel_cuda_include}"]
    if (cuda_root / "lib64" / "libcudart.so").exists():
        configure.append(f"-DCUDA_cudart_LIBRARY={cuda_root / 'lib64' / 'libcudart.so'}")
    with open(log, "a") as out:
        for cmd in (configure, ["cmake", "--build", str(build_dir), "--parallel", str(jobs),
                                "--target", *SIM_TARGETS]):
            proc = subprocess.run(cmd, capture_output=True, text=True)
            out.write(f"== {' '.join(cmd[:3])}: rc={proc.returncode}\n{proc.stdout}"
                      f"{proc.stderr}")
            if proc.returncode != 0:
                raise CheckFailed(f"building the simulated CUDA driver failed: "
                                  f"{_first_error(proc.stdout + proc.stderr)}; full log: {log}")
    return build_dir


def env_for(seed: int, sim_dir: Path) -> dict[str, str]:
    return {**SIM_ENV, "LMS_SIM_SEED": str(seed), "LD_LIBRARY_PATH": str(sim_dir)}


def replay_command(binary: Path, seed: int, sim_dir: Path, tests: Sequence[str] = ()) -> str:
    return sim_seeds.replay_command(env_for(seed, sim_dir), binary, tests)


def run_seed(binary: Path, seed: int, sim_dir: Path, work_dir: Path) -> SeedRun:
    return sim_seeds.run_seed(binary, seed, env_for(seed, sim_dir), work_dir, kind="GPU",
                              timeout=SEED_TIMEOUT_S)


def judge(runs: Sequence[SeedRun], facts: dict[str, object], log: str) -> LevelResult:
    """PASS only when every seed ran every test and all passed; a failure names the first
    failing seed and how to replay it."""
    facts = {"simulated": True, "gpu": False, **facts,
             "seeds": [run.to_json() for run in runs],
             "test_seconds": round(sum(run.seconds for run in runs), 1)}
    failure = sim_seeds.seeds_failed(runs, facts, log)
    if failure is not None:
        return failure
    passed = runs[0].report.passed if runs[0].report else 0
    return LevelResult(LEVEL, PASS, facts=facts, log=log,
                       detail=f"{passed} GPU tests passed under each of {len(runs)} seeds "
                              f"(simulated CUDA driver, not a GPU result); layout audit: "
                              f"{facts.get('audit_summary', '')}")


def have_tools() -> str:
    """Why the level cannot build here, or ''."""
    for tool in ("cmake", "ninja", "objdump", "nm", "c++filt"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    return ""


def _first_error(text: str) -> str:
    lines = [line for line in text.splitlines() if "error" in line.lower()]
    return (lines or text.strip().splitlines() or ["no output"])[0].strip()
