"""The command-line surface: help with examples, exit codes, one-line errors."""

from __future__ import annotations

import pytest

from fixtures import lmsforge, one_line_error, snapshot

COMMANDS = ["list", "fetch", "apply", "verify", "export", "status", "port", "render", "build",
            "test", "publish", "doctor", "bundle", "plan"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help_with_an_example(command):
    result = lmsforge(command, "--help")
    assert result.exit_code == 0
    assert "Example: lmsforge " + command in result.output


def test_ibm_docs_tag_gets_the_documented_answer(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = lmsforge("apply", "--framework", "pytorch", "--tag", "v1.4.0")
    assert result.exit_code == 2
    line = one_line_error(result)
    assert "no LMS series for v1.4.0 yet; series exist for " in line
    assert "on a host that can fetch the tag" in line
    assert snapshot(tmp_path) == {}


def test_bad_usage_exits_2():
    assert lmsforge("verify", "--level", "everything").exit_code == 2
    assert lmsforge("verify", "--tag", "v2.6.0").exit_code == 2


def test_list_json_names_the_declared_trees():
    import json

    result = lmsforge("list", "--json")
    assert result.exit_code == 0
    rows = {(r["framework"], r["tag"]): r for r in json.loads(result.stdout)["series"]}
    for key in [("pytorch", "v2.6.0"), ("pytorch", "v1.13.1"), ("tensorflow", "v2.14.1")]:
        kinds = [s["kind"] for s in rows[key]["sources"]]
        assert kinds == ["archive", "git"]
        assert len(rows[key]["sources"][0]["sha256"]) == 64
    assert rows[("pytorch", "v1.4.0")]["series"] is None


def test_version_is_the_one_in_pyproject():
    """`--version` prints the module's version; pip and the packages see pyproject's. One number
    for both, bumped with each release (finding 21: two lmsforge releases both said 0.1.0)."""
    import re
    from pathlib import Path

    from lmsforge import __version__

    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert re.search(r'^version = "([^"]+)"', pyproject, re.MULTILINE).group(1) == __version__
    assert lmsforge("--version").output.strip() == f"lmsforge, version {__version__}"
