"""Long steps say that they are alive: on a log, a line every HEARTBEAT_S seconds with the
elapsed time and, for downloads, how much arrived (issue 11: the main command showed nothing for
minutes while it downloaded the TensorFlow wheel)."""

from __future__ import annotations

import io
import time

from rich.console import Console

from lmsforge import ui


def test_a_long_step_prints_heartbeats_with_progress(monkeypatch, tmp_path):
    log = io.StringIO()
    monkeypatch.setattr(ui, "err", Console(file=log, force_terminal=False, width=200))
    monkeypatch.setattr(ui, "HEARTBEAT_S", 0.05)
    (tmp_path / "part").write_bytes(b"x" * 3_000_000)
    with ui.step("downloading a thing", progress=lambda: ui.folder_size(tmp_path)):
        time.sleep(0.5)
    lines = log.getvalue().splitlines()
    assert lines[0] == "· downloading a thing"
    beats = [line for line in lines if line.startswith("· still downloading a thing (")]
    assert beats and all(line.endswith("s, 3 MB so far)") for line in beats), lines
    assert lines[-1].startswith("· downloading a thing: done in ")


def test_a_short_step_prints_only_start_and_end(monkeypatch):
    log = io.StringIO()
    monkeypatch.setattr(ui, "err", Console(file=log, force_terminal=False, width=200))
    with ui.step("quick"):
        pass
    assert [line.split(":")[0] for line in log.getvalue().splitlines()] == ["· quick", "· quick"]
