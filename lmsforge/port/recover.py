"""Resuming a port after its process was killed: bring the state in line with git.

The state file is saved before and after every pick, so a resume knows which pick was under
way and what it was going to become. What git left half done is finished or undone; what
someone did in the tree since (a hand resolution, an edit, an untracked file) is kept and
reported as such.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from lmsforge import git
from lmsforge.errors import UsageError
from lmsforge.port import guide as port_guide
from lmsforge.port.state import PatchState, PortState, clear_scratch, command, git_dir, scratch
from lmsforge.port.steps import (
    CONTINUE_ENV,
    PORT_ENV,
    check_branch,
    cherry_pick_head,
    clear_stale_git_locks,
    conflicted_files,
    has_markers,
    landed,
    needs_hand_staging,
    require_branch_b,
    stop,
    unmerged_stages,
)


def recover(tree: Path, state: PortState) -> None:
    """Bring the state in line with git after a killed process; refuse what it cannot explain."""
    clear_stale_git_locks(tree)
    clear_scratch(tree)
    require_branch_b(tree, state)
    on_b = check_branch(tree, state)
    picking = cherry_pick_head(tree)
    patch = state.patch(state.in_flight) if state.in_flight else None
    if patch is not None and patch.id in on_b:
        if picking is not None:
            git.run(["cherry-pick", "--quit"], tree)  # killed after its commit, before cleanup
        landed(tree, state, patch, state.in_flight_outcome)
    elif patch is not None and picking == patch.commit_on_a:
        _finish_interrupted_pick(tree, state, patch)
    elif picking is not None:
        raise UsageError(f"{tree} has a cherry-pick of {picking[:12]} in progress that this "
                         f"port did not start; finish or abort it (`git -C "
                         f"{shlex.quote(str(tree))} cherry-pick --abort`), then "
                         f"`{command(state, tree, 'continue')}`")
    elif patch is not None:
        _drop_half_written_pick(tree, patch)
        state.in_flight, state.in_flight_outcome = None, ""
        state.save(tree)
    elif (git_dir(tree) / "sequencer").is_dir():
        git.run(["cherry-pick", "--quit"], tree, check=False)


def _drop_half_written_pick(tree: Path, patch: PatchState) -> None:
    """The pick died before it recorded itself: take out what it wrote, and only that.

    Changes to tracked files go with a hard reset (committed patches stay on the branch).
    Files the patch adds are untracked until the pick records itself; anything else untracked
    may be the user's and stays.
    """
    git.run(["reset", "--quiet", "--hard", "HEAD"], tree)
    paths = git.out(["show", "--format=", "--name-only", "-z", "--diff-filter=A",
                     patch.commit_on_a], tree).split("\0")
    paths = [p for p in paths if p]
    if not paths:
        return
    written = git.out(["ls-files", "-z", "--others", "--", *paths], tree).split("\0")
    for path in filter(None, written):
        (tree / path).unlink()


def _finish_interrupted_pick(tree: Path, state: PortState, patch: PatchState) -> None:
    """A kill came after the cherry-pick stopped and before the port took note of it."""
    if port_guide.commits_for(state, patch.id) is not None:
        # A guided pick writes CHERRY_PICK_HEAD last, after saving its outcome: only a
        # resolution by hand since then can still be missing.
        if conflicted_files(tree):
            stop(tree, state, patch)
        git.run(["cherry-pick", "--continue"], tree, env=CONTINUE_ENV)
        landed(tree, state, patch, state.in_flight_outcome)
        return
    conflicted = conflicted_files(tree)
    if conflicted:
        _mend_cut_rerere_writes(tree, patch, conflicted)
        untouched = conflicted_files(tree)
        if all(has_markers(tree, path) for path in untouched):
            # Nobody touched these files: the kill came before rerere's turn; give it one.
            _rerere_afresh(tree, untouched)
    if conflicted_files(tree):
        stop(tree, state, patch)  # as if it had just happened
    if state.in_flight_outcome == "rerere":
        outcome = "rerere"
    elif _trial_pick(tree, patch, [], rerere=False)[0]:
        # A clean pick: git was killed between writing CHERRY_PICK_HEAD and its commit.
        outcome = "picked"
    else:
        # No conflict left: rerere resolved it, or the user did after the kill. Only a fresh
        # trial of the same pick tells which; a hand resolution must be reported as one.
        outcome = "rerere" if _trial_pick(tree, patch, [])[0] else "resolved"
    git.run(["cherry-pick", "--continue"], tree, env=CONTINUE_ENV)
    landed(tree, state, patch, outcome)


def _rerere_afresh(tree: Path, paths: list[str]) -> None:
    """Run rerere on PATHS as on new conflicts.

    rerere does not replay a recorded resolution for a conflict its MERGE_RR already lists
    (it records a new preimage instead), so their entries go first; the entries of paths
    already resolved stay, so their resolutions are still recorded at commit.
    """
    merge_rr = git_dir(tree) / "MERGE_RR"
    if merge_rr.is_file():
        entries = merge_rr.read_bytes().split(b"\0")
        kept = [e for e in entries if e and e.split(b"\t", 1)[-1].decode(errors="replace")
                not in paths]
        merge_rr.write_bytes(b"".join(e + b"\0" for e in kept))
    git.run(["rerere"], tree, check=False)


def _mend_cut_rerere_writes(tree: Path, patch: PatchState, conflicted: list[str]) -> None:
    """Finish the resolutions rerere was writing when the process was killed.

    rerere rewrites a conflicted file in place (truncate, then write), so a kill can leave it
    cut short: no conflict markers, still unmerged. A trial of the same pick shows what rerere
    writes; a file that is not the start of that is someone's edit, and stays as it is.
    """
    # Only a text conflict is one rerere rewrites: a binary or delete/modify conflict has no
    # markers from the start, and the file as git left it is not a resolution of it.
    stages = unmerged_stages(tree)
    unmarked = [path for path in conflicted if not has_markers(tree, path)
                and needs_hand_staging(tree, path, stages.get(path, {})) is None]
    if not unmarked:
        return
    _, written = _trial_pick(tree, patch, unmarked)
    for path in unmarked:
        whole = written.get(path)
        if whole is not None and whole.startswith((tree / path).read_bytes()):
            (tree / path).write_bytes(whole)
            git.run(["add", "--", path], tree)


def _trial_pick(tree: Path, patch: PatchState, paths: list[str],
                rerere: bool = True) -> tuple[bool, dict[str, bytes]]:
    """Pick PATCH again onto HEAD in a scratch work tree (rerere on, as in the port, unless
    RERERE is false).

    Returns whether the pick (with rerere's help when on) leaves no conflict, and the content of each of PATHS that
    the trial resolves (rerere staged it, without conflict markers).
    """
    trial = scratch(tree) / "trial"
    git.run(["worktree", "add", "--quiet", "--detach", str(trial), "HEAD"], tree)
    try:
        git.run(["-c", f"rerere.enabled={str(rerere).lower()}", "cherry-pick", "--no-commit",
                 patch.commit_on_a], trial, env=PORT_ENV, check=False)
        left = conflicted_files(trial)
        written = {path: (trial / path).read_bytes() for path in paths
                   if path not in left and not has_markers(trial, path)}
        return not left, written
    finally:
        clear_scratch(tree)
