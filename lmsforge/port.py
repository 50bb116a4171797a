"""Carry a series from upstream tag A to tag B: the port state machine.

The port runs in its own work tree (``--into``). Progress lives in git refs and a state file in
that tree's git folder (``port_state.py``), so a process killed in any phase resumes with
``--continue`` and ``--abort`` removes every trace:

1. start: the series' base must be tag A's tree; materialise the series on A (branch
   ``lms/F/A``); a risk table from what upstream changed (and renamed) between A and B in each
   patch's files; drop patches B already contains (``git cherry``, or the patch reverse-applies);
2. replay onto B (branch ``lms/F/B``) one cherry-pick at a time with ``rerere`` on and the shared
   resolution cache ``patches/F/rr-cache`` loaded, so a conflict resolved once resolves itself on
   every later port, for every maintainer;
3. on a conflict rerere cannot resolve: stop (exit 3) naming the patch, files and hunks, and
   the first upstream commit between A and B that breaks the patch (bisection with
   ``git apply --check``) when the trees share history. ``--continue`` accepts the stop only once
   the patch's commit is on branch B;
4. finish: export into ``patches/F/B`` with ``ported_from``, check the round trip, save new
   resolutions into the shared cache, and write ``PORT-REPORT.md``.

Invariant checked on every resume: branch B holds exactly the commits of the patches marked
picked, resolved or rerere, in series order (plus the one being picked when the state was last
saved). Anything else stops the port with one line; a patch is never lost silently.
"""

from __future__ import annotations

import hashlib
import os
import re
import shlex
import shutil
from pathlib import Path

from lmsforge import export, git, patchfile, port_report, series as series_mod, worktree
from lmsforge.errors import EXIT_STOPPED, CheckFailed, LmsforgeError, UsageError
from lmsforge.port_state import (DONE, LOCK_FILE, STATE_FILE, FinishJournal, PatchState,
                                 PortState, clear_scratch, command, git_dir, identity, scratch)
from lmsforge.upstream import TreeIdentity

PORT_ENV = dict(worktree.AM_ENV)
CONTINUE_ENV = {**PORT_ENV, "GIT_EDITOR": "true"}
RESOLVED_NOTE = "conflict resolved by hand (recorded for rerere)"
RERERE_NOTE = "conflict resolved by a recorded resolution (rerere)"
_MARKER = re.compile(rb"^(<{7}|>{7})( |$)", re.M)


class PortStopped(LmsforgeError):
    exit_code = EXIT_STOPPED


# --- start ---------------------------------------------------------------------------------------


def check_base(series: series_mod.Series, identity_a: TreeIdentity) -> None:
    recorded_tree = series.upstream.get("tree")
    if series.base != identity_a.commit and recorded_tree != identity_a.tree:
        raise UsageError(
            f"series {series.framework} {series.tag} was exported on {series.base[:12]} (tree "
            f"{str(recorded_tree)[:12]}), but {identity_a.tag} is {identity_a.commit[:12]} (tree "
            f"{identity_a.tree[:12]}); re-export the series on its tag first")


def check_new_target(into: Path) -> None:
    """Refuse an --into that is a file or holds anything (a port in progress included)."""
    if into.exists() and not into.is_dir():
        raise UsageError(f"{into} is a file, not a folder; pass a new folder with --into")
    if not into.is_dir() or _empty_or_fresh(into):
        return
    if (into / ".git" / STATE_FILE).is_file():
        try:
            state = PortState.load(into)
        except UsageError:
            raise UsageError(f"{into} holds a port whose state is unreadable; remove the folder "
                             "and start again") from None
        raise UsageError(f"a port is in progress in {into}; go on with "
                         f"`{command(state, into, 'continue')}`, or remove it with "
                         f"`{command(state, into, 'abort')}`")
    raise UsageError(f"{into} is not empty; pass a new or empty folder with --into for the port")


