"""`lmsforge port` on fixture upstreams: clean, conflicting, resumed, aborted, replayed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml

from fixtures import commit_patch, git, one_line_error, snapshot
from port_helpers import cli, port, reexport_on_git, resolve_storage, start, stop_line


@pytest.fixture
def git_series(toy_series):
    return reexport_on_git(toy_series)


def test_clean_port_with_moved_context(git_series, tmp_path):
    into = tmp_path / "port"
    result = start(git_series, "v1.1.0", into)
    assert result.exit_code == 0, result.output
    folder = git_series["patches"] / "toy" / "v1.1.0"
    manifest = yaml.safe_load((folder / "series.yaml").read_text())
    assert manifest["ported_from"]["tag"] == "v1.0.0"
    assert [p["id"] for p in manifest["patches"]] == ["lms-core", "allocator-hook",
                                                       "storage-hook"]
    report = (folder / "PORT-REPORT.md").read_text()
    assert "| allocator-hook | 0020-allocator-hook.patch | picked |" in report
    assert "Range diff" in report
    # The new series verifies on its own tag, round trip included.
    verify = cli(git_series, "verify", "-f", "toy", "-t", "v1.1.0", "--source", "git")
    assert verify.exit_code == 0, verify.output
    text = (folder / "0020-allocator-hook.patch").read_text()
    assert "@@ -19,6 +20,7 @@" in text or "@@ -20," in text  # context moved by one line


def test_conflicting_port_stops_with_report_and_exit_3(git_series, tmp_path):
    into = tmp_path / "port"
    before = snapshot(git_series["patches"])
    result = start(git_series, "v2.0.0", into)
    assert result.exit_code == 3
    line = stop_line(result)
    assert "port stopped at 0030-storage-hook.patch: conflicts in src/storage.h (lines " in line
    culprit = git(git_series["upstream"], "rev-parse", "v2.0.0")
    assert f"first breaking upstream commit {culprit[:12]} (toy 2.0.0: rename size)" in line
    assert "--continue" in line
    assert snapshot(git_series["patches"]) == before  # nothing written until the port succeeds
    status = port(git_series, into, "--status")
    assert "→ 0030-storage-hook.patch" in status.stdout


def test_continue_refuses_markers_then_finishes(git_series, tmp_path):
    into = tmp_path / "port"
    assert start(git_series, "v2.0.0", into).exit_code == 3
    refused = port(git_series, into, "--continue")
    assert refused.exit_code == 2 and "conflict markers" in one_line_error(refused)
    resolve_storage(into)
    result = port(git_series, into, "--continue")
    assert result.exit_code == 0, result.output
    folder = git_series["patches"] / "toy" / "v2.0.0"
    report = (folder / "PORT-REPORT.md").read_text()
    assert "| storage-hook | 0030-storage-hook.patch | resolved |" in report
    assert cli(git_series, "verify", "-f", "toy", "-t", "v2.0.0", "--source",
               "git").exit_code == 0
    # The resolution is saved in the repository for every later port.
    assert any((git_series["patches"] / "toy" / "rr-cache").glob("*/postimage"))


def test_recorded_resolution_replays_on_the_next_port(git_series, tmp_path):
    first = tmp_path / "first"
    assert start(git_series, "v2.0.0", first).exit_code == 3
    resolve_storage(first)
    assert port(git_series, first, "--continue").exit_code == 0
    series_b = git_series["patches"] / "toy" / "v2.0.0"
    produced = (series_b / "0030-storage-hook.patch").read_bytes()
    # Another maintainer ports again from scratch: rerere resolves the same conflict.
    os.rename(series_b, tmp_path / "first-result")
    second = tmp_path / "second"
    result = start(git_series, "v2.0.0", second)
    assert result.exit_code == 0, result.output
    report = (series_b / "PORT-REPORT.md").read_text()
    assert "| storage-hook | 0030-storage-hook.patch | rerere |" in report
    assert (series_b / "0030-storage-hook.patch").read_bytes() == produced


def test_skip_records_the_reason(git_series, tmp_path):
    into = tmp_path / "port"
    assert start(git_series, "v2.0.0", into).exit_code == 3
    assert port(git_series, into, "--skip").exit_code == 2  # a reason is required
    result = port(git_series, into, "--skip", "--reason", "storage moved to lms.c upstream")
    assert result.exit_code == 0, result.output
    manifest = yaml.safe_load((git_series["patches"] / "toy" / "v2.0.0" /
                               "series.yaml").read_text())
    assert manifest["skipped"] == [{"id": "storage-hook",
                                    "reason": "storage moved to lms.c upstream"}]
    assert [p["id"] for p in manifest["patches"]] == ["lms-core", "allocator-hook"]


def test_abort_restores_everything(git_series, tmp_path):
    into = tmp_path / "port"
    patches_before = snapshot(git_series["patches"])
    assert start(git_series, "v2.0.0", into).exit_code == 3
    result = port(git_series, into, "--abort")
    assert result.exit_code == 0, result.output
    assert not into.exists()
    assert snapshot(git_series["patches"]) == patches_before


def test_patch_already_upstream_is_dropped(git_series, tmp_path):
    upstream = git_series["upstream"]
    git(upstream, "checkout", "-q", "v1.1.0")
    (upstream / "src" / "lms.c").write_text("int lms_reclaim(void) { return 0; }\n")
    git(upstream, "add", "-A")
    git(upstream, "commit", "-q", "-m", "upstream adopts lms.c")
    git(upstream, "tag", "v1.2.0")
    result = start(git_series, "v1.2.0", tmp_path / "port")
    assert result.exit_code == 0, result.output
    manifest = yaml.safe_load((git_series["patches"] / "toy" / "v1.2.0" /
                               "series.yaml").read_text())
    assert [p["id"] for p in manifest["patches"]] == ["allocator-hook", "storage-hook"]
    assert manifest["skipped"][0]["id"] == "lms-core"
    assert manifest["skipped"][0]["reason"].startswith("dropped: ")


def test_port_to_existing_series_or_wrong_base_is_refused(git_series, tmp_path):
    result = start(git_series, "v1.0.0", tmp_path / "p")
    assert result.exit_code == 2 and "exists already" in one_line_error(result)
    manifest = git_series["series"] / "series.yaml"
    manifest.write_text(manifest.read_text().replace(
        yaml.safe_load(manifest.read_text())["base"], "0" * 40))
    # the base no longer matches v1.0.0: refused before anything is created
    result = start(git_series, "v1.1.0", tmp_path / "q")
    assert result.exit_code == 2
    assert not (tmp_path / "q").exists()


def test_port_resumes_after_the_process_was_killed(git_series, tmp_path):
    """Kill the port between two patches; --continue finishes from git's refs."""
    into = tmp_path / "port"
    env = dict(os.environ)
    command = [sys.executable, "-m", "lmsforge", "--patches-dir", str(git_series["patches"]),
               "port", "--into", str(into), "-f", "toy", "--from", "v1.0.0", "--to", "v2.0.0",
               "--source", "git"]
    proc = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    state = None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        candidate = into / ".git" / "lmsforge-port.json"
        if candidate.is_file():
            data = json.loads(candidate.read_text())
            if any(p["status"] == "picked" for p in data["patches"]):
                os.killpg(proc.pid, signal.SIGKILL)
                state = data
                break
        time.sleep(0.01)
    proc.wait()
    if state is None:
        pytest.skip("the port finished before it could be interrupted on this machine")
    # Whatever was half done, --continue (then a resolution and --continue) completes the port.
    result = port(git_series, into, "--continue")
    if result.exit_code == 3:
        resolve_storage(into)
        result = port(git_series, into, "--continue")
    assert result.exit_code == 0, result.output
    manifest = yaml.safe_load((git_series["patches"] / "toy" / "v2.0.0" /
                               "series.yaml").read_text())
    assert [p["id"] for p in manifest["patches"]] == ["lms-core", "allocator-hook",
                                                       "storage-hook"]


