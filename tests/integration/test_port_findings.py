"""`lmsforge port` against what the port-torture run found (shared/evidence/port-torture.md).

One test (or a few) per finding F1–F13, on the real toy upstream of tests/fixtures.py; kills are
real SIGKILLs of a real lmsforge process at a chosen git call (port_helpers.lmsforge_process).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import filelock
import pytest
import yaml

from fixtures import ENV, git, lmsforge, one_line_error, snapshot
from port_helpers import (STORAGE_RESOLVED, cli, kill_count, lmsforge_process, port,
                          printed_commands, reexport_on_git, resolve_storage, run_pasted, start,
                          start_args, stop_line, timeless)


@pytest.fixture
def git_series(toy_series):
    return reexport_on_git(toy_series)


def series_ids(toy, tag: str) -> list[str]:
    manifest = yaml.safe_load((toy["patches"] / "toy" / tag / "series.yaml").read_text())
    return [p["id"] for p in manifest["patches"]]


def report(toy, tag: str) -> str:
    return (toy["patches"] / "toy" / tag / "PORT-REPORT.md").read_text()


def stopped(toy, into: Path) -> str:
    return stop_line(start(toy, "v2.0.0", into))


def leftovers(toy, into: Path, root: Path) -> list[str]:
    """What a port may not leave behind once it is over."""
    found = [str(p) for p in (toy["patches"] / "toy").iterdir() if p.name.startswith(".")]
    found += [str(p) for p in (root / "tmp").iterdir()] if (root / "tmp").is_dir() else []
    if into.is_dir():
        found += [str(into / ".git" / name) for name in ("lmsforge-port.json",
                                                         "lmsforge-port.lock",
                                                         "lmsforge-port-tmp")
                  if (into / ".git" / name).exists()]
        trees = git(into, "worktree", "list", "--porcelain").count("worktree ")
        found += [f"{trees - 1} extra work trees"] if trees != 1 else []
    return found


# --- F1: a patch is never lost ------------------------------------------------------------------


@pytest.mark.parametrize("undo", [("cherry-pick", "--abort"), ("cherry-pick", "--skip"),
                                  ("reset", "-q", "--hard")])
def test_f1_continue_after_the_pick_was_undone_refuses_and_keeps_the_patch(git_series, tmp_path,
                                                                           undo):
    into = tmp_path / "port"
    stopped(git_series, into)
    git(into, *undo)
    before = snapshot(git_series["patches"])
    refused = port(git_series, into, "--continue")
    assert refused.exit_code == 2
    line = one_line_error(refused)
    assert "0030-storage-hook.patch is no longer in progress" in line
    assert "--skip --reason" in line
    assert snapshot(git_series["patches"]) == before  # no series without the patch
    # The advice works: redo the pick, resolve, continue.
    redo = re.search(r"`(git -C \S+ cherry-pick [0-9a-f]{40})`", line)
    assert redo, line
    assert subprocess.run(shlex.split(redo.group(1)), capture_output=True).returncode == 1
    resolve_storage(into)
    done = port(git_series, into, "--continue")
    assert done.exit_code == 0, done.output
    assert series_ids(git_series, "v2.0.0") == ["lms-core", "allocator-hook", "storage-hook"]
    assert "| storage-hook | 0030-storage-hook.patch | resolved |" in report(git_series, "v2.0.0")


def test_f1_an_earlier_patch_reset_away_is_refused(git_series, tmp_path):
    into = tmp_path / "port"
    stopped(git_series, into)
    git(into, "cherry-pick", "--abort")
    git(into, "reset", "-q", "--hard", "HEAD~1")
    refused = port(git_series, into, "--continue")
    assert refused.exit_code == 2
    line = one_line_error(refused)
    assert "lost the commits of 0020-allocator-hook.patch" in line
    assert not (git_series["patches"] / "toy" / "v2.0.0").exists()
    put_back = re.search(r"`(git -C \S+ reset --hard [0-9a-f]{12})`", line)
    assert put_back, line
    subprocess.run(shlex.split(put_back.group(1)), check=True, capture_output=True)
    # Back to the state of F1: the stopped patch's pick was aborted, nothing else is lost.
    again = port(git_series, into, "--continue")
    assert again.exit_code == 2
    assert "0030-storage-hook.patch is no longer in progress" in one_line_error(again)


def test_f1_a_hand_commit_counts_once_it_carries_the_patch_trailer(git_series, tmp_path):
    into = tmp_path / "port"
    stopped(git_series, into)
    resolve_storage(into)
    git(into, "commit", "-q", "-am", "fix the storage conflict")
    refused = port(git_series, into, "--continue")
    assert refused.exit_code == 2
    line = one_line_error(refused)
    assert "lacks the trailer `Lms-Patch-Id: storage-hook`" in line
    amend = re.search(r"`(git -C \S+ commit --amend --no-edit -C [0-9a-f]+)`", line)
    assert amend, line
    # Pasted as a user with a git identity would (CI's HOME may have none).
    subprocess.run(shlex.split(amend.group(1)), check=True, capture_output=True,
                   env={**os.environ, **ENV})
    done = port(git_series, into, "--continue")
    assert done.exit_code == 0, done.output
    assert "| storage-hook | 0030-storage-hook.patch | resolved |" in report(git_series, "v2.0.0")


# --- F2: the state knows its patches folder; printed commands work pasted --------------------


def test_f2_continue_with_another_patches_folder_is_refused(git_series, tmp_path):
    into = tmp_path / "port"
    stopped(git_series, into)
    resolve_storage(into)
    other = tmp_path / "other-patches"
    other.mkdir()
    for env in ({}, {"LMSFORGE_PATCHES_DIR": str(other)}):
        args = ("--patches-dir", str(other)) if not env else ()
        refused = lmsforge(*args, "port", "--continue", "--into", str(into), env=env)
        assert refused.exit_code == 2
        line = one_line_error(refused)
        assert f"writes its series to {git_series['patches']}" in line
        assert f"--patches-dir {git_series['patches']} port --continue" in line
        assert not any(other.iterdir())
    assert port(git_series, into, "--continue").exit_code == 0


def test_f2_every_printed_command_works_pasted_from_another_folder(git_series, tmp_path,
                                                                   monkeypatch):
    into = tmp_path / "port dir"  # a space: the commands must quote it
    line = stopped(git_series, into)
    commands = printed_commands(line)
    assert [c.split(" port ")[1].split()[0] for c in commands] == ["--continue", "--skip"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    status = run_pasted(f"lmsforge --patches-dir {git_series['patches']} port --status "
                        f"--into {shlex.quote(str(into))}")
    assert status.exit_code == 0
    assert commands[0] in status.stdout  # --status prints the same next step
    resolve_storage(into)
    done = run_pasted(commands[0])
    assert done.exit_code == 0, done.output
    assert series_ids(git_series, "v2.0.0") == ["lms-core", "allocator-hook", "storage-hook"]


def test_f2_the_printed_skip_works_pasted(git_series, tmp_path):
    into = tmp_path / "port"
    skip = printed_commands(stopped(git_series, into))[1]
    done = run_pasted(skip)
    assert done.exit_code == 0, done.output
    manifest = yaml.safe_load((git_series["patches"] / "toy" / "v2.0.0" /
                               "series.yaml").read_text())
    assert manifest["skipped"] == [{"id": "storage-hook", "reason": "WHY"}]


# --- F3: a hand resolution after a kill is `resolved` ------------------------------------------


def test_f3_a_hand_resolution_after_a_kill_is_reported_resolved(git_series, tmp_path):
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(git_series, "v2.0.0", into), tmp_path,
                              kill={"match": "cherry-pick --allow-empty", "when": "after",
                                    "rc": "1"})
    assert killed.returncode == -9, killed.stderr
    status = port(git_series, into, "--status")
    assert "→ 0030-storage-hook.patch" in status.stdout
    assert "was interrupted" in status.stdout
    resolve_storage(into)
    git(into, "add", "src/storage.h")
    done = port(git_series, into, "--continue")
    assert done.exit_code == 0, done.output
    assert "| storage-hook | 0030-storage-hook.patch | resolved |" in report(git_series, "v2.0.0")
    assert leftovers(git_series, into, tmp_path) == []


def test_f3_a_recorded_resolution_after_a_kill_is_reported_rerere(git_series, tmp_path):
    first = tmp_path / "first"
    stopped(git_series, first)
    resolve_storage(first)
    assert port(git_series, first, "--continue").exit_code == 0
    expected = snapshot(git_series["patches"] / "toy" / "v2.0.0")
    shutil.move(git_series["patches"] / "toy" / "v2.0.0", tmp_path / "first-series")
    into = tmp_path / "second"
    killed = lmsforge_process(start_args(git_series, "v2.0.0", into), tmp_path,
                              kill={"match": "cherry-pick --allow-empty", "when": "after",
                                    "rc": "1", "group": "0"})
    assert killed.returncode == -9, killed.stderr
    done = port(git_series, into, "--continue")
    assert done.exit_code == 0, done.output
    text = report(git_series, "v2.0.0")
    assert "| storage-hook | 0030-storage-hook.patch | rerere |" in text
    produced = snapshot(git_series["patches"] / "toy" / "v2.0.0")
    assert {k: v for k, v in produced.items() if k != "PORT-REPORT.md"} == \
        {k: v for k, v in expected.items() if k != "PORT-REPORT.md"}


# --- F4, F5, F8: kills in the start and finish phases -----------------------------------------


@pytest.mark.parametrize("group", ["1", "0"])
def test_f4_a_kill_while_starting_resumes_with_continue(git_series, tmp_path, group):
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(git_series, "v1.1.0", into), tmp_path,
                              kill={"match": " am --quiet", "group": group})
    assert killed.returncode == -9, killed.stderr
    status = port(git_series, into, "--status")
    assert status.exit_code == 0
    assert "interrupted while starting" in status.stdout
    done = port(git_series, into, "--continue")
    assert done.exit_code == 0, done.output
    assert series_ids(git_series, "v1.1.0") == ["lms-core", "allocator-hook", "storage-hook"]
    assert cli(git_series, "verify", "-f", "toy", "-t", "v1.1.0", "--source",
               "git").exit_code == 0
    assert leftovers(git_series, into, tmp_path) == []


def test_f4_a_kill_while_starting_is_removed_by_abort(git_series, tmp_path):
    into = tmp_path / "port"
    before = snapshot(git_series["patches"])
    killed = lmsforge_process(start_args(git_series, "v1.1.0", into), tmp_path,
                              kill={"match": "checkout --quiet -b lms/toy/v1.1.0"})
    assert killed.returncode == -9, killed.stderr
    result = port(git_series, into, "--abort")
    assert result.exit_code == 0, result.output
    assert not into.exists()
    assert snapshot(git_series["patches"]) == before
    assert leftovers(git_series, into, tmp_path) == []


def test_f4_a_kill_before_the_state_exists_lets_the_port_start_again(git_series, tmp_path):
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(git_series, "v1.1.0", into), tmp_path,
                              kill={"match": "init --quiet", "when": "after"})
    assert killed.returncode == -9, killed.stderr
    assert [p.name for p in into.iterdir()] == [".git"]
    for action in ("--status", "--continue"):
        result = port(git_series, into, action)
        assert result.exit_code == 2
        assert "no port in progress" in one_line_error(result)
    result = start(git_series, "v1.1.0", into)
    assert result.exit_code == 0, result.output
    assert leftovers(git_series, into, tmp_path) == []
    assert not (into / ".git" / "lmsforge-port-created").exists()


def test_f4_abort_removes_the_folder_a_killed_start_made(git_series, tmp_path):
    """Found by the random-kill test (seed 4201079242): a start killed after it made the folder
    left it to the start that took over, which took it for the user's (F7) and had --abort
    only empty it."""
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(git_series, "v2.0.0", into), tmp_path,
                              kill={"match": "init --quiet", "when": "after"})
    assert killed.returncode == -9, killed.stderr
    stopped(git_series, into)
    result = port(git_series, into, "--abort")
    assert result.exit_code == 0, result.output
    assert "removed" in result.output
    assert not into.exists()


def test_a_pick_killed_inside_git_is_redone_and_the_users_files_stay(git_series, tmp_path):
    """Found by the random-kill test: a kill inside `git cherry-pick` can leave the file the
    patch adds in the tree, untracked; the resumed pick must not trip over it."""
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(git_series, "v1.1.0", into), tmp_path,
                              kill={"match": "cherry-pick --allow-empty"})
    assert killed.returncode == -9, killed.stderr
    # What git had written when it died, and a file of the user's.
    (into / "src" / "lms.c").write_text("int lms_reclaim(void) { return 0; }\n")
    (into / "notes.txt").write_text("mine\n")
    done = port(git_series, into, "--continue")
    assert done.exit_code == 0, done.output
    assert (into / "notes.txt").read_text() == "mine\n"
    assert series_ids(git_series, "v1.1.0") == ["lms-core", "allocator-hook", "storage-hook"]


@pytest.mark.parametrize("left", ["markers", "cut", "edit"])
def test_a_kill_around_rerere_is_mended_but_an_edit_is_kept(git_series, tmp_path, left):
    """Found by the random-kill test: rerere rewrites a conflicted file in place, so a kill can
    leave it cut short (no markers, still unmerged). A kill can also come before rerere ran.
    Both must resume as rerere would have ended; a file someone edited must stay theirs."""
    first = tmp_path / "first"
    stopped(git_series, first)
    resolve_storage(first)
    assert port(git_series, first, "--continue").exit_code == 0
    shared = git_series["patches"] / "toy" / "rr-cache"
    (resolution,) = shared.iterdir()
    shutil.move(git_series["patches"] / "toy" / "v2.0.0", tmp_path / "first-series")
    shutil.move(shared, tmp_path / "rr-cache")  # the port starts without it ...
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(git_series, "v2.0.0", into), tmp_path,
                              kill={"match": "cherry-pick --allow-empty", "when": "after",
                                    "rc": "1"})
    assert killed.returncode == -9, killed.stderr
    # ... and the resolution appears in the tree's cache as if rerere had it all along and
    # had not yet written it (markers), was killed writing it (cut), or someone edited (edit).
    shutil.copy(tmp_path / "rr-cache" / resolution.name / "postimage",
                into / ".git" / "rr-cache" / resolution.name)
    storage = into / "src" / "storage.h"
    assert b"<<<<<<<" in storage.read_bytes()
    mine = "struct storage {\n  void *data;\n  size_t n;\n  void *mine;\n};\n"
    if left == "cut":
        storage.write_text("struct storage {\n  void")  # the start of the recorded resolution
    elif left == "edit":
        storage.write_text(mine)
    done = port(git_series, into, "--continue")
    if left == "edit":
        assert done.exit_code == 3 and "no conflict markers left" in stop_line(done)
        assert storage.read_text() == mine
        done = port(git_series, into, "--continue")
        assert done.exit_code == 0, done.output
        assert "| storage-hook | 0030-storage-hook.patch | resolved |" in report(git_series,
                                                                           "v2.0.0")
        assert "+  void *mine;" in (git_series["patches"] / "toy" / "v2.0.0" /
                                    "0030-storage-hook.patch").read_text()
        return
    assert done.exit_code == 0, done.output
    assert "| storage-hook | 0030-storage-hook.patch | rerere |" in report(git_series, "v2.0.0")
    assert (git_series["patches"] / "toy" / "v2.0.0" / "0030-storage-hook.patch").read_bytes() \
        == (tmp_path / "first-series" / "0030-storage-hook.patch").read_bytes()


FINISH_KILLS = [{"match": "format-patch", "when": "after"},
                {"match": "worktree add", "when": "after", "group": "0"},
                {"match": " am --quiet", "nth": "2"}]


@pytest.mark.parametrize("kill", FINISH_KILLS, ids=["export", "round-trip-tree", "round-trip-am"])
def test_f5_a_kill_while_finishing_resumes_and_leaves_nothing(git_series, tmp_path, kill):
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(git_series, "v1.1.0", into), tmp_path, kill=kill)
    assert killed.returncode == -9, killed.stderr
    assert not any((tmp_path / "tmp").iterdir())  # temporary files live in the work tree
    assert "every patch is in" in port(git_series, into, "--status").stdout
    done = port(git_series, into, "--continue")
    assert done.exit_code == 0, done.output
    assert leftovers(git_series, into, tmp_path) == []
    assert cli(git_series, "verify", "-f", "toy", "-t", "v1.1.0", "--source",
               "git").exit_code == 0


def test_f5_a_kill_while_finishing_is_removed_by_abort(git_series, tmp_path):
    into = tmp_path / "port"
    before = snapshot(git_series["patches"])
    killed = lmsforge_process(start_args(git_series, "v1.1.0", into), tmp_path,
                              kill={"match": "worktree add", "when": "after"})
    assert killed.returncode == -9, killed.stderr
    assert any(p.name.startswith(".") for p in (git_series["patches"] / "toy").iterdir())
    result = port(git_series, into, "--abort")
    assert result.exit_code == 0, result.output
    assert snapshot(git_series["patches"]) == before
    assert not into.exists()


def test_f8_a_kill_after_the_series_is_written_is_recognised_as_finished(git_series, tmp_path):
    # An uninterrupted run counts the `git worktree prune` calls; the last one comes after the
    # series folder is in place, so a kill there leaves a written series and a state file.
    reference = tmp_path / "reference"
    reference.mkdir()
    copy = dict(git_series, patches=reference / "patches")
    shutil.copytree(git_series["patches"], copy["patches"])
    counted = lmsforge_process(start_args(copy, "v1.1.0", reference / "port"), reference,
                               kill={"match": "worktree prune", "nth": "0"})
    assert counted.returncode == 0, counted.stderr
    last = kill_count(reference)
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(git_series, "v1.1.0", into), tmp_path,
                              kill={"match": "worktree prune", "nth": str(last)})
    assert killed.returncode == -9, killed.stderr
    assert (git_series["patches"] / "toy" / "v1.1.0" / "series.yaml").is_file()
    assert "the series is written" in port(git_series, into, "--status").stdout
    done = port(git_series, into, "--continue")
    assert done.exit_code == 0, done.output
    # The wall times in PORT-REPORT's Time section differ (the killed run took its own time).
    assert timeless(snapshot(git_series["patches"] / "toy" / "v1.1.0")) == \
        timeless(snapshot(copy["patches"] / "toy" / "v1.1.0"))
    assert leftovers(git_series, into, tmp_path) == []


# --- torture finding 3: one port never claims or removes another port's series -----------------


def test_a_port_never_claims_or_removes_the_series_another_port_wrote(git_series, tmp_path):
    """Two ports to the same tag: pA killed while it exports, then pB ports to the end. The same
    series content is not pA's: its --continue refuses in one line (it was an internal error),
    its --status does not call the series written, and its --abort removes only what pA made
    (it removed pB's series and report: port-torture-2026-11-26 row 3)."""
    first, second = tmp_path / "pA", tmp_path / "pB"
    killed = lmsforge_process(start_args(git_series, "v1.1.0", first), tmp_path,
                              kill=FINISH_KILLS[0])
    assert killed.returncode == -9, killed.stderr
    done = start(git_series, "v1.1.0", second)
    assert done.exit_code == 0, done.output
    folder = git_series["patches"] / "toy" / "v1.1.0"
    theirs = snapshot(folder)
    assert "PORT-REPORT.md" in {Path(name).name for name in theirs}

    refused = port(git_series, first, "--continue")
    assert refused.exit_code == 2, refused.output
    line = one_line_error(refused)
    assert str(folder) in line and "--abort" in line, line
    assert "the series is written" not in port(git_series, first, "--status").stdout
    assert snapshot(folder) == theirs

    undone = port(git_series, first, "--abort")
    assert undone.exit_code == 0, undone.output
    assert snapshot(folder) == theirs
    assert not first.exists()
    assert [p.name for p in (git_series["patches"] / "toy").iterdir()
            if p.name.startswith(".")] == []


# --- F6: a refused --continue keeps the conflict ------------------------------------------------


def test_f6_a_refused_continue_keeps_the_conflict_state(git_series, tmp_path):
    into = tmp_path / "port"
    stopped(git_series, into)
    refused = port(git_series, into, "--continue")
    assert refused.exit_code == 2
    assert "conflict markers remain in src/storage.h" in one_line_error(refused)
    assert git(into, "status", "--porcelain", "--untracked-files=no") == "UU src/storage.h"
    git(into, "checkout", "--ours", "src/storage.h")  # works only while the conflict is kept
    assert (into / "src" / "storage.h").read_text() == \
        git(git_series["upstream"], "show", "v2.0.0:src/storage.h") + "\n"


def test_f6_a_whitespace_refusal_keeps_the_conflict_state(git_series, tmp_path):
    into = tmp_path / "port"
    stopped(git_series, into)
    (into / "src" / "storage.h").write_text(
        "struct storage {\n  void *data;\n  size_t n;\n  void *lms;   \n};\n")
    refused = port(git_series, into, "--continue")
    assert refused.exit_code == 2
    assert "whitespace errors in src/storage.h" in one_line_error(refused)
    assert git(into, "status", "--porcelain", "--untracked-files=no") == "UU src/storage.h"


# --- F7: --abort into an existing empty folder --------------------------------------------------


def test_f7_abort_empties_an_existing_empty_folder(git_series, tmp_path):
    into = tmp_path / "port"
    into.mkdir()
    before = snapshot(git_series["patches"])
    stopped(git_series, into)
    result = port(git_series, into, "--abort")
    assert result.exit_code == 0, result.output
    assert into.is_dir() and not any(into.iterdir())
    assert snapshot(git_series["patches"]) == before
    stopped(git_series, into)  # the folder takes a new port


# --- F9, F12: the report names the exported files and the renames ------------------------------


def _tag_upstream(toy, tag: str, change) -> None:
    upstream = toy["upstream"]
    git(upstream, "checkout", "-q", "v1.1.0")
    change(upstream)
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", f"upstream work for {tag}")
    git(upstream, "tag", tag)


def test_f9_the_report_names_the_files_of_the_new_series(git_series, tmp_path):
    _tag_upstream(git_series, "v1.2.0", lambda up: (up / "src" / "lms.c").write_text(
        "int lms_reclaim(void) { return 0; }\n"))
    assert start(git_series, "v1.2.0", tmp_path / "port").exit_code == 0
    text = report(git_series, "v1.2.0")
    assert "| lms-core | — (not in this series) | dropped | 0010-lms-core.patch |" in text
    assert "| allocator-hook | 0010-allocator-hook.patch | picked | 0020-allocator-hook.patch |" \
        in text
    assert "| storage-hook | 0020-storage-hook.patch | picked | 0030-storage-hook.patch |" in text
    files = sorted(p.name for p in (git_series["patches"] / "toy" / "v1.2.0").glob("*.patch"))
    assert files == ["0010-allocator-hook.patch", "0020-storage-hook.patch"]


def test_f12_the_risk_table_and_the_outcome_name_an_upstream_rename(git_series, tmp_path):
    _tag_upstream(git_series, "v1.3.0",
                  lambda up: git(up, "mv", "src/alloc.c", "src/allocator.c"))
    result = start(git_series, "v1.3.0", tmp_path / "port")
    assert result.exit_code == 0, result.output
    assert "renamed: src/alloc.c → src/allocator.c" in result.stdout
    text = report(git_series, "v1.3.0")
    risk = text.split("## Risk table")[1]
    row = next(ln for ln in risk.splitlines() if ln.startswith("| allocator-hook | 0020-"))
    assert row.endswith("| low | src/alloc.c → src/allocator.c |"), row
    assert "| allocator-hook | 0020-allocator-hook.patch | picked | 0020-allocator-hook.patch | " \
           "applied to what upstream renamed: src/alloc.c → src/allocator.c |" in text
    patch = (git_series["patches"] / "toy" / "v1.3.0" / "0020-allocator-hook.patch").read_text()
    assert "+++ b/src/allocator.c" in patch


# --- F10: usage errors about --into -------------------------------------------------------------


@pytest.mark.parametrize("action", ["--status", "--continue", "--abort"])
def test_f10_a_missing_into_folder_is_a_usage_error(git_series, tmp_path, action):
    result = port(git_series, tmp_path / "missing", action)
    assert result.exit_code == 2
    assert "does not exist" in one_line_error(result)


def test_f10_a_skip_into_a_missing_folder_is_a_usage_error(git_series, tmp_path):
    result = port(git_series, tmp_path / "missing", "--skip", "--reason", "r")
    assert result.exit_code == 2
    assert "does not exist" in one_line_error(result)


def test_f10_into_a_file_or_a_plain_folder_is_a_usage_error(git_series, tmp_path):
    a_file = tmp_path / "a-file"
    a_file.write_text("x")
    plain = tmp_path / "plain"
    (plain / "sub").mkdir(parents=True)
    repo = tmp_path / "repo"
    git(tmp_path, "init", "-q", str(repo))
    for result, words in ((start(git_series, "v2.0.0", a_file), "is a file"),
                          (port(git_series, a_file, "--status"), "is a file"),
                          (port(git_series, plain, "--status"), "not a port work tree"),
                          (port(git_series, repo, "--continue"), "no port in progress"),
                          (port(git_series, repo, "--abort"), "no port in progress")):
        assert result.exit_code == 2
        assert words in one_line_error(result)
    assert a_file.read_text() == "x" and [p.name for p in plain.iterdir()] == ["sub"]
    assert (repo / ".git").is_dir()


def test_f10_a_second_abort_is_a_usage_error(git_series, tmp_path):
    into = tmp_path / "port"
    stopped(git_series, into)
    assert port(git_series, into, "--abort").exit_code == 0
    again = port(git_series, into, "--abort")
    assert again.exit_code == 2
    assert "does not exist" in one_line_error(again)


def test_f10_continue_inside_the_work_tree_needs_no_into(git_series, tmp_path, monkeypatch):
    into = tmp_path / "port"
    stopped(git_series, into)
    resolve_storage(into)
    monkeypatch.chdir(into / "src")
    done = cli(git_series, "port", "--continue")
    assert done.exit_code == 0, done.output


# --- F11: messages that say what to do ----------------------------------------------------------


def test_f11_an_empty_resolution_points_to_skip(git_series, tmp_path):
    into = tmp_path / "port"
    stopped(git_series, into)
    git(into, "checkout", "--ours", "src/storage.h")
    git(into, "add", "src/storage.h")
    refused = port(git_series, into, "--continue")
    assert refused.exit_code == 2
    line = one_line_error(refused)
    assert "leaves 0030-storage-hook.patch empty" in line
    skip = next(c for c in printed_commands(line) if "--skip" in c)
    assert run_pasted(skip).exit_code == 0


def test_f11_an_empty_resolution_committed_by_hand_points_to_skip(git_series, tmp_path):
    """Committed by hand (`git commit --allow-empty`), an empty resolution was accepted and the
    finish then failed on it ("empty mbox", exit 2): it is refused at --continue like one left
    staged, and the printed way out works."""
    into = tmp_path / "port"
    stopped(git_series, into)
    git(into, "checkout", "--ours", "src/storage.h")
    git(into, "add", "src/storage.h")
    git(into, "commit", "--quiet", "--allow-empty", "-C", "CHERRY_PICK_HEAD")
    refused = port(git_series, into, "--continue")
    assert refused.exit_code == 2, refused.output
    line = one_line_error(refused)
    assert "the commit of 0030-storage-hook.patch" in line and "is empty" in line, line
    assert port(git_series, into, "--continue").exit_code == 2  # refused until it is dealt with
    [reset] = re.findall(r"`(git -C [^`]+ reset --soft HEAD~1)`", line)
    subprocess.run(reset, shell=True, check=True)  # as the user pasting it
    skip = next(c for c in printed_commands(line) if "--skip" in c)
    assert run_pasted(skip).exit_code == 0
    assert "| storage-hook | — (not in this series) | skipped |" in report(git_series, "v2.0.0")


def test_f11_an_existing_series_says_what_to_do(git_series, tmp_path):
    result = start(git_series, "v1.0.0", tmp_path / "port")
    assert result.exit_code == 2
    assert "move it away" in one_line_error(result)


def test_f11_skip_works_right_after_a_kill_in_a_conflict(git_series, tmp_path):
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(git_series, "v2.0.0", into), tmp_path,
                              kill={"match": "cherry-pick --allow-empty", "when": "after",
                                    "rc": "1"})
    assert killed.returncode == -9, killed.stderr
    # --status shows the interrupted pick; a --skip of a patch nobody saw is refused (round 2,
    # row 6: test_r2_row6_a_rerun_of_a_killed_skip_does_not_skip_the_next_patch).
    assert "→ 0030-storage-hook.patch" in port(git_series, into, "--status").stdout
    done = port(git_series, into, "--skip", "--reason", "not needed on 2.0")
    assert done.exit_code == 0, done.output
    assert series_ids(git_series, "v2.0.0") == ["lms-core", "allocator-hook"]


