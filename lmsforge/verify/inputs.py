"""What each verification level needs from outside the upstream tree, declared once per level.

A level's inputs are checked, and installed where lmsforge installs them (Debian packages as
root, saying so in one line; wheels unpacked into the cache, never installed), before the level
starts (``verify/levels.dispatch``), so a missing input is named up front rather than surfacing
minutes later as a compiler error. `lmsforge doctor` prints the same declarations with what is
present here. A CI test (``tests/integration/test_declared_inputs_cover_builds.py``) checks
that every header a level's build reads comes from the tree, the compiler or an input declared
for that level.

To add a level or a framework, add its entry to ``LEVEL_INPUTS``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sysconfig
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Mapping, Union

from lmsforge.errors import LmsforgeError
from lmsforge.upstream import debian
from lmsforge.verify.pytorch_c10 import inputs as c10_inputs
from lmsforge.verify.pytorch_codegen import inputs as codegen_inputs
from lmsforge.verify.tensorflow_tf import inputs as tf_inputs


@dataclass(frozen=True)
class Tool:
    """A program on PATH, from a Debian package."""

    binary: str
    debian: str

    @property
    def label(self) -> str:
        return self.binary

    def location(self, cache_root: Path) -> Path | None:
        found = shutil.which(self.binary)
        return Path(found) if found else None


@dataclass(frozen=True)
class DebianPackage:
    package: str

    @property
    def label(self) -> str:
        return self.package

    def location(self, cache_root: Path) -> Path | None:
        return Path("/") if not debian.missing_packages((self.package,)) else None


@dataclass(frozen=True)
class Wheel:
    """Files from a PyPI wheel, unpacked into the cache (never installed)."""

    spec: str  # name==version
    cached: Callable[[Path], Path | None]  # its folder in the cache, if it is there
    fetch: Callable[[Path], object]  # download and unpack it into the cache

    @property
    def label(self) -> str:
        return self.spec

    def location(self, cache_root: Path) -> Path | None:
        return self.cached(cache_root)


@dataclass(frozen=True)
class CudaRuntime:
    """CUDA headers and libcudart: the host toolkit, else the same files from PyPI wheels."""

    @property
    def label(self) -> str:
        wheels = ", ".join(f"{n}=={v}" for n, v in c10_inputs.CUDA_WHEELS)
        return f"CUDA headers + libcudart ({c10_inputs.cuda_home()}, else {wheels})"

    def location(self, cache_root: Path) -> Path | None:
        return c10_inputs.cached_cuda_root(cache_root)


@dataclass(frozen=True)
class PythonModule:
    """A module the level imports in lmsforge's interpreter (declared in pyproject.toml)."""

    module: str
    distribution: str

    @property
    def label(self) -> str:
        return f"Python module {self.module}"

    def location(self, cache_root: Path) -> Path | None:
        spec = importlib.util.find_spec(self.module)
        return Path(spec.origin) if spec and spec.origin else None


@dataclass(frozen=True)
class PythonHeaders:
    """``Python.h`` of the running interpreter."""

    @property
    def label(self) -> str:
        return "Python.h"

    def location(self, cache_root: Path) -> Path | None:
        include = Path(sysconfig.get_paths()["include"])
        return include if (include / "Python.h").is_file() else None


Input = Union[Tool, DebianPackage, Wheel, CudaRuntime, PythonModule, PythonHeaders]
LevelInputs = tuple[Input, ...]

COMPILER = Tool("g++", "g++")
CMAKE_NINJA = (Tool("cmake", "cmake"), Tool("ninja", "ninja-build"))


def _c10_build() -> LevelInputs:
    """c10 + c10_cuda and the LMS googletest programs (CMakeLists.txt configures all of them)."""
    nvml = Wheel(f"{c10_inputs.NVML_WHEEL}=={c10_inputs.NVML_VERSION}",
                 c10_inputs.cached_nvml_include_dir, c10_inputs.nvml_include_dir)
    return (COMPILER, *CMAKE_NINJA, *(DebianPackage(p) for p in c10_inputs.DEBIAN_PACKAGES),
            CudaRuntime(), nvml)


def _pytorch_codegen() -> LevelInputs:
    """torchgen in this interpreter, then syntax-compiles against library headers from wheels."""
    wheels = tuple(Wheel(f"{w.name}=={w.version}",
                         lambda root, w=w: codegen_inputs.cached_headers(root, w),
                         lambda root, w=w: codegen_inputs.wheel_headers(root, w))
                   for w in codegen_inputs.WHEELS)
    return (PythonModule("yaml", "PyYAML"), PythonModule("typing_extensions", "typing_extensions"),
            PythonHeaders(), *wheels)


