"""Every header a level's build reads comes from the tree, from what the build generates, or from
an input declared for that level in ``lmsforge/verify/inputs.py`` (issue 11 item 2: the TensorFlow
compile level read googlemock headers that only core-cpu declared).

The headers are the ones the real builds read: ``ninja -t deps`` of the c10 build, and ``g++ -M``
with the exact command lines of the other translation units. A header outside the tree and the
declared wheels and CUDA root must belong (``dpkg -S``) to a declared Debian package, or to the C
and C++ runtime the declared compiler brings.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import REPO_ROOT, Verification
from lmsforge import git
from lmsforge.upstream import tree as upstream
from lmsforge.verify import inputs
from lmsforge.cache import Cache
from lmsforge.verify.pytorch_codegen import inputs as codegen_inputs, torchgen, units
from lmsforge.verify.tensorflow_tf import (compile_units, core_cpu, core_sim,
                                           inputs as tf_inputs, toolchain)

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(shutil.which("dpkg") is None, reason="needs dpkg (Debian)")]

# The C and C++ runtime headers that come with the compiler (g++ depends on these packages).
TOOLCHAIN = re.compile(r"(libstdc\+\+-\d+-dev|libgcc-\d+-dev|libc6-dev|linux-libc-dev|"
                       r"libcrypt-dev)(:\w+)?")


def verified_tree(verification: Verification, cache: Path, framework: str,
                  tag: str) -> tuple[Path, Path, str]:
    """The tree, work folder and base of the session's verify run of the series (conftest), which
    built every level CI runs in the shared cache."""
    assert verification.exit_code == 0, verification.output
    identity = upstream.recorded(Cache(cache), framework, tag)
    base = identity["archive"]["commit"]
    return (cache / "trees" / framework / tag, cache / "builds" / framework / tag / "verify",
            base)


def make_deps(command: list[str], cwd: Path | None = None) -> set[Path]:
    """The headers one compile reads: its command with `-M` instead of compiling."""
    args = [a for a in command if a not in ("-fsyntax-only", "-c")]
    if "-o" in args:
        index = args.index("-o")
        del args[index:index + 2]
    proc = subprocess.run([*args, "-M"], capture_output=True, text=True, cwd=cwd)
    assert proc.returncode == 0, proc.stderr[-2000:]
    words = proc.stdout.replace("\\\n", " ").split(":", 1)[1].split()
    return {Path(word) for word in words if not word.endswith((".cc", ".cpp"))}


def ninja_deps(build_dir: Path) -> set[Path]:
    proc = subprocess.run(["ninja", "-C", str(build_dir), "-t", "deps"], capture_output=True,
                          text=True, check=True)
    return {Path(line.strip()) for line in proc.stdout.splitlines()
            if line.startswith("    ") and line.strip()}


def undeclared(headers: set[Path], framework: str, level: str, cache: Path,
               own: list[Path]) -> list[str]:
    """Headers not explained by the tree/build (OWN), a declared input, or the toolchain."""
    declared = inputs.declared(framework, level)
    roots = [p.resolve() for p in own]
    packages = set()
    for item in declared:
        where = item.location(cache)
        if isinstance(item, inputs.DebianPackage):
            packages.add(item.package)
        elif isinstance(item, inputs.Tool):
            packages.add(item.debian)
        elif where is not None:
            roots.append(where.resolve() if where.is_dir() else where.resolve().parent)
    outside = sorted({h for h in headers
                      if not any(h.resolve().is_relative_to(r) for r in roots)})
    owners: dict[str, set[str]] = {}
    for start in range(0, len(outside), 200):
        chunk = [str(h) for h in outside[start:start + 200]]
        proc = subprocess.run(["dpkg", "-S", *chunk], capture_output=True, text=True)
        for line in proc.stdout.splitlines():
            names, path = line.split(": ", 1)
            owners.setdefault(path, set()).update(n.strip() for n in names.split(","))
    problems = []
    for header in outside:
        found = owners.get(str(header)) or owners.get(str(header.resolve()))
        if not found:
            problems.append(f"{header} (no declared input, no Debian package)")
            continue
        names = {n.split(":")[0] for n in found}
        if not names & packages and not any(TOOLCHAIN.fullmatch(n) for n in names):
            problems.append(f"{header} (from {', '.join(sorted(names))}, not declared for "
                            f"{framework} {level})")
    return problems


@pytest.fixture(autouse=True)
def shared_cache(real_cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The helpers that locate inputs (wheels, headers) read the cache from the environment:
    point it at the shared cache the verify runs built in."""
    monkeypatch.setenv("LMSFORGE_CACHE_DIR", str(real_cache_dir))


