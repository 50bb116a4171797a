"""Random SIGKILLs over a long port: every interrupted port resumes to the same bytes.

The series has SERIES_SIZE patches over an upstream that renames the hooked allocator file,
changes the hooked storage line (a conflict whose resolution is in the shared rerere cache),
adopts one patch (dropped), changes a binary file a patch changes and deletes a file a patch
changes (two stops rerere cannot replay: a scripted user resolves them the documented way,
the same way every time), and renames and modifies a file a patch edits; the series also has a
mode-only patch and a CRLF edit. An uninterrupted port is the reference. Then ports are killed,
either the whole process group or the Python process alone (its git child then finishes as an
orphan): at a wall-clock delay, or inside a chosen git subcommand (KILL_INSIDE_GIT_SHARE of
the kills, through port_helpers' killing git). They are resumed the documented way:
`--continue`; a stop (shown, or refused with its lost line) is resolved by the user and
continued; after a kill before the port saved its state, a new start; now and then `--abort`
(which must restore the patches folder) and a new start. Each port must end with the
reference's bytes in the patches folder and leave nothing behind.

The schedule is seeded and the seed printed; LMSFORGE_KILL_SEED=<seed> replays it. Wall-clock
delays can land in another git call on another machine; kills inside git replay exactly.
LMSFORGE_KILL_SEEDS=<N> runs N random seeds over one toy (CI runs CI_SEEDS; more by hand);
LMSFORGE_KILLS=<K> sets the kills per seed (default KILLS).
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
from port_helpers import (BLOB_RESOLVED, killing_env, make_long_toy,
                          record_storage_resolution, timeless, wait_for_group)

SERIES_SIZE = 50
KILLS = 6  # per seed in CI; LMSFORGE_KILLS=<K> for more
CI_SEEDS = 2  # a few schedules per CI run (issue 28); LMSFORGE_KILL_SEEDS=<N> for a long run
ABORT_SHARE = 0.15  # of the kills after which the port is aborted and started again
KILL_INSIDE_GIT_SHARE = 0.4  # of the kills that land inside a chosen git subcommand
# Git subcommands a kill can land in (matched against " <args> " by the killing git), with
# how many such calls the longest command makes at most (the nth call is drawn up to that).
GIT_PLACES = [(" cherry-pick ", 25), (" rerere", 6), (" worktree add ", 3),
              (" format-patch ", 2), (" am ", 2), (" ls-files --unmerged", 4),
              (" commit ", 4), (" update-ref ", 4)]
STEPS_PER_RUN = 60  # a run that needs more commands than this loops


def _command(patches: Path, into: Path, action: str) -> list[str]:
    if action == "start":
        return ["--patches-dir", str(patches), "port", "-f", "toy", "--from", "v1.0.0", "--to",
                "v2.0.0", "--source", "git", "--into", str(into)]
    return ["--patches-dir", str(patches), "port", f"--{action}", "--into", str(into)]


def _run(root: Path, args: list[str], kill_after: float | None = None,
         whole_group: bool = True, inside: dict[str, str] | None = None
         ) -> tuple[int | None, str]:
    """Run lmsforge; SIGKILL it after KILL_AFTER seconds, or inside the git call INSIDE names.
    Returns (exit code, or None when it was killed, stderr)."""
    with open(root / "out.log", "w") as out, open(root / "err.log", "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "lmsforge", *args], stdout=out,
                                stderr=err, start_new_session=True,
                                env=killing_env(root, inside))
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
    if code == -signal.SIGKILL:
        code = None
    return code, (root / "err.log").read_text()


def _resolve_as_the_user(into: Path) -> list[str]:
    """The scripted user at a stop rerere cannot replay: the binary file gets fixed bytes and
    `git add`, the file upstream deleted is kept with the patch's change (`git add`). Returns
    what was resolved."""
    listed = subprocess.run(["git", "diff", "--name-only", "--diff-filter=U"], cwd=into,
                            capture_output=True, text=True, check=True).stdout.split()
    for path in listed:
        if path == "assets/blob.bin":
            (into / path).write_bytes(BLOB_RESOLVED)
        elif path != "src/legacy.c":
            raise AssertionError(f"unexpected conflict in {path}")
        subprocess.run(["git", "add", path], cwd=into, check=True)
    return listed


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


def _drive(root: Path, patches: Path, into: Path, action: str,
           durations: dict[str, float], rng: random.Random | None, kills: list[str],
           label: str, pristine: dict[str, bytes | str]) -> None:
    """Run ACTION and whatever the user would run next until the port ends (exit 0). With
    RNG, each command is killed (at a random moment or inside a git call) and recorded in
    KILLS, until it holds the kills wanted; without, the command runs to its end."""
    for _ in range(STEPS_PER_RUN):
        delay, inside, whole_group, place = None, None, True, ""
        if rng is not None:
            whole_group = rng.random() < 0.6
            if rng.random() < KILL_INSIDE_GIT_SHARE:
                match, most = rng.choice(GIT_PLACES)
                inside = {"match": match, "nth": str(rng.randint(1, most)),
                          "when": rng.choice(["before", "after"]),
                          "group": "1" if whole_group else "0"}
                place = f"inside git{match}#{inside['nth']} ({inside['when']})"
            else:
                delay = rng.uniform(0.0, durations[action])
                place = f"at {delay:.2f} s"
        code, err = _run(root, _command(patches, into, action), delay, whole_group, inside)
        if code == 0:
            return
        # A stop: shown (exit 3), or met by --continue after a kill (exit 2 with the stop's
        # line, or naming the conflict only the user can decide): resolve and go on.
        if code == 3 or (code == 2 and ("its stop line was lost" in err or
                                        "only you can decide" in err)):
            _resolve_as_the_user(into)
            action = "continue"
            continue
        if code is not None:
            raise AssertionError(f"{label}: `{action}` exit {code}: {err}")
        if (patches / "toy" / "v2.0.0" / "series.yaml").is_file() and \
                not (into / ".git" / "lmsforge-port.json").exists():
            kills.append(f"{label}: kill {place} of `{action}`, after it finished")
            return  # killed on its way out: the port is complete
        where = _where(into)
        kills.append(f"{label}: {'group' if whole_group else 'python'} kill {place} of "
                     f"`{action}`, {where}")
        if where == "before the state existed":
            code, err = _run(root, _command(patches, into, "continue"))
            assert code == 2 and "no port in progress" in err, f"{label}: {err}"
            action = "start"
        elif rng is not None and rng.random() < ABORT_SHARE:
            code, err = _run(root, _command(patches, into, "abort"))
            assert code == 0, f"{label}: {err}"
            assert not into.exists()
            assert snapshot(patches) == pristine, f"{label}: abort changed patches/"
            kills[-1] += "; aborted, started again"
            action = "start"
        else:
            action = "continue"
        if len(kills) >= wanted_kills():
            rng = None  # the kills wanted are in: the rest runs to its end
    raise AssertionError(f"{label}: no end after {STEPS_PER_RUN} commands: {kills}")


def wanted_kills() -> int:
    return int(os.environ.get("LMSFORGE_KILLS") or KILLS)


def _seeds() -> list[int]:
    if os.environ.get("LMSFORGE_KILL_SEED"):
        return [int(os.environ["LMSFORGE_KILL_SEED"])]
    draw = random.SystemRandom()
    return [draw.randrange(2**32) for _ in range(int(os.environ.get("LMSFORGE_KILL_SEEDS") or CI_SEEDS))]


def test_random_kills_resume_to_the_uninterrupted_result(tmp_path):
    toy = make_long_toy(tmp_path / "setup", SERIES_SIZE)
    record_storage_resolution(toy, tmp_path / "setup")
    pristine = snapshot(toy["patches"])

    def fresh(name: str) -> tuple[Path, Path, Path]:
        root = tmp_path / name
        root.mkdir()
        shutil.copytree(toy["patches"], root / "patches")
        return root, root / "patches", root / "port"

    root, patches, into = fresh("reference")
    durations: dict[str, float] = {}
    action, stops = "start", []
    began = time.monotonic()
    while True:
        began_command = time.monotonic()
        code, err = _run(root, _command(patches, into, action))
        durations[action] = max(durations.get(action, 0.0), time.monotonic() - began_command)
        if code != 3:
            break
        stops.append(_resolve_as_the_user(into))
        action = "continue"
    assert code == 0, err
    assert stops == [["assets/blob.bin"], ["src/legacy.c"]], stops
    expected = snapshot(patches)
    report = (patches / "toy" / "v2.0.0" / "PORT-REPORT.md").read_text()
    for row in ("| storage-hook | 0240-storage-hook.patch | rerere |",
                "| part-005 | — (not in this series) | dropped |",
                "| blob-hook | 0190-blob-hook.patch | resolved |",
                "| legacy-hook | 0290-legacy-hook.patch | resolved |",
                "| gen-mode | 0090-gen-mode.patch | picked |",
                "| crlf-tweak | 0390-crlf-tweak.patch | picked |",
                "| engine-hook | 0470-engine-hook.patch | picked |"):
        assert row in report, report
    print(f"uninterrupted port of {SERIES_SIZE} patches with 2 stops: "
          f"{time.monotonic() - began:.1f} s (start {durations['start']:.1f} s)")

    failures = []
    seeds = _seeds()
    for seed in seeds:
        print(f"random-kill seed {seed} (replay: LMSFORGE_KILL_SEED={seed})")
        rng = random.Random(seed)
        kills: list[str] = []
        runs = 0
        try:
            while len(kills) < wanted_kills():
                runs += 1
                root, patches, into = fresh(f"seed-{seed}-run-{runs}")
                label = f"seed {seed}, run {runs}"
                _drive(root, patches, into, "start", durations, rng, kills, label, pristine)
                differences = _differences(timeless(snapshot(patches)), timeless(expected))
                assert not differences, f"{label}: {kills}\n{differences}"
                assert _leftovers(root, patches, into) == [], f"{label}: {kills}"
                shutil.rmtree(root)
        except AssertionError as failure:
            failures.append(f"seed {seed} FAILED: {failure}\nkills: {kills}")
            print(failures[-1])
            continue
        print("\n".join(kills))
    print(f"{len(seeds) - len(failures)} of {len(seeds)} seeds held")
    assert not failures, "\n\n".join(failures)