def _empty_or_fresh(path: Path) -> bool:
    """Empty, or holding only the bare `git init` of a start killed before it saved its state."""
    entries = list(path.iterdir())
    if not entries:
        return True
    dot_git = path / ".git"
    if entries != [dot_git] or not dot_git.is_dir() or (dot_git / STATE_FILE).exists():
        return False
    holds = [p for sub in ("objects", "refs") for p in (dot_git / sub).rglob("*") if p.is_file()]
    return not holds and not (dot_git / "packed-refs").exists()


def begin(into: Path, series: series_mod.Series, identity_a: TreeIdentity,
          identity_b: TreeIdentity, patches_dir: Path) -> PortState:
    """Make INTO an empty git repository and the state of a port about to start there.

    The caller saves the state under the port lock; from then on a kill at any point is
    resumable (--continue) or removable (--abort).
    """
    check_base(series, identity_a)
    check_new_target(into)
    created = not into.exists()
    try:
        into.mkdir(parents=True, exist_ok=True)
        worktree.init_repo(into)
    except BaseException:
        if created:
            shutil.rmtree(into, ignore_errors=True)
        raise
    return PortState(
        framework=series.framework, from_tag=series.tag, to_tag=identity_b.tag,
        patches_dir=str(patches_dir.resolve()), identity_a=identity_a.to_json(),
        identity_b=identity_b.to_json(), from_series_hash=series.content_hash(),
        from_series_base=series.base, created_folder=created)


def run_start(tree: Path, state: PortState) -> None:
    """The start phase, from nothing each time: a kill here is resumed by doing it again."""
    try:
        _start(tree, state)
    except BaseException:
        abort(tree, state)  # nothing in the tree is the user's yet
        raise


def _start(tree: Path, state: PortState) -> None:
    # Checked in full when the port began; the hash says whether it is still that series.
    series = series_mod.load(Path(state.patches_dir) / state.framework / state.from_tag,
                             check_patch_ids=False)
    if series.content_hash() != state.from_series_hash:
        raise UsageError(f"the series {state.framework} {state.from_tag} changed since this port "
                         "began; start the port again")
    _wipe_for_restart(tree)
    identity_a, identity_b = identity(state.identity_a), identity(state.identity_b)
    work = worktree.create(tree, identity_a, series.paths())
    git.run(["fetch", "--quiet", "--no-tags", identity_b.repo,
             f"refs/tags/{identity_b.tag}:refs/tags/{identity_b.tag}"], tree)
    state.shared_history = git.run(["merge-base", state.from_commit, state.to_commit], tree,
                                   check=False).returncode == 0
    commits = git.out(["rev-list", "--reverse", f"{work.base}..{work.branch}"],
                      tree).splitlines()
    state.patches = [PatchState(e.id, e.file, c) for e, c in zip(series.patches, commits)]
    state.risk, state.renamed = port_report.risk_table(tree, state.from_commit, state.to_commit,
                                                       series, state.shared_history)
    state.seeded_resolutions = _configure_rerere(tree, state.shared_rr_cache)
    _drop_upstream_patches(tree, state, series)
    git.run(["checkout", "--quiet", "-b", worktree.branch_name(state.framework, state.to_tag),
             state.to_commit], tree)
    state.phase = "replay"
    state.save(tree)


def _wipe_for_restart(tree: Path) -> None:
    """Everything but the port's own state and lock goes; the repository is made again."""
    for child in tree.iterdir():
        if child.name != ".git":
            _remove(child)
    for child in (tree / ".git").iterdir():
        if child.name not in (STATE_FILE, LOCK_FILE):
            _remove(child)
    worktree.init_repo(tree)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def _configure_rerere(tree: Path, shared_rr_cache: Path) -> list[str]:
    """Turn rerere on and load the shared resolutions; return the ids loaded."""
    git.run(["config", "rerere.enabled", "true"], tree)
    git.run(["config", "rerere.autoUpdate", "true"], tree)
    local = git_dir(tree) / "rr-cache"
    seeded = []
    if shared_rr_cache.is_dir():
        for entry in sorted(shared_rr_cache.iterdir()):
            if (entry / "postimage").is_file() and (entry / "preimage").is_file():
                shutil.copytree(entry, local / entry.name, dirs_exist_ok=True)
                seeded.append(entry.name)
    return seeded