def test_pytorch_levels_read_only_declared_inputs(real_cache_dir, bundled_verification):
    tree, work, base = verified_tree(bundled_verification("pytorch", "v2.6.0"), real_cache_dir,
                                     "pytorch", "v2.6.0")
    build_dir = work / "c10-build"
    c10_headers = ninja_deps(build_dir)
    assert any("cuda_runtime" in h.name for h in c10_headers)  # the deps cover c10_cuda
    # The same build folder also holds core-sim's targets (the simulator and the benchmarks):
    # their sources are lmsforge's own files, in this checkout.
    for level in ("compile", "core-cpu"):
        assert undeclared(c10_headers, "pytorch", level, real_cache_dir,
                          [tree, build_dir, REPO_ROOT / "lmsforge", REPO_ROOT / "bench"]) == []

    generated = work / "codegen"
    plan = units.plan(tree, units.touched_files(tree, base) or [],
                      [generated / torchgen.REGISTER_CUDA])
    flags = units.flags(tree, generated, build_dir / "generated",
                        codegen_inputs.header_dirs(real_cache_dir),
                        codegen_inputs.python_include_dir())
    codegen_headers: set[Path] = set()
    for unit in plan:
        codegen_headers |= make_deps([units.CXX, *flags, str(unit.source)])
    assert len(plan) >= 2 and codegen_headers
    assert undeclared(codegen_headers, "pytorch", "compile", real_cache_dir,
                      [tree, build_dir, generated]) == []


def test_tensorflow_levels_read_only_declared_inputs(real_cache_dir, bundled_verification):
    tree, work, base = verified_tree(bundled_verification("tensorflow", "v2.14.1"),
                                     real_cache_dir, "tensorflow", "v2.14.1")
    wheel = tf_inputs.include_dir(tf_inputs.unpacked_wheel(real_cache_dir))
    touched = [line for line in git.out(["diff", "--name-only", "--diff-filter=AM",
                                         f"{base}..HEAD"], tree).splitlines() if line]

    def paths(level: str) -> toolchain.Paths:
        return toolchain.Paths(tree, wheel, work / level / "generated", work / level / "shim")

    compile_paths = paths("compile")
    compiled: set[Path] = set()
    for unit in compile_units.plan(touched):
        compiled |= make_deps(compile_units.command(unit, compile_paths, work / "obj"))
    assert any("gmock" in str(h) for h in compiled)  # the test unit is compiled at this level
    assert undeclared(compiled, "tensorflow", "compile", real_cache_dir,
                      [tree, work / "compile"]) == []

    core_paths = paths("core-cpu")
    sources = core_cpu.find_sources(tree)
    tested: set[Path] = set()
    for source in [*sources.library, *sources.tests]:
        tested |= make_deps([toolchain.CXX, *toolchain.WHEEL_FLAGS,
                             *toolchain.include_flags(core_paths), str(tree / source)])
    assert undeclared(tested, "tensorflow", "core-cpu", real_cache_dir,
                      [tree, work / "core-cpu"]) == []

    # core-sim: the GPU test with its ODR closure, and the simulator's driver front end (its
    # sources are lmsforge's own files, in this checkout).
    sim_paths = paths("core-sim")
    sim_sources = core_sim.find_sources(tree, touched,
                                        sorted(sim_paths.generated.rglob("*.pb.cc")))
    simulated = ninja_deps(work / "core-sim" / "sim")
    assert any(h.name == "cuda.h" for h in simulated)
    for source in [*sim_sources.library, *sim_sources.tests]:
        simulated |= make_deps(core_sim.command(source, sim_paths, work / "core-sim" / "obj"))
    assert undeclared(simulated, "tensorflow", "core-sim", real_cache_dir,
                      [tree, work / "core-sim", REPO_ROOT / "lmsforge"]) == []
