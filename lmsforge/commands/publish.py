"""`lmsforge publish`: add packages to a private channel atomically, never losing what is there."""

from __future__ import annotations

from pathlib import Path

from lmsforge import ui
from lmsforge.channel import address as channel_address, publisher
from lmsforge.options import Options, channel_timeout_s


def run(opts: Options, target: str, packages: list[Path]) -> int:
    channel_address.parse(target)  # a malformed target fails before any progress line
    channel_timeout_s()  # and so does a malformed LMSFORGE_CHANNEL_TIMEOUT
    with ui.step(f"publishing {len(packages)} package(s)"):
        result = publisher.publish(packages, target)
    for warning in result.warnings:
        ui.err.print(f"warning: {warning}", markup=False)
    for name in result.added:
        ui.out.print(f"added {name}")
    for name in result.unchanged:
        ui.out.print(f"already there (identical) {name}")
    ui.out.print(f"channel {result.channel}: {len(result.added)} added, "
                 f"{len(result.unchanged)} unchanged")
    if not result.indexed:
        ui.out.print("the server took the packages but its index does not list them yet; "
                     "installs will see them once it has re-indexed")
    return 0
