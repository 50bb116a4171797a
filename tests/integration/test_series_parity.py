"""`lmsforge status --series`: the cross-series check, on real series made with apply + export."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fixtures import build_series, commit_patch, lmsforge, make_upstream, one_line_error, \
    write_upstream_yaml

REPO = Path(__file__).resolve().parents[2]

POLICY_TEST = '''import unittest


class TestPolicy(unittest.TestCase):
    def test_evicts_the_oldest(self):
        self.assertTrue(True)
'''
POLICY_GTEST = "TEST(LmsPolicyTest, EvictsTheOldest) {}\n"


def add_policy(tree: Path) -> None:
    (tree / "src" / "policy.c").write_text("int lms_policy(void) { return 1; }\n")
    (tree / "src" / "policy_test.cpp").write_text(POLICY_GTEST)
    (tree / "test").mkdir(exist_ok=True)
    (tree / "test" / "test_policy.py").write_text(POLICY_TEST)


@pytest.fixture
def patches(tmp_path: Path) -> Path:
    """Series of v1.0.0 and v1.1.0 with the same three patches, then a policy patch in v1.1.0."""
    upstream = make_upstream(tmp_path)
    root = tmp_path / "patches"
    write_upstream_yaml(root, upstream)
    build_series(root, tmp_path, "v1.0.0")
    tree = build_series(root, tmp_path, "v1.1.0")
    assert status(root).exit_code == 0  # the same patches: nothing to explain
    commit_patch(tree, "memory-policy", "policy", "Choose what to page out", add_policy)
    result = lmsforge("--patches-dir", str(root), "export", "-f", "toy", "-t", "v1.1.0",
                      "--tree", str(tree))
    assert result.exit_code == 0, result.output
    return root


def status(root: Path, *extra: str):
    return lmsforge("--patches-dir", str(root), "status", "--series", "-f", "toy", *extra)


def items(root: Path) -> dict[tuple[str, str], dict[str, object]]:
    result = status(root, "--json")
    (report,) = json.loads(result.stdout)
    return {(i["kind"], i["name"]): i for i in report["items"]}


def write_reasons(root: Path, text: str) -> None:
    (root / "toy" / "parity.yaml").write_text(text)


def test_a_patch_in_one_series_only_fails_until_a_reason_is_recorded(patches):
    result = status(patches)
    assert result.exit_code == 1
    error = one_line_error(result)
    assert "3 series difference(s) without a reason" in error
    assert "only in v1.1.0" in error and "parity.yaml" in error
    found = items(patches)
    assert found[("patch", "memory-policy")]["status"] == "unexplained"
    assert found[("patch", "memory-policy")]["missing_from"] == ["v1.0.0"]
    # The tests the patch adds are listed by name: the handle on each fix.
    assert found[("test", "LmsPolicyTest.EvictsTheOldest")]["carried_by"] == ["v1.1.0"]
    assert found[("test", "test_policy.py::TestPolicy.test_evicts_the_oldest")]["status"] == \
        "unexplained"
    assert found[("patch", "lms-core")]["status"] == "all"

    write_reasons(patches, "format: 1\nonly_in:\n- patch: memory-policy\n  tags: [v1.1.0]\n"
                           "  reason: needs the allocator of 1.1\n")
    result = status(patches)
    assert result.exit_code == 0, result.output
    assert "needs the allocator of 1.1" in result.stdout
    found = items(patches)
    assert found[("patch", "memory-policy")]["status"] == "explained"
    # The patch's reason covers the tests it adds.
    assert found[("test", "LmsPolicyTest.EvictsTheOldest")]["reason"] == \
        "with patch memory-policy: needs the allocator of 1.1"


def test_a_fix_ported_without_its_test_is_reported(patches, tmp_path):
    """The patch is in both series but a regression test only in one: a fix not carried."""
    tree = tmp_path / "tree-v1.0.0"
    commit_patch(tree, "memory-policy", "policy", "Choose what to page out",
                 lambda t: (t / "src" / "policy.c").write_text("int lms_policy(void);\n"))
    assert lmsforge("--patches-dir", str(patches), "export", "-f", "toy", "-t", "v1.0.0",
                    "--tree", str(tree)).exit_code == 0
    result = status(patches)
    assert result.exit_code == 1
    assert "2 series difference(s)" in one_line_error(result)
    found = items(patches)
    assert found[("patch", "memory-policy")]["status"] == "all"
    assert found[("test", "LmsPolicyTest.EvictsTheOldest")]["missing_from"] == ["v1.0.0"]


def test_a_reason_that_no_longer_matches_is_stale(patches):
    write_reasons(patches, "format: 1\nonly_in:\n- patch: memory-policy\n  tags: [v1.1.0]\n"
                           "  reason: not yet ported\n- patch: lms-core\n  tags: [v1.0.0]\n"
                           "  reason: was only in 1.0\n")
    result = status(patches)
    assert result.exit_code == 1
    error = one_line_error(result)
    assert "stale reason (patch lms-core only_in ['v1.0.0']: carried by ['v1.0.0', 'v1.1.0'])" \
        in error


@pytest.mark.parametrize("text", ["format: 1\nonly_in:\n- patch: memory-policy\n  tags: []\n"
                                  "  reason: x\n",
                                  "format: 2\n", "only_in: [\n"])
def test_a_broken_reasons_file_is_bad_input(patches, text):
    write_reasons(patches, text)
    result = status(patches)
    assert result.exit_code == 2
    assert "parity.yaml" in one_line_error(result)


def test_series_flag_refuses_a_tree_and_unknown_frameworks(patches, tmp_path):
    result = lmsforge("--patches-dir", str(patches), "status", "--series", "--tree",
                      str(tmp_path))
    assert result.exit_code == 2
    result = lmsforge("--patches-dir", str(patches), "status", "--series", "-f", "nope")
    assert result.exit_code == 2
    assert "no series of `nope`" in one_line_error(result)


def test_bundled_series_carry_the_same_patches_and_tests():
    """CI's guard: a fix (or a policy) added to one bundled series only fails here until it is
    ported or its reason is recorded in patches/<framework>/parity.yaml."""
    result = lmsforge("--patches-dir", str(REPO / "patches"), "status", "--series", "--json")
    reports = {r["framework"]: r for r in json.loads(result.stdout)}
    unexplained = [(r["framework"], i["kind"], i["name"], i["carried_by"])
                   for r in reports.values() for i in r["items"] if i["status"] == "unexplained"]
    assert unexplained == [] and result.exit_code == 0, (unexplained, result.output)
    pytorch = reports["pytorch"]
    assert {"v2.6.0", "v1.13.1"} <= set(pytorch["tags"])
    kinds = [i["kind"] for i in pytorch["items"]]
    assert kinds.count("patch") >= 12 and kinds.count("test") >= 66
