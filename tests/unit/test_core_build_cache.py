"""The core package build compiles through lmsforge's object cache: the environment the build
script reads names the launcher for core builds, and nothing when the cache is off or the profile
is not core. (The real build's use of it: test_core_package.py.)"""

from __future__ import annotations

import os
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from lmsforge.packaging import rattler as build
from lmsforge.verify import cache_launcher, object_cache

BUILD_SH = Path(__file__).resolve().parents[2] / "recipes" / "pytorch" / "core" / "build.sh"
CPU = {"cuda_version": "None"}


def _launcher(profile: str) -> str | None:
    rendered = SimpleNamespace(profile=profile, platform="linux-64")
    with build._build_environment(rendered, CPU, None, None):
        return os.environ.get("LMS_CXX_CACHE_LAUNCHER")


def test_a_core_build_names_the_launcher_on_the_lmsforge_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("LMSFORGE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(object_cache.DISABLE_ENV, raising=False)
    words = _launcher("core").split(";")
    assert "LMS_CXX_CACHE_LAUNCHER" not in os.environ  # only while the build runs
    # What build.sh appends: its two folders by role, then the compiler.
    module = words.index(cache_launcher.__name__)
    tail = ["--root", "tree=/w", "--root", "build=/w/build", "--", "c++", "-c", "x.cc"]
    cache, roots, command = cache_launcher.parse([*words[module + 1:], *tail])
    assert cache == (tmp_path / "cache").resolve()
    assert roots == {Path("/w"): "tree", Path("/w/build"): "build"}
    assert command == ["c++", "-c", "x.cc"]


@pytest.mark.parametrize("profile, off", [("core", "off"), ("core", "OFF"), ("full", "")])
def test_no_launcher_with_the_cache_off_or_outside_the_core_profile(profile, off, monkeypatch):
    if off:  # read as the object cache reads it
        monkeypatch.setenv(object_cache.DISABLE_ENV, off)
    else:
        monkeypatch.delenv(object_cache.DISABLE_ENV, raising=False)
    assert _launcher(profile) is None


def test_build_sh_hands_cmake_the_launcher_with_its_two_folders():
    text = BUILD_SH.read_text()
    [line] = [l for l in text.splitlines() if "CMAKE_CXX_COMPILER_LAUNCHER" in l]
    assert re.search(r"\$\{LMS_CXX_CACHE_LAUNCHER\};--root;tree=\$\{SRC_DIR\};"
                     r"--root;build=\$\{SRC_DIR\}/build;--", line), line
    # ... and the folder it names "build" is the one CMake builds in.
    assert re.search(r'cmake -G Ninja -S "\$\{SRC_DIR\}/lmsforge-c10" -B build ', text)