def test_f11_an_unknown_upstream_tag_is_named_without_mirror_advice(git_series, tmp_path):
    result = start(git_series, "v9.9.9", tmp_path / "port")
    assert result.exit_code == 2
    line = one_line_error(result)
    assert "has no tag v9.9.9" in line and "--mirror" not in line
    assert not (tmp_path / "port").exists()


# --- F13: cosmetics and leftovers ---------------------------------------------------------------


def test_f13_a_skip_reason_cannot_break_the_report_table(git_series, tmp_path):
    into = tmp_path / "port"
    stopped(git_series, into)
    done = port(git_series, into, "--skip", "--reason", "a | b\nc")
    assert done.exit_code == 0, done.output
    rows = [ln for ln in report(git_series, "v2.0.0").splitlines()
            if ln.startswith("| storage-hook |")]
    assert rows[0] == ("| storage-hook | — (not in this series) | skipped | "
                       "0030-storage-hook.patch | a \\| b c |")


def test_f13_a_clean_port_leaves_ordinary_folders_and_no_debris(git_series, tmp_path):
    into = tmp_path / "port"
    result = lmsforge_process(start_args(git_series, "v1.1.0", into), tmp_path)
    assert result.returncode == 0, result.stderr
    umask = os.umask(0)
    os.umask(umask)
    folder = git_series["patches"] / "toy" / "v1.1.0"
    assert stat.S_IMODE(folder.stat().st_mode) == 0o777 & ~umask
    assert not (git_series["patches"] / "toy" / "rr-cache").exists()  # nothing to save
    assert leftovers(git_series, into, tmp_path) == []