def test_report_pairs_a_patch_whose_resolution_moved_it_to_another_file(git_series, tmp_path):
    """The range diff pairs patches by Lms-Patch-Id, not by how alike their diffs are."""
    into = tmp_path / "port"
    assert start(git_series, "v2.0.0", into).exit_code == 3
    # Resolve the way a maintainer does when the hooked file is gone or different on the
    # new tag: keep the tag's file, put the hook somewhere else.
    git(into, "checkout", "--ours", "src/storage.h")
    alloc = into / "src" / "alloc.c"
    alloc.write_text(alloc.read_text() + "void *storage_lms_table;\n")
    result = port(git_series, into, "--continue")
    assert result.exit_code == 0, result.output
    report = (git_series["patches"] / "toy" / "v2.0.0" / "PORT-REPORT.md").read_text()
    assert re.search(r"^3: +[0-9a-f]+ ! 3: +[0-9a-f]+ Track LMS state per storage$", report,
                     re.M), report
    assert "< -:  --------" not in report and "-:  -------- >" not in report


def test_risk_table_does_not_count_files_the_series_adds(git_series, tmp_path):
    tree = git_series["work"] / "git-tree"
    commit_patch(tree, "lms-core-tuning", "policy", "Tune the LMS core",
                 lambda t: (t / "src" / "lms.c").write_text(
                     (t / "src" / "lms.c").read_text() + "int lms_budget = 1;\n"))
    assert cli(git_series, "export", "-f", "toy", "-t", "v1.0.0", "--tree",
               str(tree)).exit_code == 0
    result = start(git_series, "v1.1.0", tmp_path / "port")
    assert result.exit_code == 0, result.output
    report = (git_series["patches"] / "toy" / "v1.1.0" / "PORT-REPORT.md").read_text()
    assert ("| lms-core-tuning | 0040-lms-core-tuning.patch | 0 | 0 | 0 | none (new files only) "
            "| — |") in report, report
    assert "| allocator-hook | 0020-allocator-hook.patch | 1 |" in report


