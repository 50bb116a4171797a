"""Pin files next to a folder channel: for each variant built, a conda spec file that names its
packages by exact build, so a cluster installs what was built and tested, not what the solver
prefers on the day (``conda create --override-channels -c CHANNEL --file PIN_FILE``).

They live in ``<channel>/pins/<platform>/``, a folder conda does not read as a subdir, and
are rewritten whole (a temporary file, then a rename) each time the variant is built.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Mapping, Sequence

FOLDER = "pins"


def pin_file_name(framework: str, tag: str, profile: str,
                  combination: Mapping[str, str]) -> str:
    """``pytorch-v2.6.0-core-cuda_version-13.0.txt``: one file per variant combination."""
    label = "-".join(f"{key}-{value}" for key, value in sorted(combination.items()))
    name = "-".join(part for part in (framework, tag, profile, label) if part)
    return re.sub(r"[^\w.+-]", "_", name) + ".txt"


def write_pin_file(channel: Path, platform: str, file_name: str,
                   packages: Sequence[tuple[str, str, str]], about: str) -> Path:
    """Write the pins of PACKAGES ((name, version, build) each) for PLATFORM; returns the file."""
    folder = channel / FOLDER / platform
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"# {about}",
             f"# conda create -p PREFIX --override-channels -c {channel} --file THIS_FILE",
             *sorted(f"{name}=={version}={build}" for name, version, build in packages)]
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".pins-")
    with os.fdopen(fd, "w") as stream:
        stream.write("\n".join(lines) + "\n")
    os.chmod(tmp, 0o644)
    target = folder / file_name
    os.replace(tmp, target)
    return target