def _drop_upstream_patches(tree: Path, state: PortState, series: series_mod.Series) -> None:
    """Mark patches whose change tag B already has (cherry-picked upstream, or reverse-applies)."""
    branch_a = worktree.branch_name(state.framework, state.from_tag)
    cherry = git.out(["cherry", state.to_commit, branch_a], tree).splitlines()
    upstream_has = {line[2:] for line in cherry if line.startswith("- ")}
    index = {"GIT_INDEX_FILE": str(scratch(tree) / "index-b")}
    git.run(["read-tree", state.to_commit], tree, env=index)
    files_on_b = set(git.out(["ls-tree", "-r", "-z", "--name-only", state.to_commit],
                             tree).split("\0"))
    for patch in state.patches:
        path = series.folder / patch.file
        # A patch reverse-applies only where every file it leaves behind exists: most patches
        # add files B lacks, and need no `git apply` to tell.
        needs = [f.path for f in patchfile.parse(path).files if not f.deleted]
        reverse = all(f in files_on_b for f in needs) and git.run(
            ["apply", "--check", "--cached", "--reverse", str(path)], tree, env=index,
            check=False).returncode == 0
        if patch.commit_on_a in upstream_has or reverse:
            patch.status = "dropped"
            patch.note = ("upstream has an equivalent commit" if patch.commit_on_a in
                          upstream_has else f"{state.to_tag} already contains this change")
    clear_scratch(tree)


# --- replay --------------------------------------------------------------------------------------


def proceed(tree: Path, state: PortState) -> Path:
    """Replay what is pending, then finish; returns the new series folder."""
    if state.phase == "replay":
        _replay(tree, state)
    return finish(tree, state)


def _replay(tree: Path, state: PortState) -> None:
    """Pick every pending patch; stop with PortStopped at a conflict rerere cannot resolve."""
    _recover(tree, state)
    for patch in state.patches:
        if patch.status == "pending":
            _pick(tree, state, patch)
    state.phase = "finish"
    state.save(tree)


def _pick(tree: Path, state: PortState, patch: PatchState) -> None:
    # Saved before git runs: if the process dies, the next resume knows which pick this was
    # and what its outcome was going to be.
    state.in_flight, state.in_flight_outcome = patch.id, "picked"
    state.save(tree)
    proc = git.run(["cherry-pick", "--allow-empty", patch.commit_on_a], tree, env=PORT_ENV,
                   check=False)
    if proc.returncode == 0:
        _landed(tree, state, patch, "picked")
        return
    if _rerere_resolved(tree):
        state.in_flight_outcome = "rerere"
        state.save(tree)
        git.run(["cherry-pick", "--continue"], tree, env=CONTINUE_ENV)
        _landed(tree, state, patch, "rerere")
        return
    if not _conflicted_files(tree):
        lines = proc.stderr.decode(errors="replace").strip().splitlines()
        first = next((ln for ln in lines if ln.startswith(("error", "fatal"))), "no output")
        raise CheckFailed(f"cherry-pick of {patch.file} failed ({first}); see `git -C "
                          f"{shlex.quote(str(tree))} status`")
    _stop(tree, state, patch)


def _landed(tree: Path, state: PortState, patch: PatchState, outcome: str) -> None:
    notes = {"picked": "", "rerere": RERERE_NOTE, "resolved": RESOLVED_NOTE}
    renamed = state.renamed.get(patch.id)
    where = f"applied to what upstream renamed: {'; '.join(renamed)}" if renamed else ""
    patch.status = outcome
    patch.note = "; ".join(n for n in (notes[outcome], where) if n)
    state.in_flight, state.in_flight_outcome = None, ""
    state.save(tree)


def _stop(tree: Path, state: PortState, patch: PatchState) -> None:
    state.current = patch.id
    state.stop_head = git.out(["rev-parse", "HEAD"], tree)
    state.in_flight, state.in_flight_outcome = None, ""
    state.save(tree)
    raise PortStopped(conflict_message(tree, state, patch))


