"""Random SIGKILLs over a long port: every interrupted port resumes to the same bytes.

The series has SERIES_SIZE patches over an upstream that renames the hooked allocator file,
changes the hooked storage line (a conflict whose resolution is in the shared rerere cache, so
the port runs unattended) and adopts one patch (dropped). An uninterrupted port is the
reference. Then ports are killed at random moments, either the whole process group or the
Python process alone (its git child then finishes as an orphan), and resumed the documented
way: `--continue`; after a kill before the port saved its state, a new start; now and then
`--abort` (which must restore the patches folder) and a new start. Each port must end with the
reference's bytes in the patches folder and leave nothing behind.

The schedule is seeded and the seed printed; LMSFORGE_KILL_SEED=<seed> replays it. The kill
moments are wall-clock delays, so on another machine a delay can land in another git call.
"""

from __future__ import annotations

import difflib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from fixtures import snapshot
from port_helpers import (make_long_toy, record_storage_resolution, timeless,
                          wait_for_group)

SERIES_SIZE = 50
KILLS = 10
ABORT_SHARE = 0.15  # of the kills after which the port is aborted and started again


def _command(patches: Path, into: Path, action: str) -> list[str]:
    if action == "start":
        return ["--patches-dir", str(patches), "port", "-f", "toy", "--from", "v1.0.0", "--to",
                "v2.0.0", "--source", "git", "--into", str(into)]
    return ["--patches-dir", str(patches), "port", f"--{action}", "--into", str(into)]


def _run(root: Path, args: list[str], kill_after: float | None = None,
         whole_group: bool = True) -> tuple[int | None, str]:
    """Run lmsforge; SIGKILL it after KILL_AFTER seconds. Returns (exit code or None, stderr)."""
    (root / "tmp").mkdir(exist_ok=True)
    with open(root / "out.log", "w") as out, open(root / "err.log", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "lmsforge", *args], stdout=out,
                                stderr=err, start_new_session=True,
                                env={**os.environ, "TMPDIR": str(root / "tmp")})
        try:
            code: int | None = proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            if whole_group:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            code = None
        wait_for_group(proc.pid)
    return code, (root / "err.log").read_text()


def _where(into: Path) -> str:
    state = into / ".git" / "lmsforge-port.json"
    if not state.is_file():
        return "before the state existed"
    data = json.loads(state.read_text())
    done = sum(p["status"] != "pending" for p in data["patches"])
    return f"phase {data['phase']}, {done}/{len(data['patches'])} patches settled"


def _differences(got: dict[str, bytes | str], expected: dict[str, bytes | str]) -> str:
    """Which files differ from the reference, with the first lines of the first text diff."""
    names = sorted(k for k in set(got) | set(expected) if got.get(k) != expected.get(k))
    if not names:
        return ""
    first = names[0]
    old, new = expected.get(first, b""), got.get(first, b"")
    diff = difflib.unified_diff(
        old.decode(errors="replace").splitlines() if isinstance(old, bytes) else [old],
        new.decode(errors="replace").splitlines() if isinstance(new, bytes) else [new],
        "reference/" + first, "resumed/" + first, lineterm="")
    return f"{names}\n" + "\n".join(list(diff)[:40])


def _leftovers(root: Path, patches: Path, into: Path) -> list[str]:
    found = [p.name for p in (patches / "toy").iterdir() if p.name.startswith(".")]
    found += [f"$TMPDIR/{p.name}" for p in (root / "tmp").iterdir()]
    found += [name for name in ("lmsforge-port.json", "lmsforge-port.lock", "lmsforge-port-tmp")
              if (into / ".git" / name).exists()]
    worktrees = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=into,
                               capture_output=True, text=True, check=True).stdout
    if worktrees.count("worktree ") != 1:
        found.append("extra work trees: " + worktrees)
    return found


def test_random_kills_resume_to_the_uninterrupted_result(tmp_path):
    seed = int(os.environ.get("LMSFORGE_KILL_SEED") or random.SystemRandom().randrange(2**32))
    print(f"random-kill seed {seed} (replay: LMSFORGE_KILL_SEED={seed})")
    rng = random.Random(seed)
    toy = make_long_toy(tmp_path / "setup", SERIES_SIZE)
    record_storage_resolution(toy, tmp_path / "setup")
    pristine = snapshot(toy["patches"])

    def fresh(name: str) -> tuple[Path, Path, Path]:
        root = tmp_path / name
        root.mkdir()
        shutil.copytree(toy["patches"], root / "patches")
        return root, root / "patches", root / "port"

    root, patches, into = fresh("reference")
    began = time.monotonic()
    code, err = _run(root, _command(patches, into, "start"))
    duration = time.monotonic() - began
    assert code == 0, err
    expected = snapshot(patches)
    report = (patches / "toy" / "v2.0.0" / "PORT-REPORT.md").read_text()
    assert "| storage-hook | 0240-storage-hook.patch | rerere |" in report
    assert "| part-005 | — (not in this series) | dropped |" in report
    print(f"uninterrupted port of {SERIES_SIZE} patches: {duration:.1f} s")

    kills: list[str] = []
    runs = 0
    while len(kills) < KILLS:
        runs += 1
        root, patches, into = fresh(f"run-{runs}")
        action = "start"
        while True:
            delay = rng.uniform(0.0, duration) if len(kills) < KILLS else None
            whole_group = rng.random() < 0.6
            code, err = _run(root, _command(patches, into, action), delay, whole_group)
            if code is not None:
                assert code == 0, f"seed {seed}, run {runs} after {kills}: {err}"
                break
            if (patches / "toy" / "v2.0.0" / "series.yaml").is_file() and \
                    not (into / ".git" / "lmsforge-port.json").exists():
                kills.append(f"run {runs}: kill at {delay:.2f} s of `{action}`, after it "
                             "finished")
                break  # killed on its way out: the port is complete
            where = _where(into)
            kills.append(f"run {runs}: {'group' if whole_group else 'python'} kill at "
                         f"{delay:.2f} s of `{action}`, {where}")
            if where == "before the state existed":
                code, err = _run(root, _command(patches, into, "continue"))
                assert code == 2 and "no port in progress" in err, f"seed {seed}: {err}"
                action = "start"
            elif rng.random() < ABORT_SHARE:
                code, err = _run(root, _command(patches, into, "abort"))
                assert code == 0, f"seed {seed}: {err}"
                assert not into.exists()
                assert snapshot(patches) == pristine, f"seed {seed}: abort changed patches/"
                kills[-1] += "; aborted, started again"
                action = "start"
            else:
                action = "continue"
        differences = _differences(timeless(snapshot(patches)), timeless(expected))
        assert not differences, f"seed {seed}, run {runs}: {kills}\n{differences}"
        assert _leftovers(root, patches, into) == [], f"seed {seed}, run {runs}: {kills}"
    print("\n".join(kills))
