"""`lmsforge port --previous`: porting again carries what the previous port did.

The toy upstream has an old tag v0.9.0 (B) and a newer v1.0.0 (A), like PyTorch v1.13.1 and
v2.6.0: B names a storage field differently (a content conflict), and B has no config.c (its key
parser lives at the end of alloc.c, so the config patch is a delete/modify conflict whose change
is folded into alloc.c). The first port of the series from A to B is made by hand through the
CLI, plus a post-port fixup of a new file for B's headers. Then the series on A gets fixes and a
new patch, and is ported again: with --previous the port carries the resolution, the fold and the
fixup, and stops nowhere; without it, it stops and loses the fixup.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from fixtures import SERIES_ENV, git, lmsforge, one_line_error, snapshot
from port_helpers import lmsforge_process, stop_line

STORAGE_A = ("struct storage {\n  void *data;\n  unsigned long size;\n  int flags;\n"
             "  int refs;\n  int device;\n};\n")
STORAGE_B = STORAGE_A.replace("unsigned long size", "size_t n")
PARSER = 'int parse_key(const char *k) {\n  if (is(k, "size")) return 1;\n  return 0;\n}\n'
LMS_KEY = '  if (is(k, "lms")) return 7;\n'
ALLOC = "".join(f"int step_{i}(void) {{ return {i}; }}\n" for i in range(30))
LMS_CORE_V1 = ("/* lms core */\n#include <optional>\nint lms_reclaim(void) { return 0; }\n"
               "int lms_pin(void) { return 1; }\nint lms_unpin(void) { return 2; }\n")
LMS_FIX = "int lms_fix(void) { return 3; }\n"
B_HEADER = "#include <c10/optional>\n"


def _commit(tree: Path, slug: str, klass: str, subject: str) -> None:
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", f"{subject}\n\nWhy: a test.\n\nLms-Patch-Id: {slug}\n"
        f"Lms-Class: {klass}\n", env=SERIES_ENV)


def _cli(patches: Path, *args: str):
    return lmsforge("--patches-dir", str(patches), *args)


def _make_upstream(root: Path) -> Path:
    repo = root / "upstream"
    (repo / "src").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "src" / "storage.h").write_text(STORAGE_B)
    (repo / "src" / "alloc.c").write_text(ALLOC + PARSER)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "toy 0.9.0")
    git(repo, "tag", "v0.9.0")
    (repo / "src" / "storage.h").write_text(STORAGE_A)
    (repo / "src" / "alloc.c").write_text(ALLOC)
    (repo / "src" / "config.c").write_text(PARSER)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "toy 1.0.0: the key parser gets its own file")
    git(repo, "tag", "v1.0.0")
    return repo


def _series_v1(tree: Path) -> None:
    (tree / "src" / "lms.c").write_text(LMS_CORE_V1)
    _commit(tree, "lms-core", "new-files", "Add the LMS core")
    storage = tree / "src" / "storage.h"
    storage.write_text(storage.read_text().replace("  unsigned long size;\n",
                                                   "  unsigned long size;\n  void *lms;\n"))
    _commit(tree, "storage-hook", "hook", "Track LMS state per storage")
    config = tree / "src" / "config.c"
    config.write_text(config.read_text().replace('return 1;\n', 'return 1;\n' + LMS_KEY))
    _commit(tree, "config-keys", "hook", "Accept the lms key")


def _fixup(tree: Path, slug: str, edit) -> None:
    """Change the commit of patch SLUG on the branch (fixup + autosquash), as CONTRIBUTING says."""
    target = git(tree, "log", "--format=%H", f"--grep=Lms-Patch-Id: {slug}", "-1")
    edit(tree)
    git(tree, "add", "-A")
    git(tree, "commit", "-q", f"--fixup={target}", env=SERIES_ENV)
    base = git(tree, "merge-base", "HEAD", target + "^")
    subprocess.run(["git", "rebase", "-q", "-i", "--autosquash", base], cwd=tree, check=True,
                   env={**os.environ, **SERIES_ENV,
                        "GIT_SEQUENCE_EDITOR": "true"}, capture_output=True)


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, (path, old)
    path.write_text(text.replace(old, new))


@pytest.fixture
def ported_once(tmp_path: Path) -> dict[str, Path]:
    """The toy's series on A, its first port to B made by hand, both committed in the patches
    folder's git history; then the series on A changed (and committed) and B's moved aside."""
    upstream = _make_upstream(tmp_path)
    patches = tmp_path / "repo" / "patches"
    (patches / "toy").mkdir(parents=True)
    (patches / "toy" / "upstream.yaml").write_text(
        "framework: toy\ngit:\n  url: " + str(upstream) + "\ntags:\n" + "".join(
            f"  {tag}:\n    commit: {git(upstream, 'rev-parse', tag + '^{commit}')}\n"
            for tag in ("v0.9.0", "v1.0.0")))
    repo = patches.parent
    git(repo, "init", "-q", "-b", "main")
    work = tmp_path / "work"
    tree_a = work / "tree-a"
    assert _cli(patches, "apply", "-f", "toy", "-t", "v1.0.0", "--new", "--source", "git",
                "--into", str(tree_a)).exit_code == 0
    _series_v1(tree_a)
    assert _cli(patches, "export", "-f", "toy", "-t", "v1.0.0", "--tree",
                str(tree_a)).exit_code == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "series v1 on A")

    # The first port, by hand: a content conflict, a delete/modify conflict folded into alloc.c.
    first = work / "first-port"
    result = _cli(patches, "port", "-f", "toy", "--from", "v1.0.0", "--to", "v0.9.0",
                  "--source", "git", "--into", str(first))
    assert "port stopped at 0020-storage-hook.patch" in stop_line(result)
    (first / "src" / "storage.h").write_text(
        STORAGE_B.replace("  size_t n;\n", "  size_t n;\n  void *lms;\n"))
    result = _cli(patches, "port", "--continue", "--into", str(first))
    line = stop_line(result)
    assert "port stopped at 0030-config-keys.patch: conflicts in src/config.c (deleted in v0.9.0, changed by the patch" \
        in line
    git(first, "rm", "-q", "src/config.c")
    _edit(first / "src" / "alloc.c", 'return 1;\n', 'return 1;\n' + LMS_KEY)
    git(first, "add", "src/alloc.c")
    assert _cli(patches, "port", "--continue", "--into", str(first)).exit_code == 0
    # The post-port fixup for B's headers, then the export.
    _fixup(first, "lms-core", lambda t: _edit(t / "src" / "lms.c", "#include <optional>\n",
                                              B_HEADER))
    assert _cli(patches, "export", "-f", "toy", "-t", "v0.9.0", "--tree",
                str(first)).exit_code == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "first port to B")

    # The series on A changes: a fix in the new file, one in the storage hook, a new patch.
    _fixup(tree_a, "lms-core", lambda t: (t / "src" / "lms.c").write_text(
        LMS_CORE_V1 + LMS_FIX))
    _fixup(tree_a, "storage-hook", lambda t: _edit(t / "src" / "storage.h", "  int device;\n",
                                                   "  int device;\n  int lms_pins;\n"))
    (tree_a / "src" / "lms_stats.c").write_text("int lms_stats(void) { return 4; }\n")
    _commit(tree_a, "lms-stats", "new-files", "Add LMS statistics")
    assert _cli(patches, "export", "-f", "toy", "-t", "v1.0.0", "--tree",
                str(tree_a)).exit_code == 0
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "series v2 on A")
    previous = tmp_path / "previous-v0.9.0"
    shutil.move(patches / "toy" / "v0.9.0", previous)
    return {"patches": patches, "previous": previous, "work": work, "repo": repo,
            "root": tmp_path}


def _start(env: dict[str, Path], into: Path, *extra: str):
    return _cli(env["patches"], "port", "-f", "toy", "--from", "v1.0.0", "--to", "v0.9.0",
                "--source", "git", "--into", str(into), *extra)


def _files_on_branch(tree: Path) -> dict[str, str]:
    names = git(tree, "ls-tree", "-r", "--name-only", "lms/toy/v0.9.0").splitlines()
    return {name: git(tree, "show", f"lms/toy/v0.9.0:{name}") + "\n" for name in names}


def test_porting_again_with_previous_carries_resolutions_folds_and_fixups(ported_once):
    into = ported_once["work"] / "again"
    result = _start(ported_once, into, "--previous", str(ported_once["previous"]))
    assert result.exit_code == 0, result.output
    files = _files_on_branch(into)
    # The post-port fixup and the fix made on A since, together in the new file.
    assert files["src/lms.c"] == LMS_CORE_V1.replace("#include <optional>\n", B_HEADER) + \
        LMS_FIX
    # The hand resolution on B's field name, with A's new field.
    assert files["src/storage.h"] == STORAGE_B.replace(
        "  size_t n;\n", "  size_t n;\n  void *lms;\n").replace(
        "  int device;\n", "  int device;\n  int lms_pins;\n")
    # The fold: config.c stays away, the key is in alloc.c's parser.
    assert "src/config.c" not in files
    assert files["src/alloc.c"] == ALLOC + PARSER.replace('return 1;\n', 'return 1;\n' + LMS_KEY)
    assert files["src/lms_stats.c"] == "int lms_stats(void) { return 4; }\n"
    folder = ported_once["patches"] / "toy" / "v0.9.0"
    manifest = yaml.safe_load((folder / "series.yaml").read_text())
    assert [p["id"] for p in manifest["patches"]] == ["lms-core", "storage-hook",
                                                       "config-keys", "lms-stats"]
    report = (folder / "PORT-REPORT.md").read_text()
    assert "| lms-core | 0010-lms-core.patch | guided |" in report
    # rerere replays the first port's resolution of the same conflict; the guide agrees.
    assert "| storage-hook | 0020-storage-hook.patch | rerere |" in report
    assert "| config-keys | 0030-config-keys.patch | guided |" in report
    assert "the previous port decided src/alloc.c, src/config.c" in report
    assert "| lms-stats | 0040-lms-stats.patch | picked |" in report
    assert "guided by the previous port of this series" in report
    assert "Range diff against the previous port" in report
    assert "(not in the previous port)" in report  # lms-stats
    # The new series applies with plain `git am` and round-trips.
    assert _cli(ported_once["patches"], "verify", "-f", "toy", "-t", "v0.9.0", "--source",
                "git").exit_code == 0


def test_porting_again_without_previous_stops_at_the_fold_and_loses_the_fixup(ported_once):
    into = ported_once["work"] / "plain"
    result = _start(ported_once, into)
    # rerere replays the storage resolution, but not the delete/modify conflict and its fold.
    assert "port stopped at 0030-config-keys.patch: conflicts in src/config.c (deleted in v0.9.0, changed by the patch" in \
        stop_line(result)
    assert git(into, "show", "lms/toy/v0.9.0:src/lms.c") + "\n" == LMS_CORE_V1 + LMS_FIX


def test_a_conflict_between_the_previous_port_and_a_new_change_stops_like_a_pick(
        ported_once, tmp_path):
    """A change on A to the very line the previous port adapted: a conflict with three
    stages; the resolution is rerere's to record; --continue finishes as `resolved`."""
    patches, repo = ported_once["patches"], ported_once["repo"]
    tree_a = tmp_path / "tree-a2"
    assert _cli(patches, "apply", "-f", "toy", "-t", "v1.0.0", "--source", "git", "--into",
                str(tree_a)).exit_code == 0
    _fixup(tree_a, "lms-core", lambda t: _edit(t / "src" / "lms.c", "#include <optional>\n",
                                               "#include <optional>  /* std */\n"))
    assert _cli(patches, "export", "-f", "toy", "-t", "v1.0.0", "--tree",
                str(tree_a)).exit_code == 0
    git(repo, "commit", "-q", "-am", "series v3 on A")
    into = ported_once["work"] / "conflict"
    result = _start(ported_once, into, "--previous", str(ported_once["previous"]))
    line = stop_line(result)
    assert "port stopped at 0010-lms-core.patch: conflicts in src/lms.c (lines 2-6)" in line
    assert "the previous port of this patch is `git -C" in line
    text = (into / "src" / "lms.c").read_text()
    assert "<<<<<<< previous port\n" + B_HEADER in text
    assert ">>>>>>> v1.0.0 series now\n" in text
    assert git(into, "status", "--porcelain", "src/lms.c") == "UU src/lms.c"
    git(into, "checkout", "--ours", "src/lms.c")  # the previous port's version
    assert (into / "src" / "lms.c").read_text() == LMS_CORE_V1.replace(
        "#include <optional>\n", B_HEADER)
    (into / "src" / "lms.c").write_text(text.split("<<<<<<<")[0] + B_HEADER +
                                        text.split(">>>>>>> v1.0.0 series now\n")[1])
    result = _cli(patches, "port", "--continue", "--into", str(into))
    assert result.exit_code == 0, result.output
    report = (patches / "toy" / "v0.9.0" / "PORT-REPORT.md").read_text()
    assert "| lms-core | 0010-lms-core.patch | resolved |" in report
    assert "resolutions recorded by this port (saved to the shared rerere cache): 1" in report


