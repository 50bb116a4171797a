"""CMake builds through the object cache's launcher (lmsforge/verify/cache_launcher.py): a second
tree of the same content builds from the cache with the dependency files Ninja needs, and a
changed header in either tree is compiled afresh. Real cmake, ninja and g++."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from lmsforge.verify import cache_launcher, object_cache

pytestmark = pytest.mark.skipif(
    not (shutil.which("cmake") and shutil.which("ninja")),
    reason="cmake and ninja are needed (Debian packages cmake, ninja-build)")

CMAKE = """\
cmake_minimum_required(VERSION 3.18)
project(launched CXX)
configure_file(config.h.in ${CMAKE_BINARY_DIR}/gen/config.h)
add_executable(show main.cc)
target_include_directories(show PRIVATE inc ${CMAKE_BINARY_DIR}/gen)
"""
MAIN = """\
#include <cstdio>
#include "value.h"
#include "config.h"
int main() { std::printf("%d %d %s\\n", VALUE, CONFIGURED, __FILE__); return 0; }
"""


@pytest.fixture(autouse=True)
def own_objects_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests look into the cache they name, not the suite's shared objects folder."""
    monkeypatch.delenv(object_cache.FOLDER_ENV, raising=False)


def _tree(root: Path, value: int = 1) -> Path:
    (root / "inc").mkdir(parents=True)
    (root / "CMakeLists.txt").write_text(CMAKE)
    (root / "main.cc").write_text(MAIN)
    (root / "config.h.in").write_text("#define CONFIGURED 7\n")
    (root / "inc" / "value.h").write_text(f"#define VALUE {value}\n")
    return root


def _build(tree: Path, cache: Path) -> tuple[str, Path]:
    build = tree.parent / f"{tree.name}-build"
    launcher = ";".join(cache_launcher.launcher_words(cache, {"tree": tree, "build": build}))
    subprocess.run(["cmake", "-G", "Ninja", "-S", str(tree), "-B", str(build),
                    f"-DCMAKE_CXX_COMPILER_LAUNCHER={launcher}"],
                   check=True, capture_output=True)
    subprocess.run(["ninja", "-C", str(build)], check=True, capture_output=True)
    shown = subprocess.run([str(build / "show")], check=True, capture_output=True, text=True)
    return shown.stdout, build


def _entries(cache: Path) -> set[Path]:
    return {entry for entry in (cache / "objects").glob("*/*") if not entry.name.startswith(".")}


def _deps(build: Path) -> str:
    return subprocess.run(["ninja", "-C", str(build), "-t", "deps"], check=True,
                          capture_output=True, text=True).stdout


def test_a_second_tree_builds_from_the_cache_with_its_own_dependencies(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    one, two = _tree(tmp_path / "one"), _tree(tmp_path / "two")
    shown, _ = _build(one, cache)
    assert shown == "1 7 /lmsforge/tree/main.cc\n"
    stored = _entries(cache)
    assert len(stored) == 1
    shown, build = _build(two, cache)
    assert shown == "1 7 /lmsforge/tree/main.cc\n"
    assert _entries(cache) == stored  # a hit: nothing new compiled
    # Ninja learnt this tree's headers from the hit: a change to one rebuilds.
    deps = _deps(build)
    assert str(two / "inc" / "value.h") in deps and str(one) not in deps
    (two / "inc" / "value.h").write_text("#define VALUE 2\n")
    shown, _ = _build(two, cache)
    assert shown.startswith("2 7 ")
    assert len(_entries(cache)) == 2


def test_a_generated_header_of_other_content_is_not_a_hit(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    one, two = _tree(tmp_path / "one"), _tree(tmp_path / "two")
    (two / "config.h.in").write_text("#define CONFIGURED 8\n")
    assert _build(one, cache)[0].startswith("1 7 ")
    assert _build(two, cache)[0].startswith("1 8 ")


def test_bad_launcher_arguments_get_one_line_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cache_launcher.main(["--cache", "/tmp/x", "g++", "-c", "a.cc"]) == 2
    assert cache_launcher.main(["--root", "tree", "--", "g++"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("lmsforge cache launcher: ") for line in err)