def _recover(tree: Path, state: PortState) -> None:
    """Bring the state in line with git after a killed process; refuse what it cannot explain."""
    _clear_stale_git_locks(tree)
    clear_scratch(tree)
    _require_branch_b(tree, state)
    on_b = _check_branch(tree, state)
    picking = _picking(tree)
    patch = state.patch(state.in_flight) if state.in_flight else None
    if patch is not None and patch.id in on_b:
        if picking is not None:
            git.run(["cherry-pick", "--quit"], tree)  # killed after its commit, before cleanup
        _landed(tree, state, patch, state.in_flight_outcome)
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
    conflicted = _conflicted_files(tree)
    if conflicted:
        _mend_cut_rerere_writes(tree, patch, conflicted)
        untouched = _conflicted_files(tree)
        if all(_has_markers(tree, path) for path in untouched):
            # Nobody touched these files: the kill came before rerere's turn; give it one.
            _rerere_afresh(tree, untouched)
    if _conflicted_files(tree):
        _stop(tree, state, patch)  # as if it had just happened
    if state.in_flight_outcome == "rerere":
        outcome = "rerere"
    else:
        # No conflict left: rerere resolved it, or the user did after the kill. Only a fresh
        # trial of the same pick tells which; a hand resolution must be reported as one.
        outcome = "rerere" if _trial_pick(tree, patch, [])[0] else "resolved"
    git.run(["cherry-pick", "--continue"], tree, env=CONTINUE_ENV)
    _landed(tree, state, patch, outcome)


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


def _has_markers(tree: Path, path: str) -> bool:
    file = tree / path
    return not file.is_file() or bool(_MARKER.search(file.read_bytes()))


def _mend_cut_rerere_writes(tree: Path, patch: PatchState, conflicted: list[str]) -> None:
    """Finish the resolutions rerere was writing when the process was killed.

    rerere rewrites a conflicted file in place (truncate, then write), so a kill can leave it
    cut short: no conflict markers, still unmerged. A trial of the same pick shows what rerere
    writes; a file that is not the start of that is someone's edit, and stays as it is.
    """
    unmarked = [path for path in conflicted if not _has_markers(tree, path)]
    if not unmarked:
        return
    _, written = _trial_pick(tree, patch, unmarked)
    for path in unmarked:
        whole = written.get(path)
        if whole is not None and whole.startswith((tree / path).read_bytes()):
            (tree / path).write_bytes(whole)
            git.run(["add", "--", path], tree)


def _trial_pick(tree: Path, patch: PatchState,
                paths: list[str]) -> tuple[bool, dict[str, bytes]]:
    """Pick PATCH again onto HEAD in a scratch work tree (rerere on, as in the port).

    Returns whether rerere alone leaves no conflict, and the content of each of PATHS that
    the trial leaves without conflict markers.
    """
    trial = scratch(tree) / "trial"
    git.run(["worktree", "add", "--quiet", "--detach", str(trial), "HEAD"], tree)
    try:
        git.run(["cherry-pick", "--no-commit", patch.commit_on_a], trial, env=PORT_ENV,
                check=False)
        written = {path: (trial / path).read_bytes() for path in paths
                   if not _has_markers(trial, path)}
        return not _conflicted_files(trial), written
    finally:
        clear_scratch(tree)


def _clear_stale_git_locks(tree: Path) -> None:
    # The port holds its own lock, so no git command of ours runs here now: these are what a
    # killed git left behind.
    gd = git_dir(tree)
    for stale_lock in [*gd.glob("*.lock"), *(gd / "refs").rglob("*.lock")]:
        if stale_lock.name != LOCK_FILE:
            stale_lock.unlink()


def _require_branch_b(tree: Path, state: PortState) -> None:
    branch_b = worktree.branch_name(state.framework, state.to_tag)
    head = git.run(["symbolic-ref", "--quiet", "HEAD"], tree, check=False).stdout.decode().strip()
    if head != f"refs/heads/{branch_b}":
        where = head.removeprefix("refs/heads/") or "a detached HEAD"
        raise UsageError(f"{tree} is on {where}, not {branch_b}; check it out (`git -C "
                         f"{shlex.quote(str(tree))} checkout {branch_b}`), then "
                         f"`{command(state, tree, 'continue')}`")


