"""The TensorFlow GPU bundle: what a GPU host without network needs to build and run the series'
GPU test, ``gpu_lms_test``, with ``run-gpu.sh`` (``docs/gpu.md``).

The host builds the program itself, with its own compiler: a binary made here links against this
machine's glibc and libstdc++, which a cluster node's older ones may not satisfy, while the
wheel's library (manylinux2014: glibc 2.17) runs on any of them. So the bundle holds the
sources and the build description of the `core-sim` level's program, and what the host lacks:

- ``src/``: the program's translation units (the series' GPU sources and ODR closure, the test,
  the regenerated ``config.pb.cc``, the layout guards of the level's audit) and exactly the
  headers they include, found with the compiler's dependency output (``header_closure``), under
  one folder per include root so the search order is the level's;
- ``wheel/tensorflow/libtensorflow_framework.so.2``: the tensorflow==2.14.1 wheel's library
  without its static symbol table and debug sections (``stripped_library``: what the loader maps
  is byte-identical), and ``wheel/nvidia/cuda_runtime/lib/libcudart.so.11.0`` from
  nvidia-cuda-runtime-cu11, where the library's RUNPATH looks for it, with NVIDIA's licence;
- ``deps/googletest``: googletest's sources (the host may have none);
- ``CMakeLists.txt``, ``sources.cmake``, ``probe/`` and ``run-gpu.sh``; ``patches/``, the series.

``MANIFEST.json`` records the series, the tree and the wheel's identity (the sha256 of the
framework library, checked against the wheel's RECORD, and of the shipped copy).
"""

from __future__ import annotations

import base64
import hashlib
import shutil
import subprocess
import zipfile
from pathlib import Path
from typing import NamedTuple, Sequence

from lmsforge import bundled, git
from lmsforge.errors import LmsforgeError, UsageError
from lmsforge.series import export, worktree
from lmsforge.verify import bundle
from lmsforge.verify.tensorflow_tf import (core_sim, header_closure, inputs, layout_audit,
                                           stripped_library, toolchain)
from lmsforge.verify.tensorflow_tf.header_closure import Root

TEMPLATE_DIR = Path(__file__).resolve().parent / "bundle_template"
GTEST_COUNTS = bundled.path("bench") / "gtest_counts.sh"
GPU_DOC = bundled.path("docs/gpu.md")
GOOGLETEST_PARTS = ("CMakeLists.txt", "googletest/CMakeLists.txt", "googletest/cmake",
                    "googletest/include", "googletest/src")
GOOGLETEST_COPYRIGHT = Path("/usr/share/doc/libgtest-dev/copyright")
FRAMEWORK_IN_BUNDLE = Path("wheel/tensorflow") / inputs.FRAMEWORK_LIBRARY
# Where the library's RUNPATH ($ORIGIN/../nvidia/cuda_runtime/lib) finds the CUDA runtime, as in
# an installed tensorflow[and-cuda].
CUDA_RUNTIME_IN_BUNDLE = Path("wheel/nvidia/cuda_runtime")
GUARDS_IN_BUNDLE = "src/extra/" + layout_audit.GUARD_SOURCE
EXIT_CODES = {"0": "every test passed", "1": "a test failed", "2": "bad usage",
              "3": "the build failed (see build.log)",
              "4": "no CUDA device, or a host the x86_64 wheel cannot run on: nothing ran on a "
                   "GPU"}


class Inputs(NamedTuple):
    """What the bundle is made from besides the tree."""

    core_sim_dir: Path  # the core-sim level's work folder: generated/, shim/, audit/
    wheel: Path  # the tensorflow==2.14.1 wheel file
    unpacked: Path  # its unpacked include folder and framework library
    cuda_runtime: Path  # libcudart.so.11.0 and License.txt
    googletest: Path  # googletest's sources


