"""Helpers shared by the port tests: the stop line, and running a printed command as pasted."""

from __future__ import annotations

import re
import shlex

from click.testing import Result

from fixtures import lmsforge


def stop_line(result: Result) -> str:
    """The single `lmsforge: port stopped at` line of a port that stopped for the user (exit 3)."""
    assert result.exit_code == 3, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("lmsforge: ")]
    assert len(lines) == 1 and lines[0].startswith("lmsforge: port stopped at "), result.stderr
    return lines[0]


def printed_commands(text: str) -> list[str]:
    """Every `lmsforge …` command quoted in backticks in TEXT."""
    return re.findall(r"`(lmsforge [^`]+)`", text)


def run_pasted(command: str, env: dict[str, str] | None = None) -> Result:
    """Run a printed command exactly as a user pasting it into a shell would."""
    words = shlex.split(command)
    assert words[0] == "lmsforge", command
    return lmsforge(*words[1:], env=env)