def _branch_commits(tree: Path, state: PortState) -> list[tuple[str, str]]:
    """(commit, Lms-Patch-Id) of each commit on branch B above tag B, oldest first."""
    branch_b = worktree.branch_name(state.framework, state.to_tag)
    fmt = f"%H %(trailers:key={series_mod.PATCH_ID_TRAILER},valueonly,separator=%x2C)"
    lines = git.out(["log", "--reverse", f"--format={fmt}", f"{state.to_commit}..{branch_b}"],
                    tree).splitlines()
    return [(line.split(" ", 1)[0], line.partition(" ")[2].strip()) for line in lines]


def _check_branch(tree: Path, state: PortState, landing: str | None = None) -> list[str]:
    """Branch B must hold the done patches in order, then at most the one landing; return it."""
    landing = landing or state.in_flight
    commits = _branch_commits(tree, state)
    on_b = [patch_id for _, patch_id in commits]
    expected = [p.id for p in state.patches if p.status in DONE]
    if on_b == expected or (landing and on_b == [*expected, landing]):
        return on_b
    quoted = shlex.quote(str(tree))
    lost = [p.file for p in state.patches if p.status in DONE and p.id not in on_b]
    if lost:
        raise UsageError(
            f"branch {worktree.branch_name(state.framework, state.to_tag)} lost the commits of "
            f"{', '.join(lost[:3])}{' and more' if len(lost) > 3 else ''} (a reset or rebase?); "
            f"get them back from `git -C {quoted} reflog` (e.g. `git -C {quoted} reset --hard "
            f"COMMIT`), or remove the port with `{command(state, tree, 'abort')}`")
    added = on_b[len(expected):]
    if state.current and on_b[:len(expected)] == expected and added and not any(added):
        raise UsageError(
            f"the commit {commits[-1][0][:12]} made since the stop lacks the trailer "
            f"`{series_mod.PATCH_ID_TRAILER}: {state.current}`: give it the patch's message "
            f"(`git -C {quoted} commit --amend --no-edit -C "
            f"{state.patch(state.current).commit_on_a[:12]}` when it is the only one), then "
            f"`{command(state, tree, 'continue')}`")
    extra = [c[:12] for c, patch_id in commits if patch_id not in expected]
    raise UsageError(
        f"branch {worktree.branch_name(state.framework, state.to_tag)} holds commits this port "
        f"did not make or expect ({', '.join(extra[:3])}); remove them (`git -C {quoted} "
        f"reset --hard {commits[len(expected) - 1][0][:12] if expected else state.to_commit[:12]}`"
        f"), then `{command(state, tree, 'continue')}`")


def _picking(tree: Path) -> str | None:
    head = git_dir(tree) / "CHERRY_PICK_HEAD"
    return head.read_text().strip() if head.is_file() else None


def _conflicted_files(tree: Path) -> list[str]:
    return git.out(["diff", "--name-only", "--diff-filter=U"], tree).splitlines()


def _rerere_resolved(tree: Path) -> bool:
    """rerere (autoUpdate) staged a recorded resolution for every conflicted file."""
    if _picking(tree) is None:
        return False
    return not _conflicted_files(tree) and \
        git.run(["diff", "--cached", "--check"], tree, check=False).returncode == 0


def conflict_hunks(tree: Path, path: str) -> list[tuple[int, int]]:
    """Line ranges of conflict markers in PATH (1-based, inclusive)."""
    ranges = []
    start = None
    text = (tree / path).read_text(errors="replace").splitlines()
    for number, line in enumerate(text, 1):
        if line.startswith("<<<<<<< "):
            start = number
        elif line.startswith(">>>>>>> ") and start is not None:
            ranges.append((start, number))
            start = None
    return ranges


