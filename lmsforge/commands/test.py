"""`lmsforge test`: install the tag's package from a channel into a fresh prefix and run the LMS
tests there.

The package is chosen up front: the solver spec pins the version the tag's series builds
(``pytorch-lms-core ==2.6.0`` for v2.6.0) and the build kind (``cpu_*`` or ``cuda*``), so a
channel holding several tags tests the one asked for, and a tag the channels do not have is
refused before anything is installed.
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from lmsforge import ui
from lmsforge.channel import installer
from lmsforge.channel.credentials import redact
from lmsforge.errors import UsageError
from lmsforge.options import Options, channel_timeout_s
from lmsforge.packaging import rattler as build
from lmsforge.packaging.identity import series_identity


def run(opts: Options, framework: str, tag: str, channels: list[str], prefix: Path | None,
        gpu: bool | None, platform: str = "linux-64") -> int:
    if framework != "pytorch":
        raise UsageError(f"`lmsforge test` runs the PyTorch core package's tests; {framework} "
                         "has no installable test package yet")
    channel_timeout_s()  # a malformed LMSFORGE_CHANNEL_TIMEOUT fails before any work
    if prefix is not None and prefix.exists() and any(prefix.iterdir()):
        raise UsageError(f"{prefix} is not empty; tests install into a fresh prefix")
    # refuses a tag without a series here; the hash needs no git (test runs on plain hosts)
    series = series_identity(opts, framework, tag, check_patch_ids=False)
    version = build.core_package_version(tag)
    _check_channels_have(tag, version, channels, gpu, opts.cache.root / "rattler", platform)
    with tempfile.TemporaryDirectory(prefix="lmsforge-test-") as tmp:
        target = prefix or Path(tmp) / "prefix"
        with ui.step(f"installing {build.CORE_PACKAGE} {version} for {platform} from "
                     f"{len(channels)} channel(s) and running its LMS tests"):
            result = build.test_installed_core(channels, target, gpu=gpu, version=version,
                                               cache_dir=opts.cache.root / "rattler",
                                               platform=platform)
        ui.out.print(f"{result.package} in {target}: {result.why}")
        recorded = result.identity.get("series_hash")
        if recorded == series.series_hash:
            ui.out.print(f"  series: {recorded} (the series in patches/ for {tag})")
        else:
            ui.out.print(f"  series: {recorded or result.identity} (not the series in patches/ "
                         f"for {tag}, {series.series_hash}: built from another revision)")
        # a temporary prefix is deleted when this block ends: its logs would be pointers to
        # nothing, so they are kept in the cache and those copies are what we print
        logs = ({p.log: p.log for p in result.programs} if prefix is not None else
                keep_logs([p.log for p in result.programs],
                          opts.cache.log_dir, f"test-{framework}-{tag}"))
        for program in result.programs:
            ui.out.print(f"  {program.program}: {program.passed} passed, {program.failed} failed, "
                         f"{program.skipped} skipped (log {logs[program.log]})")
            for failure in program.failures:
                ui.out.print(f"    failed: {failure}")
    if result.identity.get("tag") not in (None, tag):
        raise UsageError(f"the channel's {build.CORE_PACKAGE} {version} was built for "
                         f"{result.identity.get('tag')}, not {tag}; rebuild and republish it")
    return 0 if result.ok else 1


def keep_logs(logs: Sequence[Path], log_dir: Path, name: str) -> dict[Path, Path]:
    """Copy LOGS into a new folder ``LOG_DIR/NAME-<UTC time>-<unique>/``; return where each one
    is now (a log that was never written maps to itself, so the line still names it)."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    log_dir.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix=f"{name}-{stamp}-", dir=log_dir))
    kept = {}
    for log in logs:
        kept[log] = log
        if log.is_file():
            kept[log] = Path(shutil.copy2(log, folder / log.name))
    return kept


def _check_channels_have(tag: str, version: str, channels: list[str], gpu: bool | None,
                         cache_dir: Path, platform: str) -> None:
    """Refuse, before installing anything, when no channel has the tag's package of the kind the
    tests need (a CUDA build for the GPU tests, a CPU build otherwise)."""
    import rattler

    from lmsforge.verify.levels import have_cuda_device

    if gpu is None:
        gpu = have_cuda_device()[0]
    records = installer.available(build.CORE_PACKAGE, channels, platform, cache_dir=cache_dir)
    shown = redact(", ".join(channels))
    if platform != str(rattler.Subdir.current()):
        shown += f" for {platform}"
    versions = sorted({v for v, _ in records})
    if version not in versions:
        has = f"they have {', '.join(versions)}" if versions else "they have none"
        raise UsageError(f"no {build.CORE_PACKAGE} for {tag} (version {version}) in {shown} "
                         f"({has}); build and publish it first: lmsforge build --framework "
                         f"pytorch --tag {tag} --profile core")
    kind = "cuda" if gpu else "cpu_"
    if not any(v == version and b.startswith(kind) for v, b in records):
        raise UsageError(f"{shown} have {build.CORE_PACKAGE} {version} but no "
                         f"{'CUDA' if gpu else 'CPU'} build of it; publish that variant, or run "
                         f"with {'--cpu' if gpu else '--gpu on a GPU host'}")