def find_inputs(cache_root: Path, verify_dir: Path) -> Inputs:
    """The inputs, fetching the wheels as the TensorFlow levels do; VERIFY_DIR is the work folder
    of a `lmsforge verify --level core-sim` of the series."""
    core_sim_dir = verify_dir / "core-sim"
    if not (core_sim_dir / "audit" / layout_audit.GUARD_SOURCE).is_file():
        raise UsageError(f"{core_sim_dir} has no core-sim build; run `lmsforge verify "
                         "--framework tensorflow --tag v2.14.1 --level core-sim` first")
    inputs.ensure_gtest()
    return Inputs(core_sim_dir, inputs.tensorflow_wheel(cache_root),
                  inputs.unpacked_wheel(cache_root), inputs.cuda_runtime(cache_root),
                  bundle.find_googletest())


def write_gpu_bundle(tree: Path, found: Inputs, dest: Path, *, tarball: bool,
                     jobs: int = 2) -> bundle.BundleResult:
    """Write the bundle of the patched TensorFlow work tree TREE to DEST (a new folder, or a
    .tar.gz)."""
    tree = tree.resolve()
    meta = worktree.read_meta(tree)
    if meta is None or meta.framework != "tensorflow":
        raise UsageError(f"{tree} is not an lmsforge TensorFlow work tree; make one with "
                         "`lmsforge apply --framework tensorflow`")
    if git.is_dirty(tree):
        raise UsageError(f"{tree} has uncommitted changes; commit them so the manifest's "
                         "series hash describes what the bundle holds")
    bundle.check_destination(dest, tarball=tarball)
    touched = [line for line in git.out(["diff", "--name-only", "--diff-filter=AM",
                                         f"{meta.base}..HEAD"], cwd=tree).splitlines() if line]
    generated = [found.core_sim_dir / "generated" / proto.replace(".proto", ".pb.cc")
                 for proto in toolchain.PROTOS]
    missing = [path for path in generated if not path.is_file()]
    if missing:
        raise UsageError(f"{missing[0]} is missing; run `lmsforge verify --framework tensorflow "
                         f"--tag {meta.tag} --level core-sim` first")
    sources = core_sim.find_sources(tree, touched, generated)
    paths = toolchain.Paths(tree, inputs.include_dir(found.unpacked),
                            found.core_sim_dir / "generated", found.core_sim_dir / "shim")

    def fill(staging: Path) -> dict[str, object]:
        program = _write_program(sources, paths, found, staging, jobs)
        library = _write_wheel_parts(found, staging)
        _write_build_files(found, staging)
        patch_dir = staging / "patches"
        patch_dir.mkdir()
        patches = [patch_dir / entry.file
                   for entry in export.format_patches(tree, meta.base, "HEAD", patch_dir)]
        return _manifest(tree, meta, patches, staging, program, library)

    return bundle.package(dest, tarball=tarball, fill=fill)


def _write_program(sources: core_sim.Sources, paths: toolchain.Paths, found: Inputs,
                   staging: Path, jobs: int) -> dict[str, object]:
    """The program's sources and headers under src/, and sources.cmake to build them."""
    extra = staging / "src" / "extra"
    extra.mkdir(parents=True)
    units = [*sources.library, *sources.tests]
    # core_sim.command writes tensor.cc's wrapper into the folder it is given: the bundle's.
    commands = [core_sim.command(unit, paths, extra) for unit in units]
    roots = [Root("generated", paths.generated), Root("tree", paths.tree),
             Root("wheel", paths.wheel_include), Root("shim", paths.shim), Root("extra", extra)]
    found_files = header_closure.closure(commands, roots, toolchain.CXX, jobs)
    for root in roots:
        if root.name == "extra":
            continue
        for rel in sorted(found_files.files[root.name]):
            target = staging / "src" / root.name / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root.path / rel, target)
    shutil.copyfile(found.core_sim_dir / "audit" / layout_audit.GUARD_SOURCE,
                    staging / GUARDS_IN_BUNDLE)
    if (paths.tree / "LICENSE").is_file():
        shutil.copyfile(paths.tree / "LICENSE", staging / "src" / "tree" / "LICENSE")
    source_files, options, include_dirs = _cmake_lists(commands, roots)
    (staging / "sources.cmake").write_text(
        "# Written by `lmsforge bundle`: the core-sim level's gpu_lms_test, as it compiles it.\n"
        + _cmake_set("LMS_TF_SOURCES", source_files)
        + _cmake_set("LMS_TF_INCLUDE_DIRS", include_dirs)
        + _cmake_set("LMS_TF_COMPILE_OPTIONS", options)
        + _cmake_set("LMS_TF_GUARD_SOURCE", [GUARDS_IN_BUNDLE]))
    return {"name": core_sim.PROGRAM, "units": len(units),
            # sources and headers the units read, per include root
            "files_by_root": {name: len(files)
                              for name, files in sorted(found_files.files.items())},
            "compile_options": options, "include_dirs": include_dirs,
            "compiler_here": _compiler_version()}


