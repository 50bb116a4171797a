"""An empty string is never taken as "not given": every string or path option and argument of
every command refuses it (issue 11: `verify -t ""` verified every series, `--cache-dir ""` made
the current folder the cache)."""

from __future__ import annotations

import click
import pytest

from fixtures import lmsforge, snapshot
from lmsforge.cli import NonEmpty, main


def _string_params() -> list[tuple[list[str], str]]:
    found = [([], opt) for p in main.params if isinstance(p, click.Option)
             for opt in p.opts[:1] if isinstance(p.type, NonEmpty)]
    for name, command in sorted(main.commands.items()):
        for param in command.params:
            if isinstance(param, click.Option) and not param.is_flag:
                assert isinstance(param.type, (NonEmpty, click.Choice, click.types.IntParamType,
                                               click.types.IntRange)), (name, param.name)
                if isinstance(param.type, NonEmpty):
                    found.append(([name], param.opts[0]))
    return found


@pytest.mark.parametrize("command, option", _string_params(),
                         ids=lambda value: value if isinstance(value, str) else " ".join(value))
def test_empty_value_is_refused(command, option, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = lmsforge(*([option, ""] + command if not command else [*command, option, ""]))
    assert result.exit_code == 2, result.output
    assert "must not be empty" in result.output
    assert snapshot(tmp_path) == {}  # nothing was made in the current folder


def test_every_command_has_its_string_options_guarded():
    names = {command[0] for command, _ in _string_params() if command}
    assert {"fetch", "apply", "verify", "export", "status", "port", "build", "test", "publish",
            "render", "bundle"} <= names
