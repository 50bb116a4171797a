"""What every phase of a port does to branch B and tells the user.

Recording a patch's outcome, stopping at a conflict (with the hunks and the upstream commit
that broke the patch), and checking the invariant every resume relies on: branch B holds
exactly the commits of the patches marked picked, resolved or rerere, in series order (plus
the one being picked when the state was last saved).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from lmsforge import git
from lmsforge.errors import EXIT_STOPPED, LmsforgeError, UsageError
from lmsforge.port import guide as port_guide, report as port_report, state as port_state
from lmsforge.port.state import (
    DONE,
    LOCK_FILE,
    PatchState,
    PortState,
    clear_scratch,
    command,
    git_dir,
    scratch,
)
from lmsforge.series import manifest as series_mod, worktree

PORT_ENV = dict(worktree.AM_ENV)
CONTINUE_ENV = {**PORT_ENV, "GIT_EDITOR": "true"}
RESOLVED_NOTE = "conflict resolved by hand (recorded for rerere)"
RERERE_NOTE = "conflict resolved by a recorded resolution (rerere)"
GUIDED_NOTE = "carried from the previous port"
HAND_CHANGED_NOTE = "its commit was changed by hand after the port made it: review the range diff"
MARKER = re.compile(rb"^(<{7}|>{7})( |$)", re.M)


_WIDE_ENCODINGS = ("utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be")


def holds_markers(data: bytes) -> bool:
    """Whether DATA has conflict marker lines, in ASCII or in a UTF-16/32 text (which git sees
    as binary, so a user's hand-written markers in it are still the file's words)."""
    if MARKER.search(data):
        return True
    if b"\0" not in data:
        return False
    for encoding in _WIDE_ENCODINGS:
        text = data.decode(encoding, errors="ignore").lstrip("\ufeff")
        if MARKER.search(text.encode("utf-8", errors="ignore")):
            return True
    return False


class PortStopped(LmsforgeError):
    exit_code = EXIT_STOPPED


def landed(tree: Path, state: PortState, patch: PatchState, outcome: str) -> None:
    notes = {"picked": "", "rerere": RERERE_NOTE, "resolved": RESOLVED_NOTE,
             "guided": GUIDED_NOTE}
    renamed = state.renamed.get(patch.id)
    where = f"applied to what upstream renamed: {'; '.join(renamed)}" if renamed else ""
    guided = (f"the previous port decided {', '.join(patch.guided)}" if patch.guided else "")
    patch.status = outcome
    patch.note = "; ".join(n for n in (notes[outcome], guided, where) if n)
    patch.commit_on_b = git.out(["rev-parse", "HEAD"], tree)  # the patch's commit, just made
    state.in_flight, state.in_flight_outcome = None, ""
    state.save(tree)


def flag_hand_changes(tree: Path, state: PortState) -> None:
    """Note each landed patch whose commit on branch B was changed since the port made it.

    The branch check goes by trailers, so a hand edit of an earlier commit (an amend, a
    fixup) passes it; the reviewer must still hear of it. A commit that was only rewritten
    (a rebase under it) with the same change is not flagged.
    """
    now = dict((patch_id, commit) for commit, patch_id in branch_commits(tree, state))
    for patch in state.patches:
        commit = now.get(patch.id)
        if patch.status not in DONE or not patch.commit_on_b or commit is None or \
                commit == patch.commit_on_b or HAND_CHANGED_NOTE in patch.note:
            continue
        if _change_id(tree, commit) != _change_id(tree, patch.commit_on_b):
            patch.note = "; ".join(n for n in (patch.note, HAND_CHANGED_NOTE) if n)
    state.save(tree)


def _change_id(tree: Path, commit: str) -> str:
    """`git patch-id --stable` of COMMIT's change: equal for the same change rebased."""
    shown = git.run(["show", "--format=", "--binary", commit], tree).stdout
    words = git.run(["patch-id", "--stable"], tree, input=shown).stdout.decode().split()
    return words[0] if words else ""


def stop(tree: Path, state: PortState, patch: PatchState) -> None:
    state.current = patch.id
    state.stop_head = git.out(["rev-parse", "HEAD"], tree)
    state.in_flight, state.in_flight_outcome = None, ""
    port_state.stopped(state)
    state.save(tree)
    raise PortStopped(conflict_message(tree, state, patch))


