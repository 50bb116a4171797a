#!/usr/bin/env python3
"""Job matrices and the publish set of ci/build-publish.yml (Python 3.10+, standard library only).

  python ci/build_matrix.py matrix --framework pytorch render.json >> "$GITHUB_OUTPUT"
      reads `lmsforge render --profile full --json` and prints two lines, `builds=[…]` (one entry
      per platform × CUDA × Python: one full build each) and `groups=[…]` (one entry per
      platform × CUDA: its verify, core package, test and the one publish of its packages).

  python ci/build_matrix.py collect GROUP_JSON ARTIFACTS DEST
      copies into DEST/<subdir>/ the packages the group's builds left under ARTIFACTS (one
      folder per build artifact): every per-Python package once, and each output that every
      Python's build makes again (libtorch: Python-independent, one per platform × CUDA) from
      the group's first build only, so that one job publishes it once.

Runner labels carry the CUDA flavour of the package build strings: `lms-x64-cpu`,
`lms-x64-cuda124`, `lms-x64-cuda126` (each CUDA build needs the host toolkit of exactly that
version; a CPU build runs and tests where there is no GPU).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

RUNNER_ARCH = {"linux-64": "x64", "linux-ppc64le": "ppc64le"}
KNOWN_KEYS = {"python", "cuda_version"}
SUBDIRS = ("linux-64", "linux-ppc64le", "noarch")


def flavour(cuda: str) -> str:
    """`cpu` or `cuda124`, as in the package build strings."""
    return "cpu" if cuda == "None" else "cuda" + cuda.replace(".", "")


def runner_label(platform: str, cuda: str) -> str:
    return f"lms-{RUNNER_ARCH[platform]}-{flavour(cuda)}"


def matrices(render: list[dict], framework: str) -> tuple[list[dict], list[dict]]:
    """(builds, groups) for RENDER, the output of `lmsforge render --profile full --json`."""
    builds: list[dict] = []
    groups: dict[tuple[str, str], dict] = {}
    seen: dict[tuple[str, str], dict[str, int]] = {}
    for rendered in render:
        platform = rendered["platform"]
        for combination, outputs in zip(rendered["matrix"], rendered["outputs"], strict=True):
            unknown = set(combination) - KNOWN_KEYS
            if unknown or "python" not in combination:
                raise SystemExit(f"build_matrix: variant keys {sorted(combination)} of "
                                 f"{platform}; this script knows {sorted(KNOWN_KEYS)}")
            cuda = combination.get("cuda_version", "None")
            python = combination["python"]
            name = f"full-{platform}-{flavour(cuda)}-py{python}"
            key = (platform, cuda)
            group = groups.setdefault(key, {
                "platform": platform, "cuda": cuda, "flavour": flavour(cuda),
                "runner": runner_label(platform, cuda),
                # TensorFlow has no GPU level (no harness, no bundle): core-cpu is the most its
                # series can prove anywhere, and `verify --require` fails on a skipped level.
                "verify_level": ("core-gpu" if framework == "pytorch" and cuda != "None"
                                 else "core-cpu"),
                "test": "--cpu" if cuda == "None" else "--gpu",
                "artifacts": f"full-{platform}-{flavour(cuda)}-py*",
                "builds": [], "shared": [], "owner": name})
            group["builds"].append(name)
            counts = seen.setdefault(key, {})
            for stem in outputs:
                counts[stem] = counts.get(stem, 0) + 1
            builds.append({"platform": platform, "cuda": cuda, "python": python,
                           "runner": group["runner"], "artifact": name})
    for key, group in groups.items():
        group["shared"] = sorted(s for s, n in seen[key].items() if n > 1)
    return builds, list(groups.values())


def collect(group: dict, artifacts: Path, dest: Path) -> list[Path]:
    """Copy the group's packages from ARTIFACTS to DEST/<subdir>/; returns the copies."""
    found: dict[str, list[Path]] = {}
    for package in sorted(artifacts.rglob("*.conda")):
        found.setdefault(package.name, []).append(package)
    missing = [b for b in group["builds"] if not (artifacts / b).is_dir()]
    if missing and len(group["builds"]) > 1:
        raise SystemExit(f"build_matrix: no artifact for {', '.join(missing)} in {artifacts}")
    copied = []
    shared = {f"{s}.conda" for s in group["shared"]}
    for name, copies in found.items():
        if name in shared:
            copies = [c for c in copies if group["owner"] in c.parts]
            if not copies:
                raise SystemExit(f"build_matrix: {name} is not in {group['owner']}, the build "
                                 "it is published from")
        elif len(copies) > 1:
            raise SystemExit(f"build_matrix: {name} came out of {len(copies)} builds: "
                             + ", ".join(str(c) for c in copies))
        source = copies[0]
        if source.parent.name not in SUBDIRS:
            raise SystemExit(f"build_matrix: {source} is not in a channel subdir "
                             f"({', '.join(SUBDIRS)}); upload the build's whole channel folder")
        target = dest / source.parent.name / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, target)
        copied.append(target)
    if not copied:
        raise SystemExit(f"build_matrix: no packages under {artifacts}")
    return copied


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="build_matrix.py")
    sub = parser.add_subparsers(dest="command", required=True)
    m = sub.add_parser("matrix")
    m.add_argument("--framework", required=True, choices=["pytorch", "tensorflow"])
    m.add_argument("render", type=Path)
    c = sub.add_parser("collect")
    c.add_argument("group")
    c.add_argument("artifacts", type=Path)
    c.add_argument("dest", type=Path)
    args = parser.parse_args(argv)
    if args.command == "matrix":
        builds, groups = matrices(json.loads(args.render.read_text()), args.framework)
        print("builds=" + json.dumps(builds, separators=(",", ":")))
        print("groups=" + json.dumps(groups, separators=(",", ":")))
    else:
        for path in collect(json.loads(args.group), args.artifacts, args.dest):
            print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
