"""Frameworks: one module per framework with the level runner that verifies its series above apply.

Must not be imported by what it configures: only commands/ look a runner up and hand it to verify/.

Adding a framework means adding ``patches/<name>/upstream.yaml`` (its sources, read by
``series/catalogue.py``) and, for levels above `apply`, a module ``lmsforge/frameworks/<name>.py``
with ``run_level(level, ctx)``.
"""

from __future__ import annotations

import importlib

from lmsforge.verify.levels import LevelRunner


def level_runner(framework: str) -> LevelRunner | None:
    try:
        module = importlib.import_module(f"lmsforge.frameworks.{framework}")
    except ModuleNotFoundError as exc:
        if exc.name == f"lmsforge.frameworks.{framework}":
            return None
        raise
    return getattr(module, "run_level", None)