def test_previous_must_be_a_port_of_the_same_tags(ported_once, tmp_path):
    patches = ported_once["patches"]
    into = tmp_path / "p"
    result = _start(ported_once, into, "--previous", str(tmp_path / "nothing-here"))
    assert result.exit_code == 2
    assert "holds no series" in one_line_error(result)
    # The series of A is not a port: it cannot guide one.
    result = _start(ported_once, into, "--previous", str(patches / "toy" / "v1.0.0"))
    assert result.exit_code == 2 and "is the series of toy v1.0.0" in one_line_error(result)
    # The series it was ported from must be in the patches folder's history.
    shutil.rmtree(ported_once["repo"] / ".git")
    before = snapshot(patches)
    result = _start(ported_once, into, "--previous", str(ported_once["previous"]))
    assert result.exit_code == 2
    assert "no git history to find it in; port without --previous" in one_line_error(result)
    assert snapshot(patches) == before and not into.exists()
    result = _cli(patches, "port", "--continue", "--previous", str(ported_once["previous"]),
                  "--into", str(into))
    assert result.exit_code == 2


@pytest.mark.parametrize("match,when", [
    ("cherry-pick --no-commit", "after"),
    ("merge-file", "after"),
    ("update-ref --no-deref CHERRY_PICK_HEAD", "before"),
    ("update-ref --no-deref CHERRY_PICK_HEAD", "after"),
    ("cherry-pick --continue", "after"),
])
def test_a_killed_guided_pick_resumes_to_the_same_series(ported_once, match, when):
    patches = ported_once["patches"]
    reference = ported_once["work"] / "reference"
    assert _start(ported_once, reference, "--previous",
                  str(ported_once["previous"])).exit_code == 0
    expected = snapshot(patches / "toy" / "v0.9.0")
    shutil.rmtree(patches / "toy" / "v0.9.0")
    into = ported_once["work"] / "killed"
    args = ["--patches-dir", str(patches), "port", "-f", "toy", "--from", "v1.0.0", "--to",
            "v0.9.0", "--source", "git", "--into", str(into), "--previous",
            str(ported_once["previous"])]
    killed = lmsforge_process(args, ported_once["root"],
                              kill={"match": match, "when": when, "nth": "2"})
    assert killed.returncode == -9, killed.stderr
    resumed = lmsforge_process(["--patches-dir", str(patches), "port", "--continue", "--into",
                                str(into)], ported_once["root"])
    assert resumed.returncode == 0, resumed.stderr
    got = snapshot(patches / "toy" / "v0.9.0")
    assert got.keys() == expected.keys()
    for name in expected:
        if name != "PORT-REPORT.md":
            assert got[name] == expected[name], name
    report = got["PORT-REPORT.md"]
    assert isinstance(report, bytes) and b"| config-keys | 0030-config-keys.patch | guided |" \
        in report