def conflict_message(tree: Path, state: PortState, patch: PatchState) -> str:
    files = []
    for path in _conflicted_files(tree):
        hunks = conflict_hunks(tree, path) if (tree / path).is_file() else []
        where = ", ".join(f"lines {a}-{b}" for a, b in hunks) or (
            "no conflict markers left: `git add` it once it is resolved"
            if (tree / path).is_file() else "whole file")
        files.append(f"{path} ({where})")
    culprit = find_culprit(tree, state, patch)
    return (f"port stopped at {patch.file}: conflicts in {'; '.join(files)}; {culprit}; "
            f"resolve in {tree}, then `{command(state, tree, 'continue')}` (or leave the patch "
            f"out with `{command(state, tree, 'skip')}`)")


def find_culprit(tree: Path, state: PortState, patch: PatchState) -> str:
    """The first upstream commit between A and B on which the patch stops applying."""
    if not state.shared_history:
        return "no upstream history between the two trees (archives), so no culprit commit"
    commits = git.out(["rev-list", "--reverse", "--first-parent",
                       f"{state.from_commit}..{state.to_commit}"], tree).splitlines()
    # What the series up to and including this patch does to the conflicting patch's files: it
    # applies on A by construction; find the first upstream commit where it stops applying.
    paths = git.out(["show", "--format=", "--name-only", patch.commit_on_a], tree).splitlines()
    diff = git.run(["diff", "--binary", state.from_commit, patch.commit_on_a, "--", *paths],
                   tree).stdout
    index = {"GIT_INDEX_FILE": str(scratch(tree) / "index-culprit")}

    def applies(commit: str) -> bool:
        git.run(["read-tree", commit], tree, env=index)
        return git.run(["apply", "--check", "--cached"], tree, env=index, input=diff,
                       check=False).returncode == 0

    try:
        if not commits or applies(commits[-1]):
            return ("no single upstream commit breaks it (the conflict comes from earlier LMS "
                    "patches)")
        low, high = 0, len(commits) - 1
        while low < high:
            mid = (low + high) // 2
            if applies(commits[mid]):
                low = mid + 1
            else:
                high = mid
    finally:
        clear_scratch(tree)
    culprit = commits[low]
    subject = git.out(["log", "-1", "--format=%s", culprit], tree)
    return f"first breaking upstream commit {culprit[:12]} ({subject})"


# --- user actions --------------------------------------------------------------------------------


def interrupted_patch(tree: Path, state: PortState) -> PatchState | None:
    """The patch the port is stopped at, or whose cherry-pick a killed process left behind."""
    if state.current:
        return state.patch(state.current)
    if state.in_flight and _picking(tree) == state.patch(state.in_flight).commit_on_a:
        return state.patch(state.in_flight)
    return None


def continue_(tree: Path, state: PortState) -> None:
    """Accept the resolution of the patch the port stopped at: its commit must be on branch B."""
    if state.current is None or state.phase != "replay":
        return
    _clear_stale_git_locks(tree)
    _require_branch_b(tree, state)
    patch = state.patch(state.current)
    picking = _picking(tree)
    if picking == patch.commit_on_a:
        _commit_resolution(tree, state, patch)
    elif picking is not None or git.in_progress_operation(tree):
        what = f"a cherry-pick of {picking[:12]}" if picking else git.in_progress_operation(tree)
        raise UsageError(f"{tree} has {what} in progress, not the one of {patch.file}; finish "
                         f"or abort it, then `{command(state, tree, 'continue')}`")
    on_b = _check_branch(tree, state, landing=patch.id)
    if patch.id not in on_b:
        quoted = shlex.quote(str(tree))
        raise UsageError(
            f"the cherry-pick of {patch.file} is no longer in progress (aborted, skipped or "
            f"reset?) and branch {worktree.branch_name(state.framework, state.to_tag)} has no "
            f"commit for it; redo it with `git -C {quoted} cherry-pick {patch.commit_on_a}`, "
            f"resolve, then `{command(state, tree, 'continue')}`; or leave it out with "
            f"`{command(state, tree, 'skip')}`")
    state.current = state.stop_head = None
    _landed(tree, state, patch, "resolved")


