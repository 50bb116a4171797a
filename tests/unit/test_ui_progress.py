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


def test_a_table_too_wide_for_the_terminal_becomes_records(monkeypatch):
    """Below the width its longest words need, rich draws columns of no width; a record per row
    keeps every value whole (finding 19 of the 2026-11-26 hostile-inputs campaign)."""
    rows = [["pytorch", "v2.6.0", "archive x.tar.xz (099a9601bc40…)\ngit 2236df177080"]]
    for width, expect_table in ((20, False), (200, True)):
        buffer = io.StringIO()
        monkeypatch.setattr(ui, "out", Console(file=buffer, width=width))
        ui.table(None, ["framework", "tag", "sources"], rows)
        lines = [line.rstrip() for line in buffer.getvalue().splitlines()]
        if expect_table:
            assert any("pytorch" in line and "v2.6.0" in line for line in lines), lines
        else:
            assert lines == ["framework: pytorch", "tag: v2.6.0",
                             "sources: archive x.tar.xz (099a9601bc40…)",
                             "         git 2236df177080"], lines
