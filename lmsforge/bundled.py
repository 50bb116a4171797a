"""Where the files that ship beside the package live: the series (``patches/``), the recipes, the
benchmarks, the GPU guide and the Python packages the recipes ship (``packages/``).

In a source checkout (``pip install -e .``, the README's way) they are the checkout's own folders
next to ``lmsforge/``. A wheel cannot carry files outside its package, so its build copies them
into ``lmsforge/_bundled/`` (setup.py); an installed lmsforge finds them there. Whatever is bundled
in an installed package is read-only for lmsforge: an upgrade replaces it, so a series written
there would be lost.
"""

from __future__ import annotations

from pathlib import Path

PACKAGE_ROOT = Path(__file__).resolve().parent
INSTALLED_ROOT = PACKAGE_ROOT / "_bundled"  # only in a wheel's install
# What setup.py copies into a wheel; every entry is a path relative to the checkout's root.
# (packages/: the Python packages a framework recipe ships beside the framework, such as
# tensorflow-large-model-support.)
SHIPPED = ("patches", "recipes", "bench", "docs/gpu.md", "packages")


def path(name: str) -> Path:
    """The shipped file or folder NAME (one of SHIPPED): the installed copy when this lmsforge
    was installed from a wheel, else the checkout's own."""
    if name not in SHIPPED:
        raise ValueError(f"{name!r} is not shipped with lmsforge")
    installed = INSTALLED_ROOT / name
    if installed.exists():
        return installed
    return PACKAGE_ROOT.parent / name


def is_installed_copy(folder: Path) -> bool:
    """Whether FOLDER is inside the read-only copy an installed wheel carries."""
    try:
        folder.resolve().relative_to(INSTALLED_ROOT)
    except ValueError:
        return False
    return True