def _commit_resolution(tree: Path, state: PortState, patch: PatchState) -> None:
    """Check the resolution without touching the conflict state; commit it if it is sound."""
    changed = git.out(["diff", "--name-only", "HEAD"], tree).splitlines()
    marked = [path for path in changed
              if (tree / path).is_file() and _MARKER.search((tree / path).read_bytes())]
    quoted = shlex.quote(str(tree))
    if marked:
        raise UsageError(
            f"conflict markers remain in {', '.join(marked[:5])}"
            f"{' and more' if len(marked) > 5 else ''}; finish the resolution (`git -C {quoted} "
            f"checkout --ours/--theirs FILE` and `git -C {quoted} mergetool` still work), then "
            f"`{command(state, tree, 'continue')}`")
    index = git_dir(tree) / "index"
    backup = scratch(tree) / "index.before-continue"
    shutil.copyfile(index, backup)
    try:
        git.run(["add", "-u"], tree)
        check = git.run(["diff", "--cached", "--check"], tree, check=False)
        if check.returncode != 0:
            where = sorted({ln.split(":", 1)[0] for ln in check.stdout.decode(errors="replace")
                            .splitlines() if ":" in ln and not ln.startswith(("+", "-"))})
            raise UsageError(f"whitespace errors in {', '.join(where[:5]) or 'the resolution'} "
                             f"(`git -C {quoted} diff HEAD --check` lists them); fix them, then "
                             f"`{command(state, tree, 'continue')}`")
        if git.run(["diff", "--cached", "--quiet", "HEAD"], tree, check=False).returncode == 0:
            raise UsageError(
                f"the resolution leaves {patch.file} empty: it changes nothing on "
                f"{state.to_tag}; if {state.to_tag} does not need it, leave it out with "
                f"`{command(state, tree, 'skip')}`, otherwise redo the resolution")
    except BaseException:
        os.replace(backup, index)  # the conflict state exactly as the user left it
        raise
    git.run(["cherry-pick", "--continue"], tree, env=CONTINUE_ENV)
    clear_scratch(tree)


def skip(tree: Path, state: PortState, reason: str) -> None:
    patch = interrupted_patch(tree, state) if state.phase == "replay" else None
    if patch is None:
        raise UsageError(f"nothing to skip: the port is not stopped at a patch "
                         f"(`{command(state, tree, 'status')}` shows where it is)")
    _clear_stale_git_locks(tree)
    _require_branch_b(tree, state)
    if patch.id in [patch_id for _, patch_id in _branch_commits(tree, state)]:
        raise UsageError(f"{patch.file} is committed on branch "
                         f"{worktree.branch_name(state.framework, state.to_tag)} already; keep "
                         f"it with `{command(state, tree, 'continue')}`, or remove that commit "
                         "first")
    if _picking(tree) is not None:
        git.run(["cherry-pick", "--abort"], tree, check=False)
    if git.is_dirty(tree):
        git.run(["reset", "--quiet", "--hard", "HEAD"], tree)
    patch.status, patch.note = "skipped", reason
    state.current = state.stop_head = state.in_flight = None
    state.in_flight_outcome = ""
    state.save(tree)


def abort(tree: Path, state: PortState) -> None:
    """Remove everything the port made: its work tree and anything it wrote to patches/."""
    if state.finish is not None:
        _undo_finish(state)
    if state.created_folder:
        shutil.rmtree(tree)
    else:
        for child in tree.iterdir():
            _remove(child)


# --- finish --------------------------------------------------------------------------------------


