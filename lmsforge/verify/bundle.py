"""A self-contained folder or tarball from which a GPU host without network runs the GPU level.

The bundle holds the patched ``c10/`` subtree, the lmsforge package (its c10 build description),
the benchmark programs (``bench/``), the build inputs a bare CUDA host may lack (fmt and cpuinfo
headers, the cpuinfo library, googletest sources, ``nvml.h``), the series' patch files, and
``run-gpu.sh``, which builds everything, runs the CUDA tests and the benchmarks and writes the
results into a folder (``docs/gpu.md``). ``MANIFEST.json`` records what it was made from.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, NamedTuple

import lmsforge
from lmsforge import bundled, git
from lmsforge.cache import default_cache_dir
from lmsforge.errors import LmsforgeError, UsageError
from lmsforge.series import export, manifest as series_mod, worktree
from lmsforge.verify.pytorch_c10 import inputs

MAX_BUNDLE_BYTES = 64 * 1000 * 1000  # what a GPU host is sent, unpacked and packed alike
MANIFEST = "MANIFEST.json"
ENTRY_SCRIPT = "run-gpu.sh"
FORMAT = 1

PACKAGE_DIR = Path(lmsforge.__file__).resolve().parent
BENCH_DIR = bundled.path("bench")
GPU_DOC = bundled.path("docs/gpu.md")

# Files of the tree besides c10/ that travel: the licences c10 is distributed under, and the root
# CMakeLists.txt, where the c10 harness reads the tree's C++ standard (14 for 1.x).
TREE_EXTRAS = ("LICENSE", "NOTICE", "CMakeLists.txt")
LIBRARY_DIRS = (Path("/usr/lib/x86_64-linux-gnu"), Path("/usr/lib/aarch64-linux-gnu"),
                Path("/usr/lib64"), Path("/usr/lib"), Path("/usr/local/lib"))
INCLUDE_DIRS = (Path("/usr/include"), Path("/usr/local/include"))
GOOGLETEST_SOURCES = (Path("/usr/src/googletest"),)
_SKIPPED = ("__pycache__", "*.pyc", ".pytest_cache", "build")
_SKIP = shutil.ignore_patterns(*_SKIPPED)


class BundleResult(NamedTuple):
    path: Path  # the folder, or the .tar.gz file
    size_bytes: int  # unpacked size (for a tarball: the larger of packed and unpacked)
    files: int
    manifest: dict[str, object]


@dataclass(frozen=True)
class BuildInputs:
    """Where this machine keeps the build inputs that a bare CUDA host may lack."""

    fmt_include: Path  # folder holding fmt/
    cpuinfo_header: Path
    cpuinfo_library: Path  # the real shared object (libcpuinfo.so.N), not the link
    googletest: Path  # googletest sources with their top CMakeLists.txt
    nvml_header: Path


def find_build_inputs(cache_root: Path | None = None) -> BuildInputs:
    """Locate the inputs (installing the Debian packages when root, like the c10 harness)."""
    inputs.ensure_debian_packages()
    fmt = _first([d for d in INCLUDE_DIRS if (d / "fmt" / "format.h").is_file()],
                 "fmt headers (fmt/format.h): install libfmt-dev")
    cpuinfo_header = _first([d / "cpuinfo.h" for d in INCLUDE_DIRS
                             if (d / "cpuinfo.h").is_file()],
                            "cpuinfo.h: install libcpuinfo-dev")
    library = _first([d / "libcpuinfo.so" for d in LIBRARY_DIRS
                      if (d / "libcpuinfo.so").exists()],
                     "libcpuinfo.so: install libcpuinfo-dev")
    googletest = find_googletest()
    nvml = inputs.nvml_include_dir(cache_root or default_cache_dir()) / "nvml.h"
    return BuildInputs(fmt, cpuinfo_header, library.resolve(), googletest, nvml)


def find_googletest() -> Path:
    """googletest's sources with their top CMakeLists.txt (Debian's libgtest-dev)."""
    return _first([d for d in GOOGLETEST_SOURCES if (d / "CMakeLists.txt").is_file()
                   and (d / "googletest" / "src" / "gtest-all.cc").is_file()],
                  "googletest sources (/usr/src/googletest): install libgtest-dev")


def write_bundle(tree: Path, dest: Path, *, tarball: bool,
                 build_inputs: BuildInputs | None = None) -> BundleResult:
    """Write the GPU bundle of the patched work tree TREE to DEST (a new folder, or a .tar.gz).

    TREE must be a clean lmsforge work tree (``lmsforge apply``): its recorded upstream identity
    and the series hash of its commits go into the manifest.
    """
    tree = tree.resolve()
    meta = worktree.read_meta(tree)
    if meta is None:
        raise UsageError(f"{tree} is not an lmsforge work tree; make one with `lmsforge apply`")
    if not (tree / "c10" / "core").is_dir():
        raise UsageError(f"{tree} has no c10/ folder: the GPU bundle is for PyTorch trees")
    if git.is_dirty(tree):
        raise UsageError(f"{tree} has uncommitted changes; commit them so the manifest's "
                         "series hash describes what the bundle holds")
    check_destination(dest, tarball=tarball)
    found = build_inputs or find_build_inputs()

    def fill(staging: Path) -> dict[str, object]:
        patches = _copy_contents(tree, meta, staging, found)
        return _manifest(tree, meta, patches, staging, found)

    return package(dest, tarball=tarball, fill=fill)


def check_destination(dest: Path, *, tarball: bool) -> None:
    """DEST must be new (or an empty folder), and a tarball's name must end in .tar.gz."""
    if tarball and not dest.name.endswith(".tar.gz"):
        raise UsageError(f"{dest}: a tarball's name must end in .tar.gz")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise UsageError(f"{dest} exists; pass a new path")


