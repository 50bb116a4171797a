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
simulated devices; a failure names its seed and the command that replays it. Then the
oversubscription benchmark (``bench/tensorflow/oversubscription.cc``: the PyTorch benchmark's loop
on TensorFlow's allocator and tensors) runs in its short mode under the first seed; its data
check must pass, and its bound efficiency per k goes into the facts. Nothing here is a GPU
result: the facts say ``simulated``.
"""

from __future__ import annotations

import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, Sequence

from lmsforge import bundled
from lmsforge.errors import CheckFailed
from lmsforge.verify.cmake_cache import forget_foreign_configuration
from lmsforge.verify.levels import FAIL, PASS, LevelResult
from lmsforge.verify.pytorch_c10 import sim_level, sim_seeds
from lmsforge.verify.pytorch_c10.sim_level import BenchRun
from lmsforge.verify.pytorch_c10.sim_seeds import SeedRun
from lmsforge.verify.tensorflow_tf import core_cpu, layout_audit
from lmsforge.verify.tensorflow_tf.compile_units import object_path
from lmsforge.verify.tensorflow_tf.toolchain import (CXX, Paths, as_the_wheel_was_built,
                                                     compile_cached)

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
# bench/ of a source checkout (absent from an installed lmsforge): the benchmark's TensorFlow
# side, compiled like the level's units, and the PyTorch benchmark's argument parsing, JSON and
# host kernels, compiled against the CUDA headers the simulator was built with.
BENCH_DIR = bundled.path("bench")
BENCH_SOURCE = "tensorflow/oversubscription.cc"
BENCH_SUPPORT = ("common.cpp", "oversubscription_bound.cpp", "kernels_sim.cpp")
BENCH_PROGRAM = "lms_tf_bench_oversub"
BENCH_OBJECT = "oversubscription.o"
BENCH_NAME = "oversubscription"


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
    return [*as_the_wheel_was_built(paths), "-c", str(path), "-o",
            str(object_path(objects, source))]


def compile_unit(source: str, paths: Paths, objects: Path) -> subprocess.CompletedProcess[str]:
    objects.mkdir(parents=True, exist_ok=True)
    # Only tensor.cc's wrapper lives in OBJECTS; every other unit's command is the `compile`
    # level's (both as_the_wheel_was_built), so the cache gives this level the objects that
    # level built for the units the series touches.
    wrappers = objects if source == core_cpu.TENSOR_SOURCE else None
    return compile_cached(command(source, paths, objects), paths, wrappers=wrappers)


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


def benchmark_unavailable() -> str:
    """Why the benchmark cannot be built here, or ''."""
    if not (BENCH_DIR / BENCH_SOURCE).is_file():
        return "no bench/ beside lmsforge (not a source checkout)"
    return ""


def build_benchmark(sources: Sources, paths: Paths, objects: Path, guards: Path,
                    library_dir: Path, sim_dir: Path, cuda_root: Path, out: Path,
                    log: Path) -> Path:
    """The benchmark program: its TensorFlow side compiled as the level's units are (with
    -O1: -O0 would only slow the host), linked with the level's library objects, the layout
    guards and the simulator, whose host kernels it launches."""
    bench_objects = benchmark_objects(out)
    bench_objects.mkdir(parents=True, exist_ok=True)
    tf_side = command(str(BENCH_DIR / BENCH_SOURCE), paths, bench_objects)
    tf_side[tf_side.index("-O0")] = "-O1"
    tf_side[tf_side.index("-c"):tf_side.index("-c")] = [
        f"-I{BENCH_DIR}", "-DLMS_BENCH_SIMULATED=1"]
    tf_side[-1] = str(bench_objects / BENCH_OBJECT)
    commands = {BENCH_SOURCE: tf_side}
    for name in BENCH_SUPPORT:
        commands[name] = [CXX, "-std=c++17", "-O2", "-w", "-DLMS_BENCH_SIMULATED=1",
                          "-DLMS_BENCH_WITHOUT_C10=1", f"-I{BENCH_DIR}",
                          f"-I{SIM_SOURCE_DIR / 'include'}", f"-I{cuda_root / 'include'}",
                          "-c", str(BENCH_DIR / name), "-o", str(bench_objects / f"{name}.o")]
    for label, cmd in commands.items():
        _run_logged(cmd, label, log)
    return link_benchmark(bench_objects, sources, objects, guards, library_dir, sim_dir, out,
                          log)


def benchmark_objects(out: Path) -> Path:
    """Where build_benchmark leaves the benchmark's own objects (a mutation relinks them)."""
    return out / "bench-obj"


