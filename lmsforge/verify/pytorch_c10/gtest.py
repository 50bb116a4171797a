"""Run a googletest program and read its ``--gtest_output=json:`` report."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Mapping, NamedTuple, Sequence

from lmsforge.errors import CheckFailed
from lmsforge.verify.levels import Timer
from lmsforge.verify.pytorch_c10.process import run_logged

DEFAULT_TIMEOUT_S = 900.0


class GtestReport(NamedTuple):
    passed: int
    failed: int
    skipped: int
    disabled: int
    failures: tuple[str, ...]  # "Suite.Test" of every failed test
    skips: tuple[str, ...] = ()  # "Suite.Test" of every skipped test
    # The first failed test's first failure message, folded onto one line: a CI log that keeps
    # only the level's detail still says why (the program's own log stays on the CI machine).
    first_failure: str = ""


class GtestRun(NamedTuple):
    report: GtestReport
    returncode: int
    seconds: float
    log: Path


def parse_gtest_json(text: str) -> GtestReport:
    passed = disabled = 0
    failures, skips = [], []
    first_failure = ""
    for suite in json.loads(text).get("testsuites", []):
        for test in suite.get("testsuite", []):
            name = f"{suite['name']}.{test['name']}"
            if test.get("status") == "NOTRUN" or test.get("result") == "SUPPRESSED":
                disabled += 1
            elif test.get("failures"):
                failures.append(name)
                if not first_failure:
                    first_failure = one_line(test["failures"][0].get("failure", ""))
            elif test.get("result") == "SKIPPED":
                skips.append(name)
            else:
                passed += 1
    return GtestReport(passed, len(failures), len(skips), disabled, tuple(failures), tuple(skips),
                       first_failure)


def one_line(message: str, limit: int = 300) -> str:
    """A googletest failure message (file:line, then the expectation over several lines) as one
    line of at most LIMIT characters."""
    text = " ".join(part.strip() for part in message.splitlines() if part.strip())
    return text if len(text) <= limit else text[:limit - 1] + "…"


def run_gtest(binary: Path, *, log: Path, json_path: Path | None = None,
              extra_args: Sequence[str] = (), timeout: float = DEFAULT_TIMEOUT_S,
              echo: bool = False, append: bool = False,
              env: Mapping[str, str] | None = None,
              launcher: Sequence[str] = ()) -> GtestRun:
    """Run BINARY (after LAUNCHER, e.g. an emulator; with ENV added to the environment); a
    crash, a hang or a missing report raises, failed tests do not."""
    json_path = json_path or log.with_suffix(".json")
    json_path.unlink(missing_ok=True)  # a stale report must never stand in for this run
    command = [*launcher, binary, f"--gtest_output=json:{json_path}", *extra_args]
    with open(log, "a" if append else "w") as out, Timer() as timer:
        finished = run_logged(command, out, echo=echo, timeout=timeout, env=env)
    if finished.timed_out:
        raise CheckFailed(f"{binary.name} did not finish within {timeout:.0f} s; "
                          f"full log: {log}")
    if not json_path.is_file():
        raise CheckFailed(f"{binary.name} {_how_it_ended(finished.returncode)} before writing "
                          f"its report ({_last_test(finished.lines)}); full log: {log}")
    report = parse_gtest_json(json_path.read_text())
    if finished.returncode != 0 and report.failed == 0:
        raise CheckFailed(f"{binary.name} {_how_it_ended(finished.returncode)} although no test "
                          f"failed; full log: {log}")
    return GtestRun(report, finished.returncode, timer.seconds, log)


def _how_it_ended(returncode: int) -> str:
    if returncode < 0:
        try:
            return f"was killed by {signal.Signals(-returncode).name}"
        except ValueError:
            return f"was killed by signal {-returncode}"
    return f"exited with code {returncode}"


def _last_test(lines: Sequence[str]) -> str:
    started = [line for line in lines if line.startswith("[ RUN      ]")]
    if not started:
        return "no test had started"
    return f"last test started: {started[-1].removeprefix('[ RUN      ]').strip()}"