def package(dest: Path, *, tarball: bool,
            fill: Callable[[Path], dict[str, object]]) -> BundleResult:
    """Stage a bundle with FILL (which writes the contents into the folder it is given and
    returns the manifest), check its size unpacked and packed, and move it to DEST (a folder,
    or a .tar.gz): nothing is written to DEST when a step fails."""
    check_destination(dest, tarball=tarball)
    with tempfile.TemporaryDirectory(prefix="lmsforge-bundle-") as tmp:
        name = dest.name.removesuffix(".tar.gz") if tarball else dest.name
        staging = Path(tmp) / name
        staging.mkdir()
        manifest = fill(staging)
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        files, unpacked = _count(staging)
        _check_size(unpacked, "unpacked")
        dest.parent.mkdir(parents=True, exist_ok=True)
        if tarball:
            packed = Path(tmp) / dest.name
            with tarfile.open(packed, "w:gz") as archive:
                archive.add(staging, arcname=name, filter=_normalise)
            _check_size(packed.stat().st_size, "packed")
            shutil.move(str(packed), dest)
        else:
            if dest.exists():
                dest.rmdir()
            shutil.move(str(staging), dest)
    return BundleResult(dest, unpacked, files, manifest)


def _copy_contents(tree: Path, meta: worktree.WorkTree, staging: Path,
                   found: BuildInputs) -> list[Path]:
    shutil.copytree(tree / "c10", staging / "tree" / "c10", ignore=_SKIP)
    for extra in TREE_EXTRAS:
        if (tree / extra).is_file():
            shutil.copy2(tree / extra, staging / "tree" / extra)
    shutil.copytree(PACKAGE_DIR, staging / "lmsforge",  # the shipped files go beside it
                    ignore=shutil.ignore_patterns(*_SKIPPED, bundled.INSTALLED_ROOT.name))
    if not (BENCH_DIR / ENTRY_SCRIPT).is_file():
        raise LmsforgeError(f"{BENCH_DIR / ENTRY_SCRIPT} is missing: lmsforge runs from a "
                            "source checkout that has bench/")
    shutil.copytree(BENCH_DIR, staging / "bench", ignore=_SKIP)
    entry = staging / ENTRY_SCRIPT
    shutil.move(str(staging / "bench" / ENTRY_SCRIPT), entry)
    entry.chmod(0o755)
    if GPU_DOC.is_file():
        (staging / "docs").mkdir()
        shutil.copy2(GPU_DOC, staging / "docs" / GPU_DOC.name)

    deps = staging / "deps"
    shutil.copytree(found.fmt_include / "fmt", deps / "fmt" / "include" / "fmt")
    (deps / "cpuinfo" / "include").mkdir(parents=True)
    shutil.copy2(found.cpuinfo_header, deps / "cpuinfo" / "include" / "cpuinfo.h")
    (deps / "cpuinfo" / "lib").mkdir()
    shutil.copy2(found.cpuinfo_library, deps / "cpuinfo" / "lib" / found.cpuinfo_library.name)
    shutil.copytree(found.googletest, deps / "googletest", ignore=_SKIP)
    (deps / "nvml" / "include").mkdir(parents=True)
    shutil.copy2(found.nvml_header, deps / "nvml" / "include" / "nvml.h")
    for package, target in (("libfmt-dev", "fmt"), ("libcpuinfo0", "cpuinfo")):
        copyright_file = Path("/usr/share/doc") / package / "copyright"
        if copyright_file.is_file():
            shutil.copy2(copyright_file, deps / target / "COPYRIGHT")

    patch_dir = staging / "patches"
    patch_dir.mkdir()
    entries = export.format_patches(tree, meta.base, "HEAD", patch_dir)
    return [patch_dir / entry.file for entry in entries]