def test_f13_status_sums_up_and_status_of_the_tree_names_the_port(git_series, tmp_path):
    into = tmp_path / "port"
    stopped(git_series, into)
    status = port(git_series, into, "--status")
    assert "3 patches: 2 picked, 1 pending" in status.stdout
    assert "0010-lms-core.patch" not in status.stdout  # plain picks are counted, not listed
    tree = cli(git_series, "status", "--tree", str(into))
    assert tree.exit_code == 0
    assert "toy v1.0.0 → v2.0.0 in progress (replaying, stopped at 0030-storage-hook.patch; " \
           "the work is on branch lms/toy/v2.0.0)" in tree.stdout


# --- round 2 (shared/evidence/port-torture-2026-11-26.md): binary, delete/modify, modes -------


@pytest.fixture
def hazard(tmp_path):
    from port_helpers import make_hazard_toy
    return make_hazard_toy(tmp_path / "hazard")


def outcome(text: str, patch_id: str) -> str:
    """The outcome column of PATCH_ID's row in PORT-REPORT.md's patch table."""
    row = next(ln for ln in text.splitlines() if ln.startswith(f"| {patch_id} | "))
    return row.split(" | ")[2]


def series_file(toy, tag: str, patch_id: str) -> str:
    manifest = yaml.safe_load((toy["patches"] / "toy" / tag / "series.yaml").read_text())
    return next(p["file"] for p in manifest["patches"] if p["id"] == patch_id)