def _cmake_lists(commands: Sequence[Sequence[str]], roots: Sequence[Root]) -> \
        tuple[list[str], list[str], list[str]]:
    """Bundle-relative sources, and the one set of options and include folders the commands
    share (every unit compiles alike; a difference would need a per-unit build)."""
    resolved = [(root.name, root.path.resolve()) for root in roots]
    sources, shapes = [], set()
    for cmd in commands:
        at = cmd.index("-c")
        sources.append(_in_bundle(Path(cmd[at + 1]), resolved))
        flags = tuple(cmd[1:at])
        shapes.add(flags)
    if len(shapes) != 1:
        raise LmsforgeError("the GPU test's units compile with different options; the bundle's "
                            "CMakeLists.txt builds them with one set")
    (flags,) = shapes
    include_dirs = [_in_bundle(Path(word[2:]), resolved) for word in flags
                    if word.startswith("-I")]
    options = [word for word in flags if not word.startswith("-I")]
    return sources, options, include_dirs


def _in_bundle(path: Path, roots: Sequence[tuple[str, Path]]) -> str:
    path = path.resolve()
    holding = [(name, root) for name, root in roots if path.is_relative_to(root)]
    if not holding:
        raise LmsforgeError(f"{path} lies outside every folder the bundle carries")
    name, root = max(holding, key=lambda item: len(item[1].parts))
    rel = path.relative_to(root).as_posix()
    return f"src/{name}" + ("" if rel == "." else f"/{rel}")


def _cmake_set(name: str, values: Sequence[str]) -> str:
    quoted = "\n".join(f'  "{value}"' for value in values)
    return f"set({name}\n{quoted})\n"


