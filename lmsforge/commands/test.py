"""`lmsforge test`: install from a channel into a fresh prefix and run the LMS tests there."""

from __future__ import annotations

import tempfile
from pathlib import Path

from lmsforge import build, ui
from lmsforge.errors import UsageError
from lmsforge.options import Options


def run(opts: Options, framework: str, tag: str, channels: list[str], prefix: Path | None,
        gpu: bool | None, platform: str = "linux-64") -> int:
    if framework != "pytorch":
        raise UsageError(f"`lmsforge test` runs the PyTorch core package's tests; {framework} "
                         "has no installable test package yet")
    if prefix is not None and prefix.exists() and any(prefix.iterdir()):
        raise UsageError(f"{prefix} is not empty; tests install into a fresh prefix")
    with tempfile.TemporaryDirectory(prefix="lmsforge-test-") as tmp:
        target = prefix or Path(tmp) / "prefix"
        with ui.step(f"installing {build.CORE_PACKAGE} for {platform} from {len(channels)} "
                     "channel(s) and running its LMS tests"):
            result = build.test_installed_core(channels, target, gpu=gpu,
                                               cache_dir=opts.cache.root / "rattler",
                                               platform=platform)
        ui.out.print(f"{result.package} in {target}: {result.why}")
        recorded = result.identity.get("series_hash") or result.identity
        ui.out.print(f"  series: {recorded}")
        for program in result.programs:
            ui.out.print(f"  {program.program}: {program.passed} passed, {program.failed} failed, "
                         f"{program.skipped} skipped (log {program.log})")
            for failure in program.failures:
                ui.out.print(f"    failed: {failure}")
    if tag and result.identity.get("tag") not in (None, tag):
        raise UsageError(f"the channel's package is for {result.identity.get('tag')}, not {tag}")
    return 0 if result.ok else 1