def unmerged(into: Path) -> str:
    status = git(into, "status", "--porcelain", "--untracked-files=no").splitlines()
    return "\n".join(ln for ln in status if ln[:2] in ("UU", "AA", "DU", "UD", "DD", "AU", "UA"))


def test_r2_f2_continue_refuses_untouched_binary_and_delete_modify_conflicts(hazard, tmp_path):
    into = tmp_path / "port"
    assert "port stopped at 0020-blob-mixed.patch" in stop_line(start(hazard, "v2.0.0", into))
    refused = port(hazard, into, "--continue")
    assert refused.exit_code == 2, refused.output
    line = one_line_error(refused)
    assert "assets/blob.bin (binary)" in line and " add PATH" in line, line
    assert unmerged(into) == "UU assets/blob.bin"  # the conflict stays for the user
    git(into, "checkout", "--theirs", "assets/blob.bin")
    git(into, "add", "assets/blob.bin")
    assert "port stopped at 0030-legacy-hook.patch" in stop_line(port(hazard, into, "--continue"))
    refused = port(hazard, into, "--continue")
    assert refused.exit_code == 2, refused.output
    line = one_line_error(refused)
    assert "src/legacy.c (deleted upstream" in line and " rm PATH" in line, line
    assert unmerged(into) == "DU src/legacy.c"
    git(into, "add", "src/legacy.c")  # the user keeps the file: their call, made by hand
    done = port(hazard, into, "--continue")
    assert done.exit_code == 0, done.output
    text = report(hazard, "v2.0.0")
    assert outcome(text, "blob-mixed") == "resolved"
    assert outcome(text, "legacy-hook") == "resolved"
    new = hazard["patches"] / "toy" / "v2.0.0"
    assert "GIT binary patch" in (new / series_file(hazard, "v2.0.0", "blob-mixed")).read_text()


