"""Which combinations of the variant matrix a build makes on this host, decided for the whole
matrix before anything is built.

The ``core`` recipe takes no compilers from conda channels (``recipes/pytorch/core``), so a core
CUDA variant can only be built with the CUDA toolkit this host has. A plain ``lmsforge build``
therefore builds the CPU variant plus the CUDA variant matching the host toolkit, and says in one
line which CUDA variants it left out and why; a CUDA variant the user asked for by name
(``--variant cuda=12.4``) that the host cannot build is a usage error before anything starts.
The ``full`` profile uses conda's compilers and CUDA packages, so its matrix is built as rendered.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from lmsforge.errors import UsageError
from lmsforge.packaging.toolchain import HOST_PLATFORM, CudaToolkit

CPU = "None"


@dataclass(frozen=True)
class BuildPlan:
    combinations: tuple[Mapping[str, str], ...]  # built in this order, one rattler-build call each
    notices: tuple[str, ...]  # one line each: what was left out and why


def plan(profile: str, platform: str, matrix: Sequence[Mapping[str, str]],
         cuda: CudaToolkit | None, requested_cuda: Sequence[str] = ()) -> BuildPlan:
    """The buildable part of MATRIX, given the host's CUDA toolkit CUDA for PLATFORM (or None).

    REQUESTED_CUDA are the ``cuda`` values the user named with ``--variant``: leaving one of those
    out is refused rather than noticed.
    """
    if profile != "core":
        return BuildPlan(tuple(matrix), ())
    chosen = tuple(c for c in matrix if _buildable(c.get("cuda_version", CPU), cuda))
    left_out = sorted({c["cuda_version"] for c in matrix if c not in chosen}, key=_key)
    if not left_out:
        return BuildPlan(chosen, ())
    asked = [v for v in left_out if v in requested_cuda]
    if asked:
        raise UsageError(f"the core CUDA {', '.join(asked)} variant builds with the host CUDA "
                         f"toolkit, and {_host(platform, cuda)}; build it on a host with CUDA "
                         f"{asked[0]} (CUDA_HOME), or build "
                         f"{_alternatives(cuda)}")
    return BuildPlan(chosen, (_notice(platform, cuda, chosen, left_out),))


def _buildable(cuda_version: str, cuda: CudaToolkit | None) -> bool:
    return cuda_version == CPU or (cuda is not None and cuda.matches(cuda_version))


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(x) for x in version.split("."))


def _host(platform: str, cuda: CudaToolkit | None) -> str:
    if platform != HOST_PLATFORM:
        return f"no {platform} CUDA toolkit here"
    if cuda is None:
        return "no CUDA toolkit here (CUDA_HOME, else /usr/local/cuda)"
    return f"the CUDA toolkit here is {cuda.short} ({cuda.home})"


def _alternatives(cuda: CudaToolkit | None) -> str:
    return "--variant cuda=cpu" + (f" or --variant cuda={cuda.short}" if cuda else "")


def _notice(platform: str, cuda: CudaToolkit | None, chosen: Sequence[Mapping[str, str]],
            left_out: Sequence[str]) -> str:
    building = [("CPU" if c.get("cuda_version", CPU) == CPU else f"CUDA {c['cuda_version']}")
                for c in chosen]
    return (f"{_host(platform, cuda)}: building the {' and '.join(dict.fromkeys(building))} "
            f"core package{'s' if len(set(building)) > 1 else ''} for {platform}; CUDA "
            f"{', '.join(left_out)} left out (build on a host with that toolkit)")
