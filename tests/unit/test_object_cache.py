"""The object cache shares compiles between trees of the same content and never hands back an
object that a fresh compile would build differently (lmsforge/verify/object_cache.py). Real g++,
real trees on disk."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from lmsforge.verify import object_cache

MAIN = """\
#include <cstdio>
#include "value.h"
int main() { std::printf("%d %s\\n", VALUE, __FILE__); return 0; }
"""


@pytest.fixture(autouse=True)
def own_objects_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """These tests look into the cache they name, not the suite's shared objects folder."""
    monkeypatch.delenv(object_cache.FOLDER_ENV, raising=False)


def _tree(root: Path, value: int = 1) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "src" / "main.cc").write_text(MAIN)
    (root / "inc").mkdir()
    (root / "inc" / "value.h").write_text(f"#define VALUE {value}\n")
    return root


def _compile(tree: Path, cache: Path, *, syntax_only: bool = False, extra: tuple = ()):
    out = tree / "build"
    out.mkdir(exist_ok=True)
    cmd = ["g++", "-O1", f"-I{tree / 'inc'}", *extra]
    cmd += (["-fsyntax-only", str(tree / "src" / "main.cc")] if syntax_only else
            ["-c", str(tree / "src" / "main.cc"), "-o", str(out / "main.o")])
    return object_cache.compile_unit(cmd, {tree: "tree"}, cache)


def _entries(cache: Path) -> int:
    return sum(1 for shard in (cache / "objects").glob("*") if shard.is_dir()
               for entry in shard.iterdir() if not entry.name.startswith("."))


def _run(tree: Path) -> str:
    binary = tree / "build" / "main"
    subprocess.run(["g++", str(tree / "build" / "main.o"), "-o", str(binary)], check=True)
    return subprocess.run([str(binary)], capture_output=True, text=True, check=True).stdout