def test_r2_f2_a_stop_whose_line_a_kill_lost_is_still_refused(hazard, tmp_path):
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(hazard, "v2.0.0", into), tmp_path,
                              kill={"match": "ls-files --unmerged"})
    assert killed.returncode == -9, killed.stderr
    refused = port(hazard, into, "--continue")
    assert refused.exit_code == 2, refused.output
    assert "assets/blob.bin" in one_line_error(refused)
    assert unmerged(into) == "UU assets/blob.bin"



def _resolve_blob(into: Path) -> None:
    git(into, "checkout", "--theirs", "assets/blob.bin")
    git(into, "add", "assets/blob.bin")


@pytest.mark.parametrize("conflict", ["binary", "delete-modify"])
def test_r2_f1_a_kill_right_after_a_conflicting_pick_still_stops(hazard, tmp_path, conflict):
    """The Python process dies right after git's cherry-pick returned with the conflict: the
    resume must stop there (exit 3), as without the kill, not commit the file as it stands."""
    into = tmp_path / "port"
    kill = {"match": "cherry-pick --allow-empty", "when": "after", "rc": "1", "group": "0"}
    if conflict == "binary":
        killed = lmsforge_process(start_args(hazard, "v2.0.0", into), tmp_path, kill=kill)
        patch, path, status = "0020-blob-mixed.patch", "assets/blob.bin", "UU assets/blob.bin"
    else:
        stop_line(start(hazard, "v2.0.0", into))
        _resolve_blob(into)
        killed = lmsforge_process(["--patches-dir", str(hazard["patches"]), "port",
                                   "--continue", "--into", str(into)], tmp_path, kill=kill)
        patch, path, status = "0030-legacy-hook.patch", "src/legacy.c", "DU src/legacy.c"
    assert killed.returncode == -9, killed.stderr
    resumed = port(hazard, into, "--continue")
    line = stop_line(resumed)
    assert f"port stopped at {patch}: conflicts in {path}" in line, line
    assert unmerged(into) == status
    again = port(hazard, into, "--continue")  # and it is a stop like any other (F2)
    assert again.exit_code == 2 and path in one_line_error(again)
    assert not (hazard["patches"] / "toy" / "v2.0.0").exists()



def test_r2_f4_a_mode_only_patch_is_dropped_only_where_the_tag_has_the_mode(hazard, tmp_path):
    into = tmp_path / "port"
    done = start(hazard, "v1.1.0", into)
    assert done.exit_code == 0, done.output
    assert "dropping 0010-gen-mode.patch" not in done.output
    assert outcome(report(hazard, "v1.1.0"), "gen-mode") == "picked"
    assert git(into, "ls-tree", "lms/toy/v1.1.0", "tools/gen.py").startswith("100755 ")
    assert "gen-mode" in series_ids(hazard, "v1.1.0")
    # A tag that made the file executable itself has the patch's change: dropped there.
    upstream = hazard["upstream"]
    git(upstream, "checkout", "-q", "v1.1.0")
    (upstream / "tools" / "gen.py").chmod(0o755)
    git(upstream, "commit", "-q", "-am", "toy 1.2.0: executable generator")
    git(upstream, "tag", "v1.2.0")
    yaml_file = hazard["patches"] / "toy" / "upstream.yaml"
    yaml_file.write_text(yaml_file.read_text() + "  v1.2.0:\n    commit: "
                         f"{git(upstream, 'rev-parse', 'v1.2.0^{commit}')}\n")
    done = start(hazard, "v1.2.0", tmp_path / "port-1.2")
    assert done.exit_code == 0, done.output
    assert outcome(report(hazard, "v1.2.0"), "gen-mode") == "dropped"
    assert "gen-mode" not in series_ids(hazard, "v1.2.0")




_HOOKED_GIT = """#!/bin/bash
# Test stand-in for git: the real git, with the hooks folder HOOKS instead of the /dev/null
# that lmsforge passes, so a hook can kill lmsforge (and git) inside a git command.
args=()
for a in "$@"; do
  [ "$a" = core.hooksPath=/dev/null ] && a="core.hooksPath=$LMSFORGE_TEST_HOOKS"
  args+=("$a")
done
exec "$LMSFORGE_TEST_REAL_GIT" "${args[@]}"
"""

_KILL_IN_COMMIT = """#!/bin/sh
# Runs inside `git cherry-pick` after it wrote CHERRY_PICK_HEAD and before its commit: kills
# the whole process group (lmsforge and git) there, once.
rm -f "$0"
kill -KILL 0
sleep 5
"""


def test_r2_f9_a_clean_pick_killed_inside_git_is_reported_picked(git_series, tmp_path,
                                                                  monkeypatch):
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(git_series, "v1.1.0", into), tmp_path,
                              kill={"match": "cherry-pick --allow-empty"})
    assert killed.returncode == -9, killed.stderr
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    (hooks / "prepare-commit-msg").write_text(_KILL_IN_COMMIT)
    (hooks / "prepare-commit-msg").chmod(0o755)
    wrapper = tmp_path / "hooked-git"
    wrapper.mkdir()
    (wrapper / "git").write_text(_HOOKED_GIT)
    (wrapper / "git").chmod(0o755)
    real_git = shutil.which("git") or "git"
    with monkeypatch.context() as env:
        env.setenv("PATH", f"{wrapper}{os.pathsep}{os.environ['PATH']}")
        env.setenv("LMSFORGE_TEST_REAL_GIT", real_git)
        env.setenv("LMSFORGE_TEST_HOOKS", str(hooks))
        resumed = lmsforge_process(["--patches-dir", str(git_series["patches"]), "port",
                                    "--continue", "--into", str(into)], tmp_path)
    assert resumed.returncode == -9, resumed.stderr
    assert not (hooks / "prepare-commit-msg").exists()
    assert (into / ".git" / "CHERRY_PICK_HEAD").is_file()  # killed inside git's pick
    done = port(git_series, into, "--continue")
    assert done.exit_code == 0, done.output
    text = report(git_series, "v1.1.0")
    assert "| lms-core | 0010-lms-core.patch | picked |" in text
    assert "rerere" not in text.split("## Patches")[1].split("## Time")[0]


# --- torture round 2, row 7: CRLF content round-trips byte for byte ---------------------------

CONFIG_V1 = b"[core]\r\nname=toy\r\nlevel=1\r\nmode=fast\r\n"
CONFIG_V2 = CONFIG_V1.replace(b"level=1", b"level=2")
OTHER_V1 = b"[other]\r\nkeep=1\r\n"


def make_crlf_toy(root: Path) -> dict[str, Path]:
    """A toy upstream with CRLF files (v1.0.0; v2.0.0 changes a line of win/config.ini) and a
    series on v1.0.0 that edits both CRLF files, made by `apply --new`, commits and `export`."""
    from fixtures import commit_patch
    from port_helpers import declare_toy

    upstream = root / "crlf-upstream"
    (upstream / "win").mkdir(parents=True)
    git(upstream, "init", "-q", "-b", "main")
    (upstream / ".gitattributes").write_text("* -text\n")
    (upstream / "win" / "config.ini").write_bytes(CONFIG_V1)
    (upstream / "win" / "other.ini").write_bytes(OTHER_V1)
    git(upstream, "add", ".")
    git(upstream, "commit", "-q", "-m", "toy 1.0.0")
    git(upstream, "tag", "v1.0.0")
    (upstream / "win" / "config.ini").write_bytes(CONFIG_V2)
    git(upstream, "commit", "-q", "-am", "toy 2.0.0: level 2")
    git(upstream, "tag", "v2.0.0")
    patches = declare_toy(root, upstream, ("v1.0.0", "v2.0.0"))
    tree = root / "work" / "crlf-tree"
    result = lmsforge("--patches-dir", str(patches), "apply", "-f", "toy", "-t", "v1.0.0",
                      "--new", "--source", "git", "--into", str(tree))
    assert result.exit_code == 0, result.output
    commit_patch(tree, "other-tweak", "build-fix", "Tweak the other settings",
                 lambda t: (t / "win" / "other.ini").write_bytes(OTHER_V1 + b"lms=1\r\n"))
    commit_patch(tree, "config-tweak", "hook", "LMS level",
                 lambda t: (t / "win" / "config.ini").write_bytes(
                     CONFIG_V1.replace(b"level=1", b"level=1\r\nlms=on")))
    return {"upstream": upstream, "patches": patches, "tree": tree, "root": root,
            "work": root / "work"}