def refuse_unseen(tree: Path, state: PortState, patch: PatchState, action: str) -> None:
    """Refuse ACTION at a stop (or an interrupted pick) of PATCH that nobody has been shown.

    A kill after the port saved a stop and before its line was printed leaves a user who
    runs --continue (the documented recovery) or re-runs a killed --skip meant for the patch
    before. The refusal shows the stop, and counts as showing it: the same command again acts.
    """
    if state.shown == patch.id:
        return
    state.shown = patch.id
    state.save(tree)
    if state.current == patch.id:
        raise UsageError(conflict_message(tree, state, patch, lost=True))
    raise UsageError(
        f"the cherry-pick of {patch.file} was interrupted (a killed process) before anyone saw "
        f"how it went: `{command(state, tree, 'continue')}` finishes it or stops at its "
        f"conflict; to leave {patch.file} out all the same, run the same --{action} again")


def cherry_pick_head(tree: Path) -> str | None:
    head = git_dir(tree) / "CHERRY_PICK_HEAD"
    return head.read_text().strip() if head.is_file() else None


def conflicted_files(tree: Path) -> list[str]:
    return git.out(["diff", "--name-only", "--diff-filter=U"], tree).splitlines()


def unmerged_stages(tree: Path) -> dict[str, dict[str, str]]:
    """Every unmerged path in the index: {path: {stage: blob}} (`git ls-files --unmerged`)."""
    found: dict[str, dict[str, str]] = {}
    for entry in filter(None, git.out(["ls-files", "--unmerged", "-z"], tree).split("\0")):
        meta, _, path = entry.partition("\t")
        _, oid, stage = meta.split()
        found.setdefault(path, {})[stage] = oid
    return found


def needs_hand_staging(tree: Path, path: str, stages: dict[str, str]) -> str | None:
    """Why the unmerged PATH can only be resolved by the user's own `git add`/`git rm`.

    None for a text conflict that git wrote with markers (both sides present, neither binary):
    markers left in it refuse --continue, and an edit that removed them is the resolution. For
    anything else (deleted on one side, binary, no file in the tree) the file as it stands
    tells nothing about what the user decided, so only staging it says so.
    """
    if "2" not in stages:
        return "deleted upstream, changed by the patch"
    if "3" not in stages:
        return "deleted by the patch, changed upstream"
    if not (tree / path).is_file():
        return "not in the work tree"
    for stage in ("2", "3"):
        blob = git.run(["cat-file", "blob", stages[stage]], tree).stdout
        if b"\0" in blob[:8000]:  # git's own test for a binary file
            return "binary"
    return None


def has_markers(tree: Path, path: str) -> bool:
    file = tree / path
    return not file.is_file() or holds_markers(file.read_bytes())


def rerere_resolved(tree: Path) -> bool:
    """rerere (autoUpdate) staged a recorded resolution for every conflicted file."""
    if cherry_pick_head(tree) is None:
        return False
    return not conflicted_files(tree) and \
        git.run(["-c", "core.whitespace=cr-at-eol", "diff", "--cached", "--check"], tree,
                check=False).returncode == 0


def clear_stale_git_locks(tree: Path) -> None:
    # The port holds its own lock, so no git command of ours runs here now: these are what a
    # killed git left behind.
    gd = git_dir(tree)
    for stale_lock in [*gd.glob("*.lock"), *(gd / "refs").rglob("*.lock")]:
        if stale_lock.name != LOCK_FILE:
            stale_lock.unlink()


def require_branch_b(tree: Path, state: PortState) -> None:
    branch_b = worktree.branch_name(state.framework, state.to_tag)
    head = git.run(["symbolic-ref", "--quiet", "HEAD"], tree, check=False).stdout.decode().strip()
    if head != f"refs/heads/{branch_b}":
        where = head.removeprefix("refs/heads/") or "a detached HEAD"
        raise UsageError(f"{tree} is on {where}, not {branch_b}; check it out (`git -C "
                         f"{shlex.quote(str(tree))} checkout {branch_b}`), then "
                         f"`{command(state, tree, 'continue')}`")


def branch_commits(tree: Path, state: PortState) -> list[tuple[str, str]]:
    """(commit, Lms-Patch-Id) of each commit on branch B above tag B, oldest first."""
    branch_b = worktree.branch_name(state.framework, state.to_tag)
    fmt = f"%H %(trailers:key={series_mod.PATCH_ID_TRAILER},valueonly,separator=%x2C)"
    lines = git.out(["log", "--reverse", f"--format={fmt}", f"{state.to_commit}..{branch_b}"],
                    tree).splitlines()
    return [(line.split(" ", 1)[0], line.partition(" ")[2].strip()) for line in lines]