def _write_wheel_parts(found: Inputs, staging: Path) -> dict[str, object]:
    """The framework library (stripped, proven equal where loaded) and the CUDA 11.8 runtime,
    with their licences; returns the wheel's identity for the manifest."""
    library = inputs.library_dir(found.unpacked) / inputs.FRAMEWORK_LIBRARY
    original_sha256 = _sha256(library)
    recorded = _record_sha256(found.wheel, f"tensorflow/{inputs.FRAMEWORK_LIBRARY}")
    if recorded != original_sha256:
        raise LmsforgeError(f"{library} is not the one {found.wheel.name} records (sha256 "
                            f"{original_sha256[:12]}, RECORD {recorded[:12]}); delete "
                            f"{found.unpacked} and run again")
    target = staging / FRAMEWORK_IN_BUNDLE
    target.parent.mkdir(parents=True)
    stripped_library.strip_copy(library, target)
    with zipfile.ZipFile(found.wheel) as wheel:
        license_name = f"tensorflow-{inputs.TF_VERSION}.dist-info/LICENSE"
        (target.parent / "LICENSE").write_bytes(wheel.read(license_name))
    runtime = staging / CUDA_RUNTIME_IN_BUNDLE
    (runtime / "lib").mkdir(parents=True)
    shutil.copyfile(found.cuda_runtime / inputs.CUDA_RUNTIME_LIBRARY,
                    runtime / "lib" / inputs.CUDA_RUNTIME_LIBRARY)
    shutil.copyfile(found.cuda_runtime / inputs.CUDA_RUNTIME_LICENSE,
                    runtime / inputs.CUDA_RUNTIME_LICENSE)
    return {
        "tensorflow": {
            "wheel": found.wheel.name, "version": inputs.TF_VERSION,
            "framework_library": inputs.FRAMEWORK_LIBRARY,
            "framework_sha256": original_sha256, "framework_sha256_in_wheel_record": True,
            "shipped": {"path": FRAMEWORK_IN_BUNDLE.as_posix(), "sha256": _sha256(target),
                        "bytes": target.stat().st_size,
                        "made_with": " ".join(stripped_library.STRIP_COMMAND),
                        "why": "the static symbol table and debug sections (14 MB) do not fit "
                               "the bundle; every section the loader maps and every program "
                               "header were checked byte-identical to the wheel's"},
            "licence": "Apache-2.0 (wheel/tensorflow/LICENSE)"},
        "cuda_runtime": {
            "wheel": f"{inputs.CUDA_RUNTIME_WHEEL} {inputs.CUDA_RUNTIME_VERSION}",
            "library": inputs.CUDA_RUNTIME_LIBRARY,
            "sha256": _sha256(runtime / "lib" / inputs.CUDA_RUNTIME_LIBRARY),
            "licence": "NVIDIA CUDA EULA (wheel/nvidia/cuda_runtime/License.txt): Attachment A "
                       "lists libcudart.so as distributable, unmodified, with an application "
                       "that uses it"},
    }


def _write_build_files(found: Inputs, staging: Path) -> None:
    for name in ("CMakeLists.txt", bundle.ENTRY_SCRIPT):
        shutil.copyfile(TEMPLATE_DIR / name, staging / name)
    (staging / bundle.ENTRY_SCRIPT).chmod(0o755)
    (staging / "probe").mkdir()
    shutil.copyfile(TEMPLATE_DIR / "device_probe.cc", staging / "probe" / "device_probe.cc")
    shutil.copyfile(GTEST_COUNTS, staging / "probe" / GTEST_COUNTS.name)
    googletest = staging / "deps" / "googletest"
    for part in GOOGLETEST_PARTS:
        source, target = found.googletest / part, googletest / part
        if source.is_dir():
            shutil.copytree(source, target)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target)
    if GOOGLETEST_COPYRIGHT.is_file():
        shutil.copyfile(GOOGLETEST_COPYRIGHT, googletest / "COPYRIGHT")
    if GPU_DOC.is_file():
        (staging / "docs").mkdir()
        shutil.copyfile(GPU_DOC, staging / "docs" / GPU_DOC.name)


def _manifest(tree: Path, meta: worktree.WorkTree, patches: list[Path], staging: Path,
              program: dict[str, object], wheel: dict[str, object]) -> dict[str, object]:
    return {
        **bundle.manifest_head(tree, meta, patches,
                               src_sha256=bundle.folder_hash(staging / "src")),
        "program": program,
        **wheel,
        "inputs": {"googletest": bundle.debian_version("libgtest-dev")},
        "entry": bundle.ENTRY_SCRIPT,
        "exit_codes": EXIT_CODES,
    }


def _record_sha256(wheel: Path, member: str) -> str:
    """The hex sha256 the wheel's RECORD gives for MEMBER."""
    with zipfile.ZipFile(wheel) as archive:
        record = next(name for name in archive.namelist() if name.endswith(".dist-info/RECORD"))
        for line in archive.read(record).decode().splitlines():
            name, digest, _size = line.rsplit(",", 2)
            if name == member and digest.startswith("sha256="):
                raw = base64.urlsafe_b64decode(digest[len("sha256="):] + "==")
                return raw.hex()
    raise LmsforgeError(f"{wheel.name}'s RECORD has no sha256 for {member}")


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _compiler_version() -> str:
    proc = subprocess.run([toolchain.CXX, "--version"], capture_output=True, text=True)
    return (proc.stdout.splitlines() or ["unknown"])[0]
