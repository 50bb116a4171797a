"""apply / export / verify --level apply / status on real git repositories."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from fixtures import SERIES_ENV, commit_patch, git, lmsforge, one_line_error, snapshot


def cli(toy, *args: str):
    return lmsforge("--patches-dir", str(toy["patches"]), *args)


def test_apply_makes_the_branch_with_one_commit_per_patch(toy_series, tmp_path):
    into = tmp_path / "fresh"
    result = cli(toy_series, "apply", "-f", "toy", "-t", "v1.0.0", "--into", str(into))
    assert result.exit_code == 0, result.output
    assert git(into, "rev-parse", "--abbrev-ref", "HEAD") == "lms/toy/v1.0.0"
    subjects = git(into, "log", "--format=%s", "v1.0.0..HEAD").splitlines()
    assert subjects == ["Track LMS state per storage", "Reclaim in the allocator",
                        "Add the LMS core"]
    assert git(into, "rev-parse", "HEAD^{tree}") == git(toy_series["tree"], "rev-parse",
                                                        "HEAD^{tree}")


def test_export_files_follow_the_format(toy_series):
    folder = toy_series["series"]
    names = sorted(p.name for p in folder.iterdir())
    assert names == ["0010-lms-core.patch", "0020-allocator-hook.patch",
                     "0030-storage-hook.patch", "series", "series.yaml"]
    assert (folder / "series").read_text().split() == names[:3]
    text = (folder / "0020-allocator-hook.patch").read_text()
    assert text.startswith("From 0000000000000000000000000000000000000000 ")
    assert "Lms-Patch-Id: allocator-hook" in text
    assert "\n-- \n" not in text  # no git version signature: exports do not depend on git


def test_reexport_of_unchanged_branch_is_byte_identical(toy_series):
    before = snapshot(toy_series["series"])
    result = cli(toy_series, "export", "-f", "toy", "-t", "v1.0.0", "--tree",
                 str(toy_series["tree"]))
    assert result.exit_code == 0 and "unchanged" in result.stdout
    assert snapshot(toy_series["series"]) == before


def test_export_after_a_fixup_rewrites_only_that_patch(toy_series):
    tree = toy_series["tree"]
    before = snapshot(toy_series["series"])
    (tree / "src" / "lms.c").write_text("int lms_reclaim(void) { return 1; }\n")
    git(tree, "commit", "-q", "-a", "--fixup", "HEAD~2", env=SERIES_ENV)
    git(tree, "-c", "sequence.editor=true", "rebase", "-q", "-i", "--autosquash", "v1.0.0",
        env={**SERIES_ENV, "GIT_EDITOR": "true"})
    result = cli(toy_series, "export", "-f", "toy", "-t", "v1.0.0", "--tree", str(tree))
    assert result.exit_code == 0, result.output
    after = snapshot(toy_series["series"])
    changed = sorted(k for k in after if after[k] != before.get(k))
    assert changed == ["0010-lms-core.patch", "series.yaml"]


def test_verify_apply_level_passes_and_reports_json(toy_series, tmp_path):
    report = tmp_path / "report.json"
    result = cli(toy_series, "verify", "-f", "toy", "-t", "v1.0.0", "--json", "--report",
                 str(report))
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert json.loads(report.read_text()) == data
    (series,) = data["series"]
    (level,) = series["results"]
    assert level["level"] == "apply" and level["status"] == "pass"
    facts = level["facts"]
    assert facts["patches"] == 3
    assert (facts["new_files"], facts["new_lines"]) == (1, 1)
    assert (facts["upstream_files"], facts["upstream_lines"]) == (2, 2)
    assert facts["tree"] == git(toy_series["tree"], "rev-parse", "HEAD^{tree}")
    assert series["identity"]["kind"] == "archive"


def test_verify_on_the_git_source_of_the_same_tag_also_passes(toy_series):
    result = cli(toy_series, "verify", "-f", "toy", "-t", "v1.0.0", "--source", "git")
    assert result.exit_code == 0, result.output


def test_verify_levels_above_apply_are_skipped_without_a_harness(toy_series):
    result = cli(toy_series, "verify", "-f", "toy", "-t", "v1.0.0", "--level", "core-cpu",
                 "--json")
    assert result.exit_code == 0
    statuses = {r["level"]: r["status"] for r in json.loads(result.stdout)["series"][0]["results"]}
    assert statuses == {"apply": "pass", "compile": "skipped", "core-cpu": "skipped"}
    required = cli(toy_series, "verify", "-f", "toy", "-t", "v1.0.0", "--level", "core-cpu",
                   "--require")
    assert required.exit_code == 1


def test_verify_catches_whitespace_errors(toy_series):
    tree = toy_series["tree"]
    commit_patch(tree, "trailing-space", "hook", "Add a line with trailing space",
                 lambda t: (t / "README").write_text("toy framework \n"))
    assert cli(toy_series, "export", "-f", "toy", "-t", "v1.0.0", "--tree",
               str(tree)).exit_code == 0
    result = cli(toy_series, "verify", "-f", "toy", "-t", "v1.0.0")
    assert result.exit_code == 1
    assert "whitespace" in result.stdout


def test_status_reports_sync_state(toy_series):
    tree = toy_series["tree"]
    result = cli(toy_series, "status", "--tree", str(tree), "--json")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["commits"] == 3 and data["series_state"].startswith("in sync")
    commit_patch(tree, "extra", "docs", "Document LMS",
                 lambda t: (t / "LMS.md").write_text("LMS\n"))
    data = json.loads(cli(toy_series, "status", "--tree", str(tree), "--json").stdout)
    assert data["commits"] == 4 and "not exported" in data["series_state"]


# --- bad input: one line, the right exit code, nothing changed on disk ------------------------


def test_tag_without_series_says_how_to_create_one(toy_series, tmp_path):
    before = snapshot(tmp_path)
    result = cli(toy_series, "apply", "-f", "toy", "-t", "v2.0.0", "--into",
                 str(tmp_path / "t"))
    assert result.exit_code == 2
    line = one_line_error(result)
    assert "no LMS series for v2.0.0 yet; series exist for v1.0.0" in line
    assert "lmsforge port --framework toy --from v1.0.0 --to v2.0.0" in line
    assert snapshot(tmp_path) == before


def test_unknown_framework_and_tag_list_the_known_ones(toy_series):
    result = cli(toy_series, "apply", "-f", "nope", "-t", "v1.0.0")
    assert result.exit_code == 2 and "known: toy" in one_line_error(result)
    result = cli(toy_series, "apply", "-f", "toy", "-t", "latest")
    assert result.exit_code == 2
    assert "known tags: v2.0.0, v1.1.0, v1.0.0, v0.9.0" in one_line_error(result)


def test_apply_into_non_empty_folder_is_refused(toy_series, tmp_path):
    target = tmp_path / "busy"
    target.mkdir()
    (target / "notes.txt").write_text("mine\n")
    before = snapshot(target)
    result = cli(toy_series, "apply", "-f", "toy", "-t", "v1.0.0", "--into", str(target))
    assert result.exit_code == 2 and "not empty" in one_line_error(result)
    assert snapshot(target) == before


def test_apply_into_dirty_work_tree_is_refused(toy_series):
    tree = toy_series["tree"]
    (tree / "README").write_text("local edit\n")
    git(tree, "branch", "-m", "lms/toy/v1.0.0", "my-work")
    before = snapshot(tree)
    result = cli(toy_series, "apply", "-f", "toy", "-t", "v1.0.0", "--into", str(tree))
    assert result.exit_code == 2 and "uncommitted changes" in one_line_error(result)
    assert snapshot(tree) == before


def test_apply_into_clean_work_tree_keeps_the_users_branch(toy_series):
    tree = toy_series["tree"]
    git(tree, "branch", "-m", "lms/toy/v1.0.0", "my-work")
    mine = git(tree, "rev-parse", "my-work")
    result = cli(toy_series, "apply", "-f", "toy", "-t", "v1.0.0", "--into", str(tree))
    assert result.exit_code == 0, result.output
    assert git(tree, "rev-parse", "my-work") == mine
    assert git(tree, "rev-parse", "lms/toy/v1.0.0^{tree}") == git(tree, "rev-parse",
                                                                  "my-work^{tree}")


def _copy_series(toy, tag: str) -> Path:
    src = toy["series"]
    dest = src.parent / tag
    shutil.copytree(src, dest)
    manifest = dest / "series.yaml"
    manifest.write_text(manifest.read_text().replace("tag: v1.0.0", f"tag: {tag}"))
    return dest


def test_series_that_does_not_apply_names_patch_file_and_hunk(toy_series, tmp_path):
    _copy_series(toy_series, "v2.0.0")  # storage.h changed upstream in v2.0.0
    target = tmp_path / "new"
    result = cli(toy_series, "apply", "-f", "toy", "-t", "v2.0.0", "--into", str(target))
    assert result.exit_code == 2
    line = one_line_error(result)
    assert "0030-storage-hook.patch does not apply: src/storage.h hunk 1" in line
    assert not target.exists()


def test_series_that_does_not_apply_leaves_an_existing_tree_as_it_was(toy_series):
    _copy_series(toy_series, "v2.0.0")
    tree = toy_series["tree"]
    git(tree, "branch", "-m", "lms/toy/v1.0.0", "my-work")
    refs_before = git(tree, "for-each-ref")
    files_before = snapshot(tree)
    result = cli(toy_series, "apply", "-f", "toy", "-t", "v2.0.0", "--into", str(tree),
                 "--source", "git")
    assert result.exit_code == 2
    assert git(tree, "for-each-ref") == refs_before
    assert git(tree, "rev-parse", "--abbrev-ref", "HEAD") == "my-work"
    after = snapshot(tree)
    assert {k: v for k, v in after.items() if not k.startswith(".git/")} == \
        {k: v for k, v in files_before.items() if not k.startswith(".git/")}
    assert "lms/toy/v2.0.0" not in git(tree, "branch", "--list")


def test_truncated_patch_is_named_with_file_and_hunk(toy_series, tmp_path):
    patch = toy_series["series"] / "0020-allocator-hook.patch"
    text = patch.read_text()
    patch.write_text(text.replace("+int lms_reclaim(void);\n", ""))
    result = cli(toy_series, "apply", "-f", "toy", "-t", "v1.0.0", "--into",
                 str(tmp_path / "t"))
    assert result.exit_code == 2
    line = one_line_error(result)
    assert "0020-allocator-hook.patch" in line and "hunk 1 of src/alloc.c" in line
    assert not (tmp_path / "t").exists()


def test_hand_edited_patch_is_detected(toy_series, tmp_path):
    patch = toy_series["series"] / "0010-lms-core.patch"
    patch.write_text(patch.read_text().replace("return 0;", "return 7;"))
    result = cli(toy_series, "verify", "-f", "toy", "-t", "v1.0.0")
    assert result.exit_code == 2
    assert "0010-lms-core.patch: its diff changed since export" in one_line_error(result)


def test_malformed_manifest_names_the_line(toy_series, tmp_path):
    manifest = toy_series["series"] / "series.yaml"
    manifest.write_text(manifest.read_text() + "patches: [unclosed\n")
    result = cli(toy_series, "verify", "-f", "toy", "-t", "v1.0.0")
    assert result.exit_code == 2
    assert "series.yaml is not valid YAML at line" in one_line_error(result)


def test_carries_says_whether_a_tree_holds_the_series_exactly(toy_series):
    """`lmsforge plan` builds the cache's tree as it is when it carries the series (re-applying
    would touch every patched file and make the incremental build recompile them)."""
    from lmsforge.series import manifest, worktree

    tree = toy_series["tree"]
    base = git(tree, "rev-parse", "v1.0.0")
    patches = manifest.load(toy_series["series"]).paths()
    assert worktree.carries(tree, base, patches)
    assert not worktree.carries(tree, base, patches[:-1])  # a patch short
    assert not worktree.carries(tree, git(tree, "rev-parse", "HEAD~1"), patches)  # another base
    target = next(p for p in sorted(tree.rglob("*")) if p.is_file() and ".git" not in p.parts)
    target.write_text(target.read_text() + "edited\n")
    assert not worktree.carries(tree, base, patches)  # an uncommitted change
    git(tree, "checkout", "--", str(target.relative_to(tree)))
    (tree / "untracked.txt").write_text("x")
    assert not worktree.carries(tree, base, patches)
    (tree / "untracked.txt").unlink()
    assert worktree.carries(tree, base, patches)
    assert not worktree.carries(tree.parent / "no-such-tree", base, patches)