def link_benchmark(bench_objects: Path, sources: Sources, objects: Path, guards: Path,
                   library_dir: Path, sim_dir: Path, out: Path, log: Path) -> Path:
    binary = out / BENCH_PROGRAM
    # Named, not globbed: an object an older lmsforge left there must not join the link.
    own = [bench_objects / BENCH_OBJECT, *(bench_objects / f"{name}.o" for name in BENCH_SUPPORT)]
    _run_logged([CXX, "-o", str(binary), *map(str, own),
                 *(str(object_path(objects, source)) for source in sources.library),
                 str(guards), f"-L{library_dir}", "-l:libtensorflow_framework.so.2",
                 f"-Wl,-rpath,{library_dir}", f"-L{sim_dir}", "-llms_cuda_sim",
                 f"-Wl,-rpath,{sim_dir}", "-lpthread"], "the link", log)
    return binary


def _run_logged(cmd: Sequence[str], label: str, log: Path) -> None:
    proc = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as out_log:
        out_log.write(f"== {BENCH_PROGRAM}, {label}: rc={proc.returncode}\n{proc.stderr}")
    if proc.returncode != 0:
        raise CheckFailed(f"building {BENCH_PROGRAM} failed at {label}: "
                          f"{_first_error(proc.stderr)}; full log: {log}")


def run_benchmark(binary: Path, seed: int, sim_dir: Path, work_dir: Path) -> BenchRun:
    """The benchmark's short mode under SEED (its figures are the same under every seed:
    virtual time does not see the delays)."""
    return sim_level.run_benchmark(binary, BENCH_NAME, seed, work_dir,
                                   env=env_for(seed, sim_dir))


def env_for(seed: int, sim_dir: Path) -> dict[str, str]:
    return {**SIM_ENV, "LMS_SIM_SEED": str(seed), "LD_LIBRARY_PATH": str(sim_dir)}


def replay_command(binary: Path, seed: int, sim_dir: Path, tests: Sequence[str] = ()) -> str:
    return sim_seeds.replay_command(env_for(seed, sim_dir), binary, seed, tests)


def run_seed(binary: Path, seed: int, sim_dir: Path, work_dir: Path) -> SeedRun:
    return sim_seeds.run_seed(binary, seed, env_for(seed, sim_dir), work_dir, kind="GPU",
                              timeout=SEED_TIMEOUT_S)


def judge(runs: Sequence[SeedRun], facts: dict[str, object], log: str,
          bench_runs: Sequence[BenchRun] = (), no_benchmark: str = "") -> LevelResult:
    """PASS only when every seed ran every test and all passed, and the benchmark (where it
    was built) checked its data; a failure names the first failing seed and how to replay it."""
    facts = {"simulated": True, "gpu": False, **facts,
             "seeds": [run.to_json() for run in runs],
             "benchmarks": {run.name: run.to_json() for run in bench_runs},
             "test_seconds": round(sum(run.seconds for run in runs), 1)}
    if no_benchmark:
        facts["benchmarks_not_built"] = no_benchmark
    failure = sim_seeds.seeds_failed(runs, facts, log)
    if failure is not None:
        return failure
    failed = [run for run in bench_runs if run.problem]
    if failed:
        return LevelResult(LEVEL, FAIL, facts=facts, log=log,
                           detail=f"benchmark {failed[0].name}: {failed[0].problem}")
    passed = runs[0].report.passed if runs[0].report else 0
    detail = f"{passed} GPU tests passed under each of {len(runs)} seeds"
    figures = next((run.figures for run in bench_runs
                    if run.figures and "bound_efficiency" in run.figures), {})
    efficiency = figures.get("bound_efficiency", {})
    if efficiency:
        detail += (f"; the benchmark's data check passed, simulated bound efficiency "
                   f"{' '.join(f'{value:.2f}' for value in efficiency.values())} at k = "
                   f"{' '.join(efficiency)}")
        on_demand = figures.get("on_demand_bound_efficiency", {})
        if on_demand:
            detail += (f" (on demand, sync_mode 3: "
                       f"{' '.join(f'{value:.2f}' for value in on_demand.values())})")
    elif no_benchmark:
        detail += f"; benchmark not built: {no_benchmark}"
    return LevelResult(LEVEL, PASS, facts=facts, log=log,
                       detail=f"{detail} (simulated CUDA driver, not a GPU result); layout "
                              f"audit: {facts.get('audit_summary', '')}")


def have_tools() -> str:
    """Why the level cannot build here, or ''."""
    for tool in ("cmake", "ninja", "objdump", "nm", "c++filt"):
        if shutil.which(tool) is None:
            return f"{tool} not found"
    return ""


def _first_error(text: str) -> str:
    lines = [line for line in text.splitlines() if "error" in line.lower()]
    return (lines or text.strip().splitlines() or ["no output"])[0].strip()