def test_r2_row7_a_series_editing_a_crlf_file_exports_and_applies_byte_for_byte(tmp_path):
    toy = make_crlf_toy(tmp_path / "crlf")
    exported = lmsforge("--patches-dir", str(toy["patches"]), "export", "-f", "toy", "-t",
                        "v1.0.0", "--tree", str(toy["tree"]))
    assert exported.exit_code == 0, exported.output
    patch = (toy["patches"] / "toy" / "v1.0.0" /
             series_file(toy, "v1.0.0", "config-tweak")).read_bytes()
    assert b"+lms=on\r\n" in patch
    again = tmp_path / "again"
    applied = cli(toy, "apply", "-f", "toy", "-t", "v1.0.0", "--source", "git", "--into",
                  str(again))
    assert applied.exit_code == 0, applied.output
    for name in ("config.ini", "other.ini"):
        assert (again / "win" / name).read_bytes() == (toy["tree"] / "win" / name).read_bytes()
    # verify's apply level takes the CR of a CRLF line for its line end, not for whitespace.
    verified = cli(toy, "--cache-dir", str(tmp_path / "cache"), "verify", "-f", "toy", "-t",
                   "v1.0.0", "--level", "apply", "--source", "git")
    assert verified.exit_code == 0, verified.output


def test_r2_row7_a_crlf_resolution_is_accepted_and_the_port_finishes(tmp_path):
    toy = make_crlf_toy(tmp_path / "crlf")
    exported = lmsforge("--patches-dir", str(toy["patches"]), "export", "-f", "toy", "-t",
                        "v1.0.0", "--tree", str(toy["tree"]))
    assert exported.exit_code == 0, exported.output
    into = tmp_path / "port"
    line = stop_line(start(toy, "v2.0.0", into))
    assert "port stopped at 0020-config-tweak.patch" in line, line
    resolved = CONFIG_V2.replace(b"level=2", b"level=2\r\nlms=on")
    (into / "win" / "config.ini").write_bytes(resolved)
    git(into, "add", "win/config.ini")
    done = port(toy, into, "--continue")
    assert done.exit_code == 0, done.output
    assert git(into, "cat-file", "blob", "lms/toy/v2.0.0:win/config.ini").encode() + b"\n" \
        == resolved or (into / "win" / "config.ini").read_bytes() == resolved
    new = toy["patches"] / "toy" / "v2.0.0"
    assert b"+lms=on\r\n" in (new / series_file(toy, "v2.0.0", "config-tweak")).read_bytes()
    checked = tmp_path / "checked"
    applied = cli(toy, "apply", "-f", "toy", "-t", "v2.0.0", "--source", "git", "--into",
                  str(checked))
    assert applied.exit_code == 0, applied.output
    assert (checked / "win" / "config.ini").read_bytes() == resolved
    assert (checked / "win" / "other.ini").read_bytes() == OTHER_V1 + b"lms=1\r\n"


# --- torture round 2, row 13: conflict markers in a UTF-16 file are refused like ASCII ones -----


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-le", "utf-16-be"])
def test_r2_row13_continue_refuses_markers_in_a_utf16_file(hazard, tmp_path, encoding):
    into = tmp_path / "port"
    assert "port stopped at 0020-blob-mixed.patch" in stop_line(start(hazard, "v2.0.0", into))
    text = "<<<<<<< HEAD\nupstream\n=======\npatched\n>>>>>>> LMS blob and hook\n"
    (into / "assets" / "blob.bin").write_bytes(text.encode(encoding))
    git(into, "add", "assets/blob.bin")
    refused = port(hazard, into, "--continue")
    assert refused.exit_code == 2, refused.output
    assert "conflict markers remain in assets/blob.bin" in one_line_error(refused)
    assert (into / ".git" / "CHERRY_PICK_HEAD").is_file()  # still stopped there


# --- torture round 2, row 14: the risk table counts binary changes upstream --------------------


def test_r2_row14_the_risk_table_counts_a_binary_file_changed_upstream(hazard, tmp_path):
    into = tmp_path / "port"
    started = start(hazard, "v2.0.0", into)
    stop_line(started)
    blob_row = next(ln for ln in started.stdout.splitlines() if "0020-blob-mixed.patch" in ln)
    assert "high (1 binary file changed upstream)" in blob_row, started.stdout
    _resolve_blob(into)
    stop_line(port(hazard, into, "--continue"))
    git(into, "add", "src/legacy.c")
    done = port(hazard, into, "--continue")
    assert done.exit_code == 0, done.output
    risk = report(hazard, "v2.0.0").split("## Risk table")[1]
    row = next(ln for ln in risk.splitlines() if ln.startswith("| blob-mixed | "))
    assert "none (files unchanged upstream)" not in row
    assert "high (1 binary file changed upstream)" in row, row


# --- torture round 2, row 15: the culprit of a conflict in a renamed file follows the rename ---

ENGINE_V1 = "".join(f"int engine_{i}(void) {{ return {i}; }}\n" for i in range(12))


def test_r2_row15_the_culprit_of_a_renamed_and_modified_file_is_the_change(tmp_path):
    from fixtures import commit_patch
    from port_helpers import declare_toy

    root = tmp_path / "engine"
    upstream = root / "engine-upstream"
    (upstream / "src").mkdir(parents=True)
    git(upstream, "init", "-q", "-b", "main")
    (upstream / "src" / "engine.c").write_text(ENGINE_V1)
    git(upstream, "add", ".")
    git(upstream, "commit", "-q", "-m", "toy 1.0.0")
    git(upstream, "tag", "v1.0.0")
    (upstream / "src" / "core").mkdir()
    git(upstream, "mv", "src/engine.c", "src/core/engine.c")
    (upstream / "src" / "core" / "engine.c").write_text("/* the engine */\n" + ENGINE_V1)
    git(upstream, "commit", "-q", "-am", "engine moved")
    (upstream / "src" / "core" / "engine.c").write_text(
        "/* the engine */\n" + ENGINE_V1.replace("return 6;", "return 60;"))
    git(upstream, "commit", "-q", "-am", "engine rework")
    git(upstream, "tag", "v2.0.0")
    patches = declare_toy(root, upstream, ("v1.0.0", "v2.0.0"))
    tree = root / "work" / "engine-tree"
    toy = {"patches": patches, "upstream": upstream}
    assert cli(toy, "apply", "-f", "toy", "-t", "v1.0.0", "--new", "--source", "git", "--into",
               str(tree)).exit_code == 0
    commit_patch(tree, "engine-hook", "hook", "Hook the engine",
                 lambda t: (t / "src" / "engine.c").write_text(
                     ENGINE_V1.replace("return 6;", "return lms_6();")))
    assert cli(toy, "export", "-f", "toy", "-t", "v1.0.0", "--tree", str(tree)).exit_code == 0
    line = stop_line(start(toy, "v2.0.0", tmp_path / "port"))
    rework = git(upstream, "rev-parse", "v2.0.0")
    assert f"first breaking upstream commit {rework[:12]} (engine rework)" in line, line


# --- torture round 2, row 17: a bad --previous is named as given, in one line -----------------


@pytest.mark.parametrize("damage", ["missing patch", "truncated patch"])
def test_r2_row17_a_broken_previous_series_is_named_by_the_folder_given(git_series, tmp_path,
                                                                       damage):
    previous = tmp_path / "previous-v2"
    shutil.copytree(git_series["patches"] / "toy" / "v1.0.0", previous)
    patch = sorted(previous.glob("*.patch"))[0]
    if damage == "missing patch":
        patch.unlink()
    else:
        patch.write_bytes(patch.read_bytes()[:200])
    refused = start(git_series, "v2.0.0", tmp_path / "port", "--previous", str(previous))
    assert refused.exit_code == 2, refused.output
    line = one_line_error(refused)
    assert f"series {previous}: " in line and patch.name in line, line
    assert not (tmp_path / "port").exists()