def manifest_head(tree: Path, meta: worktree.WorkTree, patches: list[Path],
                  **tree_hashes: str) -> dict[str, object]:
    """What every bundle's MANIFEST.json starts with: its format, the series and the tree it
    was made from; TREE_HASHES name the folder hashes of what it carries of the tree."""
    return {
        "format": FORMAT,
        "created_by": f"lmsforge {lmsforge.__version__}",
        "framework": meta.framework,
        "tag": meta.tag,
        "series_hash": series_mod.series_hash(patches),
        "patches": [path.name for path in patches],
        "tree": {"head": git.out(["rev-parse", "HEAD"], tree), "tree": git.tree_of(tree, "HEAD"),
                 "base": meta.base, "upstream": meta.identity, **tree_hashes},
    }


def _manifest(tree: Path, meta: worktree.WorkTree, patches: list[Path], staging: Path,
              found: BuildInputs) -> dict[str, object]:
    return {
        **manifest_head(tree, meta, patches,
                        c10_sha256=folder_hash(staging / "tree" / "c10")),
        "inputs": {
            "fmt": debian_version("libfmt-dev"),
            "cpuinfo": debian_version("libcpuinfo-dev"),
            "cpuinfo_library": found.cpuinfo_library.name,
            "googletest": debian_version("libgtest-dev"),
            "nvml": f"{inputs.NVML_WHEEL} {inputs.NVML_VERSION}",
        },
        "entry": ENTRY_SCRIPT,
        "exit_codes": {"0": "tests passed and benchmark data checked",
                       "1": "a test or a benchmark check failed",
                       "2": "bad usage", "3": "the build failed (see build.log)",
                       "4": "no CUDA toolkit or no CUDA device: nothing ran on a GPU"},
    }


def folder_hash(root: Path) -> str:
    """sha256 over the relative paths and contents of every file under ROOT, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        data = path.read_bytes()
        digest.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def debian_version(package: str) -> str | None:
    if shutil.which("dpkg-query") is None:
        return None
    proc = subprocess.run(["dpkg-query", "-W", "-f=${Version}", package],
                          capture_output=True, text=True)
    return f"{package} {proc.stdout.strip()}" if proc.returncode == 0 else None


def _count(root: Path) -> tuple[int, int]:
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    return len(files), sum(p.stat().st_size for p in files)


def _check_size(size: int, what: str) -> None:
    if size >= MAX_BUNDLE_BYTES:
        raise LmsforgeError(f"the bundle is {size / 1e6:.1f} MB {what}, over the "
                            f"{MAX_BUNDLE_BYTES / 1e6:.0f} MB a GPU host is sent; "
                            "nothing was written")


def _normalise(info: tarfile.TarInfo) -> tarfile.TarInfo:
    # Reproducible ownership; the mode (run-gpu.sh's executable bit) stays.
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    return info


def _first(candidates: list[Path], missing: str) -> Path:
    if not candidates:
        raise LmsforgeError(f"build input not found: {missing}")
    return candidates[0]


__all__ = ["BundleResult", "BuildInputs", "MAX_BUNDLE_BYTES", "MANIFEST", "ENTRY_SCRIPT",
           "check_destination", "debian_version", "find_build_inputs", "find_googletest",
           "folder_hash", "package", "write_bundle"]
