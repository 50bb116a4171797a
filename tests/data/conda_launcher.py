"""Run the conda 24.7.1 that conda-lock vendors (``conda_lock._vendor.conda``) as ``conda``.

    <venv>/bin/python conda_launcher.py create -p PREFIX ...

conda's CLI imports its subcommands and plugins by their own names (``conda.cli.main_create``),
while the vendored copy imports some of its modules as ``conda_lock._vendor.conda.*``. An import
hook makes both names one module object, so conda's state (its context, its plugin manager)
exists once. The ``conda_lock`` and ``conda_lock._vendor`` packages are entered as bare packages:
their ``__init__`` imports conda-lock's own CLI and dependencies, which conda does not need.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import types
from pathlib import Path

VENDORED = "conda_lock._vendor."


def _bare_package(name: str) -> None:
    """Put package NAME into sys.modules without running its __init__."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"conda_launcher: {name} is not installed in {sys.prefix}")
    module = types.ModuleType(name)
    module.__path__ = list(spec.submodule_search_locations)
    module.__package__ = name
    module.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    module.__spec__.submodule_search_locations = module.__path__
    sys.modules[name] = module


class _Alias(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``conda`` and ``conda.X`` are the modules ``conda_lock._vendor.conda[.X]``."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname != "conda" and not fullname.startswith("conda."):
            return None
        real = importlib.util.find_spec(VENDORED + fullname)
        if real is None:
            return None
        return importlib.machinery.ModuleSpec(
            fullname, self, is_package=real.submodule_search_locations is not None)

    def create_module(self, spec):
        module = importlib.import_module(VENDORED + spec.name)
        # the import system stamps the alias's spec on the module it gets; keep the real one
        self._real_spec = module.__spec__
        return module

    def exec_module(self, module):
        module.__spec__ = self._real_spec


def main() -> int:
    _bare_package("conda_lock")
    _bare_package("conda_lock._vendor")
    sys.meta_path.insert(0, _Alias())
    sys.argv[0] = str(Path(sys.prefix) / "bin" / "conda")
    from conda.cli.main import main as conda_main

    return conda_main()


if __name__ == "__main__":
    sys.exit(main())
