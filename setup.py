"""What pyproject.toml cannot say: a wheel carries the files that live beside the package in a
checkout (the series, the recipes, the benchmarks, the GPU guide), copied into
lmsforge/_bundled/, where an installed lmsforge finds them (lmsforge/bundled.py)."""

import runpy
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
# lmsforge/bundled.py's list, read without importing the package (its dependencies may be missing)
SHIPPED = runpy.run_path(str(HERE / "lmsforge" / "bundled.py"))["SHIPPED"]
LEFT_OUT = shutil.ignore_patterns("__pycache__", "*.pyc", "build")


class BuildPyWithShippedFiles(build_py):
    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return  # an editable install reads the checkout's own folders
        target = Path(self.build_lib) / "lmsforge" / "_bundled"
        for name in SHIPPED:
            source, copy = HERE / name, target / name
            copy.parent.mkdir(parents=True, exist_ok=True)
            if source.is_dir():
                shutil.copytree(source, copy, ignore=LEFT_OUT, dirs_exist_ok=True)
            else:
                shutil.copy2(source, copy)


setup(cmdclass={"build_py": BuildPyWithShippedFiles})