def test_r2_row17_a_previous_that_is_a_file_is_one_line(git_series, tmp_path):
    afile = tmp_path / "series.yaml"
    afile.write_text("framework: toy\n")
    refused = start(git_series, "v2.0.0", tmp_path / "port", "--previous", str(afile))
    assert refused.exit_code == 2, refused.output
    assert f"--previous {afile} is a file" in one_line_error(refused)
    assert "Usage:" not in refused.output and "Try '" not in refused.output, refused.output


# --- torture round 2, row 10: an earlier patch changed by hand is flagged ----------------------


def test_r2_row10_an_earlier_commit_changed_by_hand_is_flagged_in_the_report(git_series,
                                                                             tmp_path):
    into = tmp_path / "port"
    stopped(git_series, into)
    resolve_storage(into)
    git(into, "cherry-pick", "--quit")
    git(into, "commit", "-q", "-a", "--amend", "--no-edit")  # folded into allocator-hook
    refused = port(git_series, into, "--continue")
    assert refused.exit_code == 2, refused.output
    skipped = port(git_series, into, "--skip", "--reason", "folded into the allocator hook")
    assert skipped.exit_code == 0, skipped.output
    text = report(git_series, "v2.0.0")
    rows = text.split("## Patches")[1].split("## Time")[0]
    row = next(ln for ln in rows.splitlines() if ln.startswith("| allocator-hook | "))
    assert "changed by hand after the port made it" in row, row
    core = next(ln for ln in rows.splitlines() if ln.startswith("| lms-core | "))
    assert "changed by hand" not in core, core


# --- torture round 2, row 16: a full disk is named, and so is what the port left there ---------


def _full_under(monkeypatch, full: Path) -> None:
    """os.statvfs reports the device of FULL (and only it) as having no room left."""
    real = os.statvfs

    class Full:
        f_bavail, f_frsize = 0, 4096

    def statvfs(path):
        return Full() if Path(path).resolve().is_relative_to(full.resolve()) else real(path)

    monkeypatch.setattr(os, "statvfs", statvfs)


def test_r2_row16_a_full_patches_folder_in_the_finish_is_named_with_its_staging_folder(
        git_series, tmp_path, monkeypatch):
    import errno as errno_mod
    from lmsforge.series import export

    into = tmp_path / "port"
    stopped(git_series, into)
    resolve_storage(into)
    git(into, "add", "src/storage.h")
    patches = git_series["patches"]

    def move(src, dst):  # what shutil.move raises when the copy to another device runs out
        raise OSError(errno_mod.ENOSPC, "No space left on device", str(src), None, str(dst))

    with monkeypatch.context() as patched:
        patched.setattr(export.shutil, "move", move)
        _full_under(patched, patches)
        failed = port(git_series, into, "--continue")
    assert failed.exit_code == 1, failed.output
    line = one_line_error(failed)
    staging = [p for p in (patches / "toy").iterdir() if p.name.startswith(".v2.0.0.port-")]
    assert len(staging) == 1, staging
    assert f"no space left on the device of {patches}" in line, line
    assert "lmsforge-port-tmp" not in line, line
    assert f"stays in {staging[0]}" in line and "--continue" in line and "--abort" in line, line
    done = port(git_series, into, "--continue")
    assert done.exit_code == 0, done.output
    assert not staging[0].exists()


def test_r2_row16_a_full_work_tree_in_the_replay_is_named(git_series, tmp_path, monkeypatch):
    from lmsforge.port import state as state_mod

    into = tmp_path / "port"
    stopped(git_series, into)
    resolve_storage(into)
    git(into, "add", "src/storage.h")
    real_save = state_mod.PortState.save

    def save(self, tree):  # a write of an open file names no path
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patched:
        patched.setattr(state_mod.PortState, "save", save)
        _full_under(patched, into)
        failed = port(git_series, into, "--continue")
    assert failed.exit_code == 1, failed.output
    line = one_line_error(failed)
    assert f"no space left on the device of {into}" in line, line
    assert state_mod.PortState.save is real_save


# --- torture round 2, row 5: a resolution recorded after a kill reaches the shared cache ------


def test_r2_row5_a_resolution_made_after_a_kill_is_saved_and_replays(git_series, tmp_path):
    """Killed right after git's conflicting pick, the resume meets the conflict again and rerere
    records it as a second variant (preimage.1, postimage.1) next to a preimage with no
    resolution. That resolution is saved like any other, and a new port replays it."""
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(git_series, "v2.0.0", into), tmp_path,
                              kill={"match": "cherry-pick --allow-empty", "when": "after",
                                    "rc": "1", "group": "0"})
    assert killed.returncode == -9, killed.stderr
    assert "port stopped at 0030-storage-hook.patch" in stop_line(
        port(git_series, into, "--continue"))
    resolve_storage(into)
    done = port(git_series, into, "--continue")
    assert done.exit_code == 0, done.output
    (entry,) = (into / ".git" / "rr-cache").iterdir()
    assert (entry / "postimage.1").is_file() and not (entry / "postimage").exists()
    text = report(git_series, "v2.0.0")
    assert "| storage-hook | 0030-storage-hook.patch | resolved |" in text
    assert "saved to the shared rerere cache): 1" in text
    (saved,) = (git_series["patches"] / "toy" / "rr-cache").iterdir()
    assert (saved / "postimage").read_text() == STORAGE_RESOLVED
    shutil.move(git_series["patches"] / "toy" / "v2.0.0", tmp_path / "first-series")
    again = start(git_series, "v2.0.0", tmp_path / "again")
    assert again.exit_code == 0, again.output
    assert "| storage-hook | 0030-storage-hook.patch | rerere |" in report(git_series, "v2.0.0")


# --- torture round 2, rows 6 and 19: a stop nobody saw is shown before anything acts on it ----


def _skip_args(toy, into: Path) -> list[str]:
    return ["--patches-dir", str(toy["patches"]), "port", "--skip", "--reason", "not on 2.0",
            "--into", str(into)]


@pytest.mark.parametrize("kill", ["at-the-stop-line", "in-the-pick"])
def test_r2_row6_a_rerun_of_a_killed_skip_does_not_skip_the_next_patch(hazard, tmp_path, kill):
    """The --skip of blob-mixed is killed after it skipped it and went on to legacy-hook:
    before that stop's line was printed, or inside legacy-hook's pick. The same --skip run
    again must not leave legacy-hook out unseen: it refuses (exit 2) and names it."""
    into = tmp_path / "port"
    assert "port stopped at 0020-blob-mixed.patch" in stop_line(start(hazard, "v2.0.0", into))
    where = ({"match": "ls-files --unmerged"} if kill == "at-the-stop-line" else
             {"match": "cherry-pick --allow-empty", "when": "after", "rc": "1"})
    killed = lmsforge_process(_skip_args(hazard, into), tmp_path, kill=where)
    assert killed.returncode == -9, killed.stderr
    again = port(hazard, into, "--skip", "--reason", "not on 2.0")
    assert again.exit_code == 2, again.output
    line = one_line_error(again)
    if kill == "at-the-stop-line":
        assert "port stopped at 0030-legacy-hook.patch (its stop line was lost" in line, line
        assert unmerged(into) == "DU src/legacy.c"
    else:
        assert "the cherry-pick of 0030-legacy-hook.patch was interrupted" in line, line
        assert "port stopped at 0030-legacy-hook.patch" in stop_line(
            port(hazard, into, "--continue"))
    git(into, "add", "src/legacy.c")  # now seen: resolved as at any stop
    done = port(hazard, into, "--continue")
    assert done.exit_code == 0, done.output
    text = report(hazard, "v2.0.0")
    assert outcome(text, "blob-mixed") == "skipped"
    assert outcome(text, "legacy-hook") == "resolved"
    assert "legacy-hook" in series_ids(hazard, "v2.0.0")


