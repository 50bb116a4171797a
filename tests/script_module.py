"""Scripts that are not modules of a package (examples/, bench/, ci/), loaded by path for their
tests."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType


def load_script(path: Path, name: str | None = None, *, register: bool = False) -> ModuleType:
    """The module that PATH's code makes, named NAME (PATH's stem by default). REGISTER puts it
    in sys.modules before it runs, for code that looks its own module up by name (dataclasses
    with postponed annotations, pickle)."""
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    assert spec is not None and spec.loader is not None, path
    module = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
