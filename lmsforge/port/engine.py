"""Carry a series from upstream tag A to tag B: the port state machine.

The port runs in its own work tree (``--into``). Progress lives in git refs and a state file in
that tree's git folder (``state.py``), so a process killed in any phase resumes with
``--continue`` (``recover.py``) and ``--abort`` removes every trace. This module holds the
phases and the user's actions; ``steps.py`` what they share, ``finish.py`` the last
phase, ``report.py`` what the reviewer reads:

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

import os
import shlex
import shutil
from pathlib import Path

from lmsforge import git
from lmsforge.errors import CheckFailed, UsageError
from lmsforge.port import guide as port_guide, report as port_report, state as port_state
from lmsforge.port.finish import finish, resolution_variants, undo_finish
from lmsforge.port.recover import recover
from lmsforge.port.state import (
    CREATED_MARK,
    LOCK_FILE,
    STATE_FILE,
    PatchState,
    PortState,
    clear_scratch,
    command,
    git_dir,
    identity,
    scratch,
)
from lmsforge.port.steps import (
    CONTINUE_ENV,
    PORT_ENV,
    branch_commits,
    check_branch,
    cherry_pick_head,
    clear_stale_git_locks,
    conflicted_files,
    flag_hand_changes,
    holds_markers,
    landed,
    needs_hand_staging,
    require_branch_b,
    refuse_unseen,
    rerere_resolved,
    stop,
    unmerged_stages,
)
from lmsforge.series import manifest as series_mod, patchfile, worktree
from lmsforge.upstream.tree import TreeIdentity

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
    stranded = port_state.stranded_port(into)
    if stranded is not None:
        raise UsageError(stranded)
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


def claim(into: Path) -> bool:
    """Make INTO/.git, where the port lock lives, before anything else; return whether INTO
    was made by a port (here, or by a start killed before it saved its state). Two starts into
    one folder then meet at the lock, not inside `git init`. The mark says which: without it
    the start that takes over a killed one's folder takes it for the user's, and --abort leaves
    it behind (a kill between the folder and its mark, two calls apart, still does that: the
    folder is then kept, never a user's removed)."""
    created = not into.exists()
    (into / ".git").mkdir(parents=True, exist_ok=True)
    mark = into / ".git" / CREATED_MARK
    if created:
        mark.touch()
    return created or mark.is_file()


def begin(into: Path, series: series_mod.Series, identity_a: TreeIdentity,
          identity_b: TreeIdentity, patches_dir: Path,
          previous: port_guide.Previous | None = None, created: bool = False) -> PortState:
    """Make INTO an empty git repository and the state of a port about to start there.

    Called under the port lock (after `claim`); the caller saves the state before it lets the
    lock go, and from then on a kill at any point is resumable (--continue) or removable
    (--abort). CREATED: INTO did not exist before `claim`.
    """
    try:
        check_base(series, identity_a)
        check_new_target(into)  # again: another start may have taken the folder meanwhile
        worktree.init_repo(into)
    except BaseException:
        if into.is_dir() and _empty_or_fresh(into):  # nothing but what `claim` made
            shutil.rmtree(into if created else into / ".git", ignore_errors=True)
        raise
    return PortState(
        framework=series.framework, from_tag=series.tag, to_tag=identity_b.tag,
        patches_dir=str(patches_dir.resolve()), identity_a=identity_a.to_json(),
        identity_b=identity_b.to_json(), from_series_hash=series.content_hash(),
        from_series_base=series.base, created_folder=created,
        previous=None if previous is None else {
            "folder": str(previous.folder.resolve()), "series_hash": previous.series_hash,
            "from_series_hash": previous.from_series_hash, "from_commit": previous.from_commit,
            "from_folder": previous.from_folder})


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
    port_state.mark_unfinished(tree, state.to_tag)
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
    if state.previous is not None:
        port_guide.materialise(tree, state, Path(state.patches_dir))
    git.run(["checkout", "--quiet", "-b", worktree.branch_name(state.framework, state.to_tag),
             state.to_commit], tree)
    state.phase = "replay"
    state.save(tree)


def _wipe_for_restart(tree: Path) -> None:
    """Everything but the port's own state and lock goes; the repository is made again."""
    _remove_all_but_state(tree)
    worktree.init_repo(tree)


def _remove_all_but_state(tree: Path) -> None:
    """Remove the work tree's files and its repository, keeping the port's state and lock."""
    for child in tree.iterdir():
        if child.name != ".git":
            _remove(child)
    for child in (tree / ".git").iterdir():
        if child.name not in (STATE_FILE, LOCK_FILE):
            _remove(child)


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
            if resolution_variants(entry):
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
        if (patch.commit_on_a in upstream_has or reverse) and \
                _modes_on(tree, patch.commit_on_a, state.to_commit):
            patch.status = "dropped"
            patch.note = ("upstream has an equivalent commit" if patch.commit_on_a in
                          upstream_has else f"{state.to_tag} already contains this change")
    clear_scratch(tree)


def _modes_on(tree: Path, commit: str, target: str) -> bool:
    """Whether TARGET's tree has every file mode COMMIT sets (a chmod is a change too).

    Neither `git cherry` nor a reverse `git apply --check` looks at modes: a patch that only
    makes a file executable reverse-applies anywhere (git only warns), and is no more in a tag
    whose file is still 100644 than any other change.
    """
    fields = git.out(["diff-tree", "-r", "-z", "--no-renames", "--no-commit-id", f"{commit}^",
                      commit], tree).split("\0")
    wanted = {}
    for meta, path in zip(fields[0::2], fields[1::2]):
        old_mode, new_mode = meta.lstrip(":").split()[:2]
        if new_mode != old_mode and new_mode != "000000":
            wanted[path] = new_mode
    if not wanted:
        return True
    have = {}
    for entry in filter(None, git.out(["ls-tree", "-z", target, "--", *wanted], tree)
                        .split("\0")):
        meta, _, path = entry.partition("\t")
        have[path] = meta.split()[0]
    return all(have.get(path) == mode for path, mode in wanted.items())


# --- replay --------------------------------------------------------------------------------------


def proceed(tree: Path, state: PortState) -> Path:
    """Replay what is pending, then finish; returns the new series folder."""
    if state.phase == "replay":
        _replay(tree, state)
    if state.finish is None:  # before anything is exported: the branch is what the series gets
        flag_hand_changes(tree, state)
    return finish(tree, state)


def _replay(tree: Path, state: PortState) -> None:
    """Pick every pending patch; stop with PortStopped at a conflict rerere cannot resolve."""
    recover(tree, state)
    for patch in state.patches:
        if patch.status == "pending":
            _pick(tree, state, patch)
    state.phase = "finish"
    state.save(tree)


def _pick(tree: Path, state: PortState, patch: PatchState) -> None:
    previous = port_guide.commits_for(state, patch.id)
    if previous is not None:
        _guided_pick(tree, state, patch, previous)
        return
    # Saved before git runs: if the process dies, the next resume knows which pick this was
    # and what its outcome was going to be.
    state.in_flight, state.in_flight_outcome = patch.id, "picked"
    state.save(tree)
    proc = git.run(["cherry-pick", "--allow-empty", patch.commit_on_a], tree, env=PORT_ENV,
                   check=False)
    if proc.returncode == 0:
        landed(tree, state, patch, "picked")
        return
    if rerere_resolved(tree):
        state.in_flight_outcome = "rerere"
        state.save(tree)
        git.run(["cherry-pick", "--continue"], tree, env=CONTINUE_ENV)
        landed(tree, state, patch, "rerere")
        return
    if not conflicted_files(tree):
        _pick_failed(tree, patch, proc.stderr)
    stop(tree, state, patch)


def _pick_failed(tree: Path, patch: PatchState, stderr: bytes) -> None:
    lines = stderr.decode(errors="replace").strip().splitlines()
    first = next((ln for ln in lines if ln.startswith(("error", "fatal"))), "no output")
    raise CheckFailed(f"cherry-pick of {patch.file} failed ({first}); see `git -C "
                      f"{shlex.quote(str(tree))} status`")


def _guided_pick(tree: Path, state: PortState, patch: PatchState,
                 previous: tuple[str, str]) -> None:
    """Pick PATCH without committing, let the previous port decide what it can, then commit
    or stop. CHERRY_PICK_HEAD is written last: until then a killed pick is redone from
    scratch, after it the pick is what a stopped `git cherry-pick` would be."""
    state.in_flight, state.in_flight_outcome = patch.id, "picked"
    state.save(tree)
    head = git.out(["rev-parse", "HEAD"], tree)
    proc = git.run(["cherry-pick", "--no-commit", "--allow-empty", patch.commit_on_a], tree,
                   env=PORT_ENV, check=False)
    # A conflict that rerere resolved (and staged) leaves no conflicted file, only git's words.
    plain_conflicts = proc.returncode != 0 and (
        bool(conflicted_files(tree)) or b"CONFLICT (" in proc.stdout + proc.stderr)
    if proc.returncode != 0 and not plain_conflicts:
        _pick_failed(tree, patch, proc.stderr)
    decisions = port_guide.plan(tree, state, patch.commit_on_a, previous, head)
    changed = port_guide.apply(tree, decisions)
    new_conflicts = [d.path for d in decisions if d.conflicts and d.path in changed]
    if new_conflicts:
        port_guide.forget_rerere_entries(tree, new_conflicts)
        git.run(["rerere"], tree, check=False)  # replays a recorded resolution, or records
    clear_scratch(tree)
    left = conflicted_files(tree)
    patch.guided = sorted(changed)
    state.in_flight_outcome = ("resolved" if left else "guided" if changed else
                               "rerere" if plain_conflicts else "picked")
    state.save(tree)
    git.run(["update-ref", "--no-deref", "CHERRY_PICK_HEAD", patch.commit_on_a], tree)
    if left:
        stop(tree, state, patch)
    git.run(["cherry-pick", "--continue"], tree, env=CONTINUE_ENV)
    landed(tree, state, patch, state.in_flight_outcome)


# --- user actions --------------------------------------------------------------------------------


def interrupted_patch(tree: Path, state: PortState) -> PatchState | None:
    """The patch the port is stopped at, or whose cherry-pick a killed process left behind."""
    if state.current:
        return state.patch(state.current)
    if state.in_flight and cherry_pick_head(tree) == state.patch(state.in_flight).commit_on_a:
        return state.patch(state.in_flight)
    return None


def continue_(tree: Path, state: PortState) -> None:
    """Accept the resolution of the patch the port stopped at: its commit must be on branch B."""
    if state.current is None or state.phase != "replay":
        return
    clear_stale_git_locks(tree)
    require_branch_b(tree, state)
    patch = state.patch(state.current)
    refuse_unseen(tree, state, patch, "continue")
    picking = cherry_pick_head(tree)
    if picking == patch.commit_on_a:
        _commit_resolution(tree, state, patch)
    elif picking is not None or git.in_progress_operation(tree):
        what = f"a cherry-pick of {picking[:12]}" if picking else git.in_progress_operation(tree)
        raise UsageError(f"{tree} has {what} in progress, not the one of {patch.file}; finish "
                         f"or abort it, then `{command(state, tree, 'continue')}`")
    on_b = check_branch(tree, state, landing=patch.id)
    if patch.id not in on_b:
        quoted = shlex.quote(str(tree))
        raise UsageError(
            f"the cherry-pick of {patch.file} is no longer in progress (aborted, skipped or "
            f"reset?) and branch {worktree.branch_name(state.framework, state.to_tag)} has no "
            f"commit for it; redo it with `git -C {quoted} cherry-pick {patch.commit_on_a}`, "
            f"resolve, then `{command(state, tree, 'continue')}`; or leave it out with "
            f"`{command(state, tree, 'skip')}`")
    _refuse_an_empty_hand_commit(tree, state, patch)
    port_state.went_on(state, patch)
    state.current = state.stop_head = None
    landed(tree, state, patch, "resolved")


def _refuse_an_empty_hand_commit(tree: Path, state: PortState, patch: PatchState) -> None:
    """A resolution committed by hand that changes nothing (`git commit --allow-empty`) would
    leave the finish no patch to write for it: say so now, as for an empty resolution."""
    landed_as = next(sha for sha, patch_id in branch_commits(tree, state) if patch_id == patch.id)
    if git.run(["diff", "--quiet", f"{landed_as}^", landed_as], tree,
               check=False).returncode != 0:
        return
    quoted = shlex.quote(str(tree))
    raise UsageError(
        f"the commit of {patch.file} on branch "
        f"{worktree.branch_name(state.framework, state.to_tag)} is empty: it changes nothing on "
        f"{state.to_tag}; if {state.to_tag} does not need it, remove that commit (`git -C "
        f"{quoted} reset --soft HEAD~1`) and leave it out with `{command(state, tree, 'skip')}`,"
        f" otherwise redo the resolution and amend the commit")


def _commit_resolution(tree: Path, state: PortState, patch: PatchState) -> None:
    """Check the resolution without touching the conflict state; commit it if it is sound."""
    changed = git.out(["diff", "--name-only", "HEAD"], tree).splitlines()
    marked = [path for path in changed
              if (tree / path).is_file() and holds_markers((tree / path).read_bytes())]
    quoted = shlex.quote(str(tree))
    if marked:
        raise UsageError(
            f"conflict markers remain in {', '.join(marked[:5])}"
            f"{' and more' if len(marked) > 5 else ''}; finish the resolution (`git -C {quoted} "
            f"checkout --ours/--theirs FILE` and `git -C {quoted} mergetool` still work), then "
            f"`{command(state, tree, 'continue')}`")
    unstaged = [(path, why) for path, stages in unmerged_stages(tree).items()
                 if (why := needs_hand_staging(tree, path, stages)) is not None]
    if unstaged:
        # Never `git add -u` these for the user: the file as it stands is not a decision.
        named = "; ".join(f"{path} ({why})" for path, why in unstaged[:5])
        raise UsageError(
            f"{patch.file} still has {'unmerged paths' if len(unstaged) > 1 else 'an unmerged path'}"
            f" only you can decide: {named}{' and more' if len(unstaged) > 5 else ''}; put "
            f"each in its resolved form, then `git -C {quoted} add PATH` (keep it) or `git -C "
            f"{quoted} rm PATH` (remove it), then `{command(state, tree, 'continue')}` (or "
            f"leave the patch out with `{command(state, tree, 'skip')}`)")
    index = git_dir(tree) / "index"
    backup = scratch(tree) / "index.before-continue"
    shutil.copyfile(index, backup)
    try:
        git.run(["add", "-u"], tree)
        # cr-at-eol: the CR of a CRLF file's line is its line end, not trailing whitespace.
        check = git.run(["-c", "core.whitespace=cr-at-eol", "diff", "--cached", "--check"],
                        tree, check=False)
        if check.returncode != 0:
            where = sorted({ln.split(":", 1)[0] for ln in check.stdout.decode(errors="replace")
                            .splitlines() if ":" in ln and not ln.startswith(("+", "-"))})
            raise UsageError(f"whitespace errors in {', '.join(where[:5]) or 'the resolution'} "
                             f"(`git -C {quoted} -c core.whitespace=cr-at-eol diff HEAD --check` "
                             f"lists them); fix them, then `{command(state, tree, 'continue')}`")
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
    clear_stale_git_locks(tree)
    require_branch_b(tree, state)
    refuse_unseen(tree, state, patch, "skip")
    if patch.id in [patch_id for _, patch_id in branch_commits(tree, state)]:
        raise UsageError(f"{patch.file} is committed on branch "
                         f"{worktree.branch_name(state.framework, state.to_tag)} already; keep "
                         f"it with `{command(state, tree, 'continue')}`, or remove that commit "
                         "first")
    if cherry_pick_head(tree) is not None:
        git.run(["cherry-pick", "--abort"], tree, check=False)
    if git.is_dirty(tree):
        git.run(["reset", "--quiet", "--hard", "HEAD"], tree)
    port_state.went_on(state, patch)
    patch.status, patch.note = "skipped", reason
    state.current = state.stop_head = state.in_flight = None
    state.in_flight_outcome = ""
    state.save(tree)


def abort(tree: Path, state: PortState) -> None:
    """Remove everything the port made: its work tree and anything it wrote to patches/.

    The state says first that an abort is under way, and goes last: a kill half way leaves a
    state that sends every command to --abort, never a half-removed tree to resume.
    """
    if not state.aborting:
        state.aborting = True
        state.save(tree)
    if state.finish is not None:
        undo_finish(state)
    _remove_all_but_state(tree)
    if state.created_folder:
        shutil.rmtree(tree)
    else:
        _remove(tree / ".git")