def _tensorflow(*, compile_level: bool) -> LevelInputs:
    tf_wheel = _tensorflow_wheel()
    gtest = tuple(DebianPackage(p) for p in tf_inputs.GTEST_PACKAGES)
    if not compile_level:
        return (COMPILER, *gtest, tf_wheel)
    # The compile level also compiles the series' test unit, which includes gmock.
    numpy = Wheel(f"numpy=={tf_inputs.NUMPY_VERSION}", tf_inputs.cached_numpy_dir,
                  tf_inputs.numpy_include)
    return (COMPILER, *(DebianPackage(p) for p in tf_inputs.PROTOC_PACKAGES), *gtest, tf_wheel,
            numpy, PythonHeaders())


def _tensorflow_wheel() -> Wheel:
    return Wheel(f"tensorflow=={tf_inputs.TF_VERSION}", tf_inputs.cached_wheel_dir,
                 tf_inputs.unpacked_wheel)


def _tensorflow_sim() -> LevelInputs:
    """The GPU test with its ODR closure (config.pb.* regenerated by protoc), the layout audit
    (binutils reads the framework library and the objects), and the simulator's driver front
    end, built with CMake against the wheel's CUDA 11.8 headers and, for its engine, the CUDA
    runtime headers."""
    binutils = tuple(Tool(binary, "binutils") for binary in ("objdump", "nm", "c++filt"))
    return (COMPILER, *CMAKE_NINJA, *binutils,
            *(DebianPackage(p) for p in tf_inputs.PROTOC_PACKAGES),
            *(DebianPackage(p) for p in tf_inputs.GTEST_PACKAGES), _tensorflow_wheel(),
            CudaRuntime())


LEVEL_INPUTS: Mapping[str, Mapping[str, LevelInputs]] = {
    "pytorch": {
        "compile": (*_c10_build(), *_pytorch_codegen()),
        "core-cpu": _c10_build(),
        # The simulated runtime is in lmsforge; its c10_cuda still compiles against CUDA headers.
        "core-sim": _c10_build(),
        "core-gpu": _c10_build(),
    },
    "tensorflow": {
        "compile": _tensorflow(compile_level=True),
        "core-cpu": _tensorflow(compile_level=False),
        "core-sim": _tensorflow_sim(),
    },
}


def declared(framework: str, level: str) -> LevelInputs:
    return LEVEL_INPUTS.get(framework, {}).get(level, ())


def can_install(item: Input) -> bool:
    """Whether lmsforge gets this input itself when the level runs."""
    if isinstance(item, (Tool, DebianPackage)):
        return os.geteuid() == 0 and shutil.which("apt-get") is not None
    return isinstance(item, (Wheel, CudaRuntime))


def ensure_level(framework: str, level: str, cache_root: Path,
                 say: Callable[[str], None]) -> None:
    """Check every declared input of the level and get the ones lmsforge installs; raises a
    one-line LmsforgeError naming what is missing and how to get it."""
    items = declared(framework, level)
    what = f"{framework} {level}"
    modules = [i for i in items if isinstance(i, PythonModule) and i.location(cache_root) is None]
    if modules:
        names = " ".join(i.distribution for i in modules)
        raise LmsforgeError(f"{what} needs the Python packages {names} in this interpreter; "
                            f"reinstall lmsforge (`pip install -e .`) or `pip install {names}`")
    if any(isinstance(i, PythonHeaders) and i.location(cache_root) is None for i in items):
        raise LmsforgeError(f"{what} needs Python.h of this interpreter "
                            f"({sysconfig.get_paths()['include']}); install python3-dev")
    packages = [i.package for i in items if isinstance(i, DebianPackage)]
    packages += [i.debian for i in items if isinstance(i, Tool) and i.location(cache_root) is None]
    debian.ensure_packages(packages, f"{what} needs them", say)
    tools = [i.binary for i in items if isinstance(i, Tool) and i.location(cache_root) is None]
    if tools:
        raise LmsforgeError(f"{what} needs {', '.join(tools)} on PATH; install them")
    for item in items:
        if isinstance(item, Wheel) and item.location(cache_root) is None:
            from lmsforge import ui

            with ui.step(f"{what}: downloading {item.spec} from PyPI into {cache_root} (not "
                         "installed)"):
                item.fetch(cache_root)
        elif isinstance(item, CudaRuntime):
            c10_inputs.ensure_cuda_toolkit(cache_root)


@dataclass(frozen=True)
class InputState:
    framework: str
    level: str
    present: tuple[str, ...]
    installed_by_level: tuple[str, ...]  # missing now; the level gets them itself
    missing: tuple[str, ...]  # missing, and the user must get them


def survey(cache_root: Path) -> list[InputState]:
    """Every declared input of every level, and whether it is here (for `lmsforge doctor`)."""
    states = []
    for framework, levels in LEVEL_INPUTS.items():
        for level, items in levels.items():
            present, later, missing = [], [], []
            for item in items:
                if item.location(cache_root) is not None:
                    present.append(item.label)
                elif can_install(item):
                    later.append(item.label)
                else:
                    missing.append(item.label)
            states.append(InputState(framework, level, tuple(present), tuple(later),
                                     tuple(missing)))
    return states
