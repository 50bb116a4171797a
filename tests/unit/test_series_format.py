"""The series loader names every problem precisely; the patch reader names damaged hunks."""

from __future__ import annotations

from pathlib import Path

import pytest

from lmsforge.errors import UsageError
from lmsforge.series import manifest as series, patchfile


def problems_of(folder: Path) -> list[str]:
    with pytest.raises(series.SeriesProblems) as info:
        series.load(folder)
    return info.value.problems


def test_exported_series_loads(toy_series):
    loaded = series.load(toy_series["series"])
    assert [p.id for p in loaded.patches] == ["lms-core", "allocator-hook", "storage-hook"]
    assert [p.klass for p in loaded.patches] == ["new-files", "hook", "hook"]
    assert loaded.patches[0].purpose == "Add the LMS core"
    assert len(loaded.base) == 40
    assert loaded.upstream["kind"] == "archive"


def test_series_hash_changes_with_any_byte(toy_series):
    loaded = series.load(toy_series["series"])
    first = loaded.content_hash()
    path = toy_series["series"] / "0010-lms-core.patch"
    path.write_text(path.read_text().replace("Why:", "Why :"))
    assert series.series_hash(loaded.paths()) != first


def test_every_problem_is_named(toy_series):
    folder = toy_series["series"]
    manifest = folder / "series.yaml"
    text = manifest.read_text()
    text = text.replace("class: new-files", "class: feature", 1)
    text = text.replace("format: 1", "format: 9")
    manifest.write_text(text)
    (folder / "0040-stray.patch").write_text("From x\n")
    (folder / "0030-storage-hook.patch").unlink()
    (folder / "series").write_text("0010-lms-core.patch\n")
    found = problems_of(folder)
    joined = "\n".join(found)
    assert "format 9 is not supported" in joined
    assert "class `feature` is not one of" in joined
    assert "0040-stray.patch is in the folder but not in series.yaml" in joined
    assert "0030-storage-hook.patch is listed in series.yaml but missing" in joined
    assert "the `series` file lists" in joined
    assert len(found) >= 5


def test_missing_fields_and_bad_numbering(toy_series):
    folder = toy_series["series"]
    manifest = folder / "series.yaml"
    text = manifest.read_text().replace("file: 0020-allocator-hook.patch",
                                        "file: 0025-allocator-hook.patch")
    text = text.replace("base: ", "bass: ")
    manifest.write_text(text)
    joined = "\n".join(problems_of(folder))
    assert "`base` is missing" in joined
    assert "should be 0020-allocator-hook.patch" in joined


def test_trailer_must_match_manifest(toy_series):
    folder = toy_series["series"]
    manifest = folder / "series.yaml"
    manifest.write_text(manifest.read_text().replace("class: hook", "class: policy", 1))
    assert any("trailer `Lms-Class` does not match class `policy`" in p
               for p in problems_of(folder))


def test_missing_manifest(tmp_path):
    assert problems_of(tmp_path) == ["series.yaml is missing"]


def test_not_a_mapping(tmp_path):
    (tmp_path / "series.yaml").write_text("- just\n- a list\n")
    assert problems_of(tmp_path) == ["series.yaml must be a mapping at the top level"]


def test_patch_reader_counts_lines_and_trailers(toy_series):
    parsed = patchfile.parse(toy_series["series"] / "0020-allocator-hook.patch")
    assert parsed.subject == "Reclaim in the allocator"
    assert parsed.trailers == {"Lms-Class": "hook", "Lms-Patch-Id": "allocator-hook"}
    (change,) = parsed.files
    assert (change.path, change.added, change.removed, change.new_file) == \
        ("src/alloc.c", 1, 0, False)


@pytest.mark.parametrize("damage, expected", [
    (lambda t: t[: t.index("diff --git")], "no `diff --git` section"),
    (lambda t: "garbage\n" + t, "does not start with a `From <commit>` line"),
    (lambda t: t.replace("@@ -19,", "@@ -x19,"), "hunk 1 of src/alloc.c has a malformed"),
    (lambda t: t.replace(" int step_21(void) { return 21; }\n", ""),
     "hunk 1 of src/alloc.c is truncated or edited"),
])
def test_damaged_patch_names_file_and_hunk(toy_series, tmp_path, damage, expected):
    text = (toy_series["series"] / "0020-allocator-hook.patch").read_text()
    broken = tmp_path / "0020-allocator-hook.patch"
    broken.write_text(damage(text))
    with pytest.raises(UsageError) as info:
        patchfile.parse(broken)
    assert expected in str(info.value)
    assert str(info.value).startswith("0020-allocator-hook.patch line ")


def test_binary_garbage_is_refused(tmp_path):
    path = tmp_path / "0010-x.patch"
    path.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(UsageError, match="not UTF-8"):
        patchfile.parse(path)


def _one_file_patch(tmp_path: Path, headers: str, body: str) -> Path:
    path = tmp_path / "0010-x.patch"
    path.write_text("From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\n"
                    "Subject: [PATCH] x\n\nx\n---\n" + headers + body + "-- \n2.39.0\n")
    return path


SYMLINK = ("diff --git a/{p} b/{p}\nnew file mode 120000\nindex 0000000..1111111\n"
           "--- /dev/null\n+++ b/{p}\n")


@pytest.mark.parametrize("headers, body, expected", [
    (SYMLINK.format(p="src/link"), "@@ -0,0 +1 @@\n+../README\n\\ No newline at end of file\n",
     []),  # a symlink to a file in the tree is fine
    (SYMLINK.format(p="src/link"), "@@ -0,0 +1 @@\n+../../up\n\\ No newline at end of file\n",
     ["patch adds a symlink pointing outside the tree: src/link -> ../../up"]),
    (("diff --git a/src/a.c b/src/b.c\nsimilarity index 100%\nrename from src/a.c\n"
      "rename to ../b.c\n"), "", ["patch writes outside the tree: ../b.c"]),
    ('diff --git a/x b/x\n--- a/x\n+++ "b/src/../../q.c"\n', "@@ -1 +1 @@\n-a\n+b\n",
     ["patch writes outside the tree: src/../../q.c"]),
])
def test_paths_outside_the_tree_are_named(tmp_path, headers, body, expected):
    assert patchfile.parse(_one_file_patch(tmp_path, headers, body)).outside_the_tree() == expected