def test_r2_row6_a_skip_goes_through_once_the_refusal_showed_the_stop(hazard, tmp_path):
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(hazard, "v2.0.0", into), tmp_path,
                              kill={"match": "ls-files --unmerged"})
    assert killed.returncode == -9, killed.stderr
    refused = port(hazard, into, "--skip", "--reason", "binary, not on 2.0")
    assert refused.exit_code == 2
    assert "0020-blob-mixed.patch (its stop line was lost" in one_line_error(refused)
    skipped = port(hazard, into, "--skip", "--reason", "binary, not on 2.0")
    assert "port stopped at 0030-legacy-hook.patch" in stop_line(skipped)
    assert outcome_in_state(into, "blob-mixed") == "skipped"


def outcome_in_state(into: Path, patch_id: str) -> str:
    data = json.loads((into / ".git" / "lmsforge-port.json").read_text())
    return next(p["status"] for p in data["patches"] if p["id"] == patch_id)


def test_r2_row19_a_stop_whose_line_a_kill_lost_is_shown_by_continue(hazard, tmp_path):
    """Killed after the stop at blob-mixed was saved, before its line: the documented
    --continue says where the port stopped and why (it said 'empty' for a binary-only patch,
    or named only the unmerged path), and keeps the conflict; from then on it is a stop."""
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(hazard, "v2.0.0", into), tmp_path,
                              kill={"match": "ls-files --unmerged"})
    assert killed.returncode == -9, killed.stderr
    shown = port(hazard, into, "--continue")
    assert shown.exit_code == 2, shown.output
    line = one_line_error(shown)
    assert "port stopped at 0020-blob-mixed.patch (its stop line was lost" in line, line
    assert "conflicts in assets/blob.bin" in line, line
    assert unmerged(into) == "UU assets/blob.bin"
    refused = port(hazard, into, "--continue")  # a stop like any other now (row 2)
    assert refused.exit_code == 2
    assert "assets/blob.bin (binary)" in one_line_error(refused)
    _resolve_blob(into)
    assert "port stopped at 0030-legacy-hook.patch" in stop_line(port(hazard, into, "--continue"))


def test_r2_row19_status_shows_a_lost_stop_and_continue_then_acts(git_series, tmp_path):
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(git_series, "v2.0.0", into), tmp_path,
                              kill={"match": "ls-files --unmerged"})
    assert killed.returncode == -9, killed.stderr
    assert "→ 0030-storage-hook.patch" in port(git_series, into, "--status").stdout
    resolve_storage(into)
    done = port(git_series, into, "--continue")
    assert done.exit_code == 0, done.output
    assert "| storage-hook | 0030-storage-hook.patch | resolved |" in report(git_series, "v2.0.0")


# --- torture round 2, row 8: a kill inside `git worktree add` of the trial pick --------------

_KILLING_SMUDGE = """#!/bin/sh
# A smudge filter that kills its process group (lmsforge and git) once, while `git worktree
# add` checks the trial work tree out: its entry stays locked ("initializing").
if [ -e "$0.armed" ]; then rm -f "$0.armed"; kill -KILL 0; sleep 5; fi
cat
"""


def test_r2_row8_a_kill_inside_the_trial_worktree_add_does_not_wedge_the_port(git_series,
                                                                                tmp_path):
    into = tmp_path / "port"
    killed = lmsforge_process(start_args(git_series, "v2.0.0", into), tmp_path,
                              kill={"match": "cherry-pick --allow-empty", "when": "after",
                                    "rc": "1", "group": "0"})
    assert killed.returncode == -9, killed.stderr
    resolve_storage(into)
    git(into, "add", "src/storage.h")
    smudge = tmp_path / "killing-smudge"
    smudge.write_text(_KILLING_SMUDGE)
    smudge.chmod(0o755)
    (tmp_path / "killing-smudge.armed").write_text("")
    attributes = into / ".git" / "info" / "attributes"
    kept = attributes.read_text()
    attributes.write_text(kept + "* filter=killer\n")
    git(into, "config", "filter.killer.smudge", str(smudge))
    resumed = lmsforge_process(["--patches-dir", str(git_series["patches"]), "port",
                                "--continue", "--into", str(into)], tmp_path)
    assert resumed.returncode == -9, resumed.stderr
    assert not (tmp_path / "killing-smudge.armed").exists()
    assert (into / ".git" / "worktrees" / "trial" / "locked").is_file()  # what git left
    attributes.write_text(kept)
    git(into, "config", "--unset", "filter.killer.smudge")
    done = port(git_series, into, "--continue")
    assert done.exit_code == 0, done.output
    assert "| storage-hook | 0030-storage-hook.patch | resolved |" in report(git_series, "v2.0.0")
    assert leftovers(git_series, into, tmp_path) == []


# --- torture round 2, row 11: the state file deleted at a stop -------------------------------


def test_r2_row11_a_port_whose_state_file_is_gone_is_named_with_the_way_out(git_series,
                                                                            tmp_path):
    into = tmp_path / "port"
    stopped(git_series, into)
    (into / ".git" / "lmsforge-port.json").unlink()
    for action in ("--continue", "--status", "--abort"):
        result = port(git_series, into, action)
        assert result.exit_code == 2, result.output
        line = one_line_error(result)
        assert "unfinished port of toy v1.0.0 to v2.0.0 whose state file" in line, line
        assert "rm -rf" in line and "work tree of a finished port" not in line, line
    again = start(git_series, "v2.0.0", into)
    assert again.exit_code == 2
    assert "unfinished port of toy v1.0.0 to v2.0.0" in one_line_error(again)
    status = cli(git_series, "status", "--tree", str(into))
    assert status.exit_code == 0, status.output
    assert "unfinished port of toy v1.0.0 to v2.0.0" in status.stdout
    finished = tmp_path / "finished"  # a finished port's tree is not taken for one
    assert start(git_series, "v1.1.0", finished).exit_code == 0
    result = port(git_series, finished, "--continue")
    assert result.exit_code == 2
    assert "work tree of a finished port" in one_line_error(result)


# --- torture round 2, row 12: a killed --abort is finished by --abort ------------------------

_UNLINK_KILLER = """
import os, runpy, signal, sys
left = int(os.environ["KILL_AT_UNLINK"])
real_unlink = os.unlink
def unlink(*args, **kwargs):
    global left
    left -= 1
    if left == 0:
        os.kill(os.getpid(), signal.SIGKILL)
    return real_unlink(*args, **kwargs)
os.unlink = unlink
sys.argv = ["lmsforge", *sys.argv[1:]]
runpy.run_module("lmsforge", run_name="__main__")
"""


def test_r2_row12_status_after_a_killed_abort_says_abort(git_series, tmp_path):
    into = tmp_path / "port"
    before = snapshot(git_series["patches"])
    stopped(git_series, into)
    driver = tmp_path / "unlink_killer.py"
    driver.write_text(_UNLINK_KILLER)
    killed = subprocess.run([sys.executable, str(driver), "--patches-dir",
                             str(git_series["patches"]), "port", "--abort", "--into", str(into)],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "KILL_AT_UNLINK": "20"})
    assert killed.returncode == -9, killed.stderr
    assert (into / ".git" / "lmsforge-port.json").is_file()  # half removed, state still there
    status = port(git_series, into, "--status")
    assert status.exit_code == 0, status.output
    assert "--abort" in status.stdout.splitlines()[-1], status.stdout
    assert "--continue" not in status.stdout.splitlines()[-1], status.stdout
    for action in ("--continue",):
        refused = port(git_series, into, action)
        assert refused.exit_code == 2, refused.output
        assert "an --abort of this port was interrupted" in one_line_error(refused)
    done = port(git_series, into, "--abort")
    assert done.exit_code == 0, done.output
    assert not into.exists()
    assert snapshot(git_series["patches"]) == before


# --- torture round 2, row 18: two starts into one --into --------------------------------------


def test_r2_row18_a_start_meeting_another_start_in_git_init_is_refused_in_one_line(git_series,
                                                                                   tmp_path):
    """The other start holds the port lock and is inside `git init` (config.lock): this one
    exits 2 "another lmsforge port is running", not 1 with git's "could not lock config
    file", and leaves the folder to the other."""
    into = tmp_path / "port"
    (into / ".git").mkdir(parents=True)
    (into / ".git" / "config.lock").write_text("")
    with filelock.FileLock(str(into / ".git" / "lmsforge-port.lock"), timeout=0):
        loser = start(git_series, "v1.1.0", into)
        assert loser.exit_code == 2, loser.output
        assert "another lmsforge port is running" in one_line_error(loser)
        assert sorted(p.name for p in (into / ".git").iterdir()) == ["config.lock",
                                                                     "lmsforge-port.lock"]
