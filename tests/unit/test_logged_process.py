"""A command lmsforge runs (verify's cmake, ninja, test programs: verify/pytorch_c10/process.py)
ends with everything it started when lmsforge is interrupted, also what runs in process groups of
its own: ninja starts every compile that way (hostile-inputs-2026-11-26 row 24: two cc1plus ran
on for 10-30 s after Ctrl-C during `verify --level compile`)."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

RUN_NINJA = textwrap.dedent("""\
    import signal, sys
    # Ctrl-C as on a terminal, also where the tests run in a background job (its shell starts
    # them with SIGINT ignored, which a process inherits: a fresh-clone CI run timed out on it).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from lmsforge.verify.pytorch_c10.process import run_logged
    with open(sys.argv[1] + "/ninja.log", "w") as log:
        run_logged(["ninja", "-C", sys.argv[1], "-j2"], log)
""")


def _running(marker: str) -> list[int]:
    """Pids of live processes whose command line holds MARKER."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if marker in command and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


def _wait_for(condition, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


@pytest.mark.skipif(shutil.which("ninja") is None, reason="no ninja on this machine")
def test_ctrl_c_ends_the_compiles_ninja_runs_in_groups_of_their_own(tmp_path: Path) -> None:
    # Two "compiles" that would run for minutes, each a shell and its child in the process
    # group ninja makes for it (as g++ and its cc1plus are); a marker no other process has.
    seconds = [f"{300 + random.random():.6f}" for _ in range(2)]
    (tmp_path / "build.ninja").write_text(
        "rule compile\n  command = sleep $secs && touch $out\n"
        + "".join(f"build out{i}: compile\n  secs = {s}\n" for i, s in enumerate(seconds)))
    runner = subprocess.Popen([sys.executable, "-c", RUN_NINJA, str(tmp_path)],
                              start_new_session=True, stderr=subprocess.PIPE, text=True)
    try:
        assert _wait_for(lambda: all(_running(f"sleep {s}") for s in seconds), 30), \
            (tmp_path / "ninja.log").read_text()
        groups = {os.getpgid(pid) for s in seconds for pid in _running(f"sleep {s}")}
        assert os.getpgid(runner.pid) not in groups  # the case of the finding: groups of their own

        runner.send_signal(signal.SIGINT)  # what Ctrl-C sends lmsforge (ninja, in its own
        runner.wait(timeout=30)            # session, gets nothing from the terminal)
        assert "KeyboardInterrupt" in runner.stderr.read()
        left = _wait_for(lambda: not any(_running(s) for s in seconds), 5)
        assert left, f"still running after Ctrl-C: {[_running(s) for s in seconds]}"
    finally:
        runner.kill()
        for s in seconds:
            for pid in _running(s):
                os.kill(pid, signal.SIGKILL)