def test_a_recorded_resolution_replays_across_an_upstream_rename(git_series, tmp_path):
    """rerere's resolution for storage.h resolves the same conflict in the renamed file."""
    first = tmp_path / "first"
    assert start(git_series, "v2.0.0", first).exit_code == 3
    resolve_storage(first)
    assert port(git_series, first, "--continue").exit_code == 0
    upstream = git_series["upstream"]
    git(upstream, "checkout", "-q", "v2.0.0")
    git(upstream, "mv", "src/storage.h", "src/storage_impl.h")
    git(upstream, "commit", "-q", "-m", "storage: new file name")
    git(upstream, "tag", "v2.1.0")
    result = start(git_series, "v2.1.0", tmp_path / "second")
    assert result.exit_code == 0, result.output
    folder = git_series["patches"] / "toy" / "v2.1.0"
    report = (folder / "PORT-REPORT.md").read_text()
    assert "| storage-hook | 0030-storage-hook.patch | rerere |" in report
    assert "src/storage.h → src/storage_impl.h" in report
    patch = (folder / "0030-storage-hook.patch").read_text()
    assert "+++ b/src/storage_impl.h" in patch and "+  void *lms;" in patch


def test_report_gives_the_tools_time_and_the_hand_time_per_patch(git_series, tmp_path):
    """Wall time of the port itself and of the hand work at each stop (issue 16: how long a
    port took, and where the next one of the series may save)."""
    into = tmp_path / "port"
    assert start(git_series, "v2.0.0", into).exit_code == 3
    state = json.loads((into / ".git" / "lmsforge-port.json").read_text())
    assert state["tool_seconds"] > 0 and state["stopped_at"] > 0
    time.sleep(1.5)  # the maintainer reads the stop line and resolves
    resolve_storage(into)
    assert port(git_series, into, "--continue").exit_code == 0
    report = (git_series["patches"] / "toy" / "v2.0.0" / "PORT-REPORT.md").read_text()
    section = report.split("## Time\n", 1)[1].split("\n## ", 1)[0]
    assert "- the port's own commands: " in section
    hand = re.search(r"- by hand, from each stop to the command that went on: (\d+) s", section)
    assert hand and int(hand.group(1)) >= 1, section
    assert re.search(r"  - storage-hook: \d+ s \(resolved\)", section), section
    assert "allocator-hook" not in section  # picked: no hand time


def test_a_clean_port_reports_no_hand_time(git_series, tmp_path):
    assert start(git_series, "v1.1.0", tmp_path / "port").exit_code == 0
    report = (git_series["patches"] / "toy" / "v1.1.0" / "PORT-REPORT.md").read_text()
    assert "- by hand, from each stop to the command that went on: 0 s (no stop)" in report