def test_a_second_tree_of_the_same_content_gets_the_same_object(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, second = _tree(tmp_path / "one"), _tree(tmp_path / "two")
    assert _compile(first, cache).returncode == 0
    assert _entries(cache) == 1
    assert _compile(second, cache).returncode == 0
    assert _entries(cache) == 1  # a hit: nothing new stored
    assert (first / "build" / "main.o").read_bytes() == (second / "build" / "main.o").read_bytes()
    # __FILE__ names the role, not the folder, so the shared object is right for both trees.
    assert _run(second) == "1 /lmsforge/tree/src/main.cc\n"


def test_a_flag_that_names_the_tree_itself_is_shared(tmp_path: Path) -> None:
    """`-I<tree>` (the levels' own flag) names the root with nothing after it."""
    cache = tmp_path / "cache"
    for name in ("one", "two"):
        tree = _tree(tmp_path / name)
        (tree / "src" / "main.cc").write_text(MAIN.replace('"value.h"', '"inc/value.h"'))
        (tree / "build").mkdir()
        cmd = ["g++", "-O1", f"-I{tree}", "-c", str(tree / "src" / "main.cc"), "-o",
               str(tree / "build" / "main.o")]
        assert object_cache.compile_unit(cmd, {tree: "tree"}, cache).returncode == 0
        assert _entries(cache) == 1


def test_a_changed_header_is_a_new_key(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    _compile(_tree(tmp_path / "one", value=1), cache)
    changed = _tree(tmp_path / "two", value=2)
    assert _compile(changed, cache).returncode == 0
    assert _entries(cache) == 2
    assert _run(changed).startswith("2 ")


def test_a_header_that_shadows_another_is_a_new_key(tmp_path: Path) -> None:
    """A new file earlier on the include path changes what the preprocessor reads: a cache that
    keyed on the headers a unit read last time would hand back the old object."""
    cache = tmp_path / "cache"
    tree = _tree(tmp_path / "one", value=1)
    shadow = tree / "shadow"
    shadow.mkdir()
    (tree / "build").mkdir()
    cmd = ["g++", "-O1", f"-I{shadow}", f"-I{tree / 'inc'}", "-c", str(tree / "src" / "main.cc"),
           "-o", str(tree / "build" / "main.o")]
    assert object_cache.compile_unit(cmd, {tree: "tree"}, cache).returncode == 0
    assert _run(tree).startswith("1 ")
    (shadow / "value.h").write_text("#define VALUE 3\n")
    assert object_cache.compile_unit(cmd, {tree: "tree"}, cache).returncode == 0
    assert _run(tree).startswith("3 ")


def test_other_flags_are_a_new_key(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    tree = _tree(tmp_path / "one")
    _compile(tree, cache)
    _compile(tree, cache, extra=("-O2",))
    assert _entries(cache) == 2


def test_a_failing_unit_is_not_stored_and_says_why_each_time(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    tree = _tree(tmp_path / "one")
    (tree / "src" / "main.cc").write_text("int main() { return undefined_name; }\n")
    for _ in range(2):
        proc = _compile(tree, cache)
        assert proc.returncode != 0 and "undefined_name" in proc.stderr
    assert not (cache / "objects").exists() or _entries(cache) == 0


def test_warnings_come_back_on_a_hit_naming_this_tree(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, second = _tree(tmp_path / "one"), _tree(tmp_path / "two")
    for tree in (first, second):
        (tree / "src" / "main.cc").write_text(MAIN + "int unused() { int x; return 0; }\n")
    assert "unused variable" in _compile(first, cache, extra=("-Wall",)).stderr
    hit = _compile(second, cache, extra=("-Wall",))
    assert _entries(cache) == 1
    assert "unused variable" in hit.stderr and str(second / "src" / "main.cc") in hit.stderr
    assert str(first) not in hit.stderr


def test_a_syntax_check_is_cached_without_an_object(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    first, second = _tree(tmp_path / "one"), _tree(tmp_path / "two")
    assert _compile(first, cache, syntax_only=True).returncode == 0
    assert _compile(second, cache, syntax_only=True).returncode == 0
    assert _entries(cache) == 1
    assert not (second / "build" / "main.o").exists()


def test_off_compiles_afresh_and_stores_nothing(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(object_cache.DISABLE_ENV, "off")
    cache = tmp_path / "cache"
    assert _compile(_tree(tmp_path / "one"), cache).returncode == 0
    assert not (cache / "objects").exists()


def test_a_cache_it_cannot_write_still_compiles(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cache.write_text("a file where the cache folder should be")
    tree = _tree(tmp_path / "one")
    assert _compile(tree, cache).returncode == 0
    assert _run(tree).startswith("1 ")


def _keys(cache: Path) -> set[str]:
    return {entry.name for shard in (cache / "objects").iterdir() if shard.is_dir()
            for entry in shard.iterdir() if not entry.name.startswith(".")}


def test_the_least_recently_used_go_first_past_the_size_cap(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    tree = _tree(tmp_path / "one")
    stored = {}
    for name in ("A", "B"):
        before = _keys(cache) if (cache / "objects").exists() else set()
        _compile(tree, cache, extra=(f"-DWHICH={name}",))
        (stored[name],) = _keys(cache) - before
    size = sum(f.stat().st_size for f in (cache / "objects").rglob("*") if f.is_file()) // 2
    # Room for two entries: a third store prunes the least recently used one.
    monkeypatch.setattr(object_cache, "MAX_BYTES", 2 * size + size // 2)
    monkeypatch.setattr(object_cache, "KEEP_BYTES", 2 * size + size // 4)
    monkeypatch.setattr(object_cache, "PRUNE_EVERY_BYTES", 0)
    old = os.stat(cache).st_mtime - 100
    for key in stored.values():
        os.utime(cache / "objects" / key[:2] / key, (old, old))
    _compile(tree, cache, extra=("-DWHICH=A",))  # a hit makes A the most recently used
    assert _keys(cache) == set(stored.values())
    _compile(tree, cache, extra=("-DWHICH=C",))
    assert stored["A"] in _keys(cache) and stored["B"] not in _keys(cache)
    assert len(_keys(cache)) == 2


def test_a_process_prunes_once_per_share_of_bytes_it_stored(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache"
    tree = _tree(tmp_path / "one")
    _compile(tree, cache, extra=("-DWHICH=A",))
    entry_bytes = sum(f.stat().st_size for f in (cache / "objects").rglob("*") if f.is_file())
    # Room for one entry; this process pruned at its first store and stored nothing since.
    monkeypatch.setattr(object_cache, "MAX_BYTES", entry_bytes + entry_bytes // 2)
    monkeypatch.setattr(object_cache, "KEEP_BYTES", entry_bytes + entry_bytes // 4)
    monkeypatch.setattr(object_cache, "_unpruned_bytes", 0)
    monkeypatch.setattr(object_cache, "PRUNE_EVERY_BYTES", entry_bytes + entry_bytes // 2)
    _compile(tree, cache, extra=("-DWHICH=B",))
    assert len(_keys(cache)) == 2  # over the cap, but not yet a share stored: no listing
    _compile(tree, cache, extra=("-DWHICH=C",))
    assert len(_keys(cache)) == 1  # the share is reached: pruned to under KEEP_BYTES


def test_the_folder_can_be_moved_out_of_the_cache(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    moved = tmp_path / "elsewhere"
    monkeypatch.setenv(object_cache.FOLDER_ENV, str(moved))
    cache = tmp_path / "cache"
    assert _compile(_tree(tmp_path / "one"), cache).returncode == 0
    assert not (cache / "objects").exists()
    assert len([e for e in moved.glob("*/*") if not e.name.startswith(".")]) == 1