def check_branch(tree: Path, state: PortState, landing: str | None = None) -> list[str]:
    """Branch B must hold the done patches in order, then at most the one landing; return it."""
    landing = landing or state.in_flight
    commits = branch_commits(tree, state)
    on_b = [patch_id for _, patch_id in commits]
    expected = [p.id for p in state.patches if p.status in DONE]
    if on_b == expected or (landing and on_b == [*expected, landing]):
        return on_b
    quoted = shlex.quote(str(tree))
    branch_b = worktree.branch_name(state.framework, state.to_tag)
    good = _last_good_commit(tree, state, expected)
    put_back = (f"`git -C {quoted} reset --hard {good[:12]}`" if good else
                f"`git -C {quoted} reflog {branch_b}` shows where it was")
    lost = [p.file for p in state.patches if p.status in DONE and p.id not in on_b]
    if lost:
        raise UsageError(
            f"branch {branch_b} lost the commits of {', '.join(lost[:3])}"
            f"{' and more' if len(lost) > 3 else ''} (a reset or rebase?); put it back "
            f"({put_back}), or remove the port with `{command(state, tree, 'abort')}`")
    added = on_b[len(expected):]
    if state.current and on_b[:len(expected)] == expected and added and not any(added):
        raise UsageError(
            f"the commit {commits[-1][0][:12]} made since the stop lacks the trailer "
            f"`{series_mod.PATCH_ID_TRAILER}: {state.current}`: give it the patch's message "
            f"(`git -C {quoted} commit --amend --no-edit -C "
            f"{state.patch(state.current).commit_on_a[:12]}` when it is the only one), then "
            f"`{command(state, tree, 'continue')}`")
    raise UsageError(
        f"branch {branch_b} holds commits this port did not make, or its patches in another "
        f"order; put it back ({put_back}), then `{command(state, tree, 'continue')}`")


def _last_good_commit(tree: Path, state: PortState, expected: list[str]) -> str | None:
    """The newest commit in branch B's reflog that carries the last patch marked done."""
    if not expected:
        return state.to_commit
    branch_b = worktree.branch_name(state.framework, state.to_tag)
    fmt = f"%H %(trailers:key={series_mod.PATCH_ID_TRAILER},valueonly,separator=%x2C)"
    log = git.run(["log", "--walk-reflogs", f"--format={fmt}", branch_b], tree, check=False)
    for line in log.stdout.decode(errors="replace").splitlines():
        commit, _, patch_id = line.partition(" ")
        if patch_id.strip() == expected[-1]:
            return commit
    return None


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


def conflict_message(tree: Path, state: PortState, patch: PatchState, lost: bool = False) -> str:
    """The stop line; LOST: the stop was saved but its line never reached the user (a kill)."""
    files = []
    for path in conflicted_files(tree):
        stages = {line.split()[2] for line in
                  git.out(["ls-files", "--unmerged", "--", path], tree).splitlines()}
        hunks = conflict_hunks(tree, path) if (tree / path).is_file() else []
        if "2" not in stages:
            where = (f"deleted in {state.to_tag}, changed by the patch: fold the change into "
                     f"the file where {state.to_tag} keeps that code, then `git rm` it")
        elif "3" not in stages:
            where = "deleted by the patch, changed upstream: `git rm` it or keep it"
        else:
            where = ", ".join(f"lines {a}-{b}" for a, b in hunks) or (
                "no conflict markers left: `git add` it once it is resolved"
                if (tree / path).is_file() else "whole file")
        files.append(f"{path} ({where})")
    culprit = find_culprit(tree, state, patch)
    previous = port_guide.commits_for(state, patch.id)
    if previous is not None:
        culprit += (f"; the previous port of this patch is `git -C {shlex.quote(str(tree))} "
                    f"show {previous[1][:12]}`")
    seen = " (its stop line was lost to a killed process: nobody saw it)" if lost else ""
    return (f"port stopped at {patch.file}{seen}: conflicts in {'; '.join(files)}; {culprit}; "
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
        # The pick follows upstream's renames, so the test does too: a commit that only moved
        # a file is not what broke the patch.
        renames = port_report.upstream_renames(tree, state.from_commit, commit, set(paths))
        git.run(["read-tree", commit], tree, env=index)
        return git.run(["apply", "--check", "--cached"], tree, env=index,
                       input=_renamed_diff(diff, renames), check=False).returncode == 0

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


def _renamed_diff(diff: bytes, renames: dict[str, str]) -> bytes:
    """DIFF (of `git diff`) with the paths in its file headers moved by RENAMES (old -> new)."""
    if not renames:
        return diff
    moved = {old.encode(): new.encode() for old, new in renames.items()}
    lines = diff.split(b"\n")
    header = False
    for number, line in enumerate(lines):
        if line.startswith(b"diff --git "):
            header = True
        elif line.startswith((b"@@", b"GIT binary patch")):
            header = False
        if not header:
            continue
        for old, new in moved.items():
            if line == b"diff --git a/" + old + b" b/" + old:
                line = b"diff --git a/" + new + b" b/" + new
            elif line in (b"--- a/" + old, b"+++ b/" + old):
                line = line[:6] + new
        lines[number] = line
    return b"\n".join(lines)