def finish(tree: Path, state: PortState) -> Path:
    """Export the series into the patches folder: restartable, and undone by --abort."""
    folder = state.series_folder
    journal = state.finish
    if journal is not None and journal.series_hash and \
            holds_series(folder, journal.series_hash):
        _finalize(tree, state)  # killed after the series was in place
        return folder
    if journal is None:
        if (folder / series_mod.MANIFEST).is_file() or \
                (folder.is_dir() and any(folder.iterdir())):
            raise UsageError(f"{folder} holds files already; move them away (or remove them), "
                             f"then `{command(state, tree, 'continue')}`")
        # Named after the work tree: two ports to the same tag never share a staging folder.
        owner = hashlib.sha256(str(tree).encode()).hexdigest()[:12]
        journal = FinishJournal(staging=str(folder.parent / f".{state.to_tag}.port-{owner}"),
                                folder_existed=folder.is_dir(),
                                rr_cache_existed=state.shared_rr_cache.is_dir())
        state.finish = journal
        state.save(tree)
    staging = Path(journal.staging)
    shutil.rmtree(staging, ignore_errors=True)
    clear_scratch(tree)
    staging.mkdir(parents=True)
    branch_b = worktree.branch_name(state.framework, state.to_tag)
    entries = export.format_patches(tree, state.to_commit, branch_b, staging,
                                    tmp_root=scratch(tree))
    export.round_trip(tree, state.to_commit, branch_b, [staging / e.file for e in entries],
                      tmp_root=scratch(tree))
    identity_b = state.identity_b
    new = series_mod.Series(
        folder=staging, framework=state.framework, tag=state.to_tag, base=state.to_commit,
        upstream={k: identity_b[k] for k in ("kind", "archive", "sha256", "upstream_commit",
                                             "commit", "tree") if identity_b.get(k)},
        ported_from={"tag": state.from_tag, "series_hash": state.from_series_hash,
                     "base": state.from_series_base},
        patches=entries,
        skipped=[{"id": p.id, "reason": p.note} for p in state.patches
                 if p.status == "skipped"] +
                [{"id": p.id, "reason": f"dropped: {p.note}"} for p in state.patches
                 if p.status == "dropped"])
    series_mod.write_manifest(new)
    recorded = _save_resolutions(tree, state, journal)
    port_report.write_report(staging / "PORT-REPORT.md", state, tree,
                             {e.id: e.file for e in entries}, recorded)
    journal.series_hash = new.content_hash()
    state.save(tree)
    staging.rename(folder)  # atomic; replaces the folder when it existed empty
    _finalize(tree, state)
    return folder


def holds_series(folder: Path, series_hash: str) -> bool:
    try:
        return series_mod.load(folder, check_patch_ids=False).content_hash() == series_hash
    except UsageError:
        return False


def _save_resolutions(tree: Path, state: PortState, journal: FinishJournal) -> int:
    """Copy resolutions recorded in this port into the shared cache; return how many it made.

    The journal lists what is about to be added before the copy starts, so --abort can take
    it out again and a resumed finish copies it again (each file lands whole, by rename).
    """
    local = git_dir(tree) / "rr-cache"
    shared = state.shared_rr_cache
    recorded = sorted(e.name for e in local.iterdir() if (e / "postimage").is_file()
                      and e.name not in state.seeded_resolutions) if local.is_dir() else []
    to_add = [name for name in recorded
              if name in journal.rr_added or not (shared / name).exists()]
    journal.rr_added = sorted(set(journal.rr_added) | set(to_add))
    state.save(tree)
    for name in to_add:
        target = shared / name
        target.mkdir(parents=True, exist_ok=True)
        for part in ("preimage", "postimage"):
            tmp = target / f".{part}.tmp"
            shutil.copyfile(local / name / part, tmp)
            tmp.replace(target / part)
    return len(recorded)


def _undo_finish(state: PortState) -> None:
    journal = state.finish
    assert journal is not None
    shutil.rmtree(journal.staging, ignore_errors=True)
    folder = state.series_folder
    if journal.series_hash and holds_series(folder, journal.series_hash):
        shutil.rmtree(folder)
        if journal.folder_existed:
            folder.mkdir()
    for name in journal.rr_added:
        shutil.rmtree(state.shared_rr_cache / name, ignore_errors=True)
    if not journal.rr_cache_existed and state.shared_rr_cache.is_dir() and \
            not any(state.shared_rr_cache.iterdir()):
        state.shared_rr_cache.rmdir()


def _finalize(tree: Path, state: PortState) -> None:
    # The work tree now holds the series for tag B: `export`, `status` and `verify` see B.
    worktree.write_meta(worktree.WorkTree(tree, state.framework, state.to_tag, state.to_commit,
                                          state.identity_b))
    clear_scratch(tree)
    (git_dir(tree) / STATE_FILE).unlink(missing_ok=True)
