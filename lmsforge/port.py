"""Carry a series from upstream tag A to tag B: the port state machine.

The port runs in its own work tree (``--into``). Progress lives in git refs and a state file in
that tree's git folder, so a killed process resumes with ``--continue``:

1. preflight: both tags fetched and pinned; the series' base must be tag A's tree; a risk table
   from what upstream changed between A and B in each patch's files;
2. materialise the series on A (branch ``lms/F/A``);
3. drop patches B already contains (``git cherry``; or the patch reverse-applies on B);
4. replay the rest onto B (branch ``lms/F/B``) one cherry-pick at a time with ``rerere`` on and
   the shared resolution cache ``patches/F/rr-cache`` loaded, so a conflict resolved once
   resolves itself on every later port, for every maintainer;
5. on a conflict rerere cannot resolve: stop (exit 3) naming the patch, files and hunks, and
   the first upstream commit between A and B that breaks the patch (bisection with
   ``git apply --check``) when the trees share history;
6. when every patch is in: export into ``patches/F/B`` with ``ported_from``, check the round
   trip, save new resolutions into the shared cache, and write ``PORT-REPORT.md``.
"""

from __future__ import annotations

import json
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Iterator

import filelock

from lmsforge import export, git, patchfile, series as series_mod, worktree
from lmsforge.errors import EXIT_STOPPED, CheckFailed, LmsforgeError, UsageError
from lmsforge.upstream import TreeIdentity

STATE_FILE = "lmsforge-port.json"
RR_CACHE = "rr-cache"
PORT_ENV = dict(worktree.AM_ENV)


@dataclass
class PatchState:
    id: str
    file: str
    commit_on_a: str
    status: str = "pending"  # pending, picked, resolved, rerere, dropped, skipped
    note: str = ""


@dataclass
class PortState:
    framework: str
    from_tag: str
    to_tag: str
    from_commit: str
    to_commit: str
    to_identity: dict[str, object]
    from_series_hash: str
    from_series_base: str
    created_folder: bool
    shared_history: bool
    patches: list[PatchState]
    risk: list[dict[str, object]] = field(default_factory=list)
    current: str | None = None  # id of the patch whose cherry-pick stopped

    def save(self, tree: Path) -> None:
        path = state_path(tree)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, tree: Path) -> "PortState":
        path = state_path(tree)
        if not path.is_file():
            raise UsageError(f"no port in progress in {tree}; start one with `lmsforge port "
                             "--framework F --from A --to B --into DIR`")
        data = json.loads(path.read_text())
        data["patches"] = [PatchState(**p) for p in data["patches"]]
        return cls(**data)

    def patch(self, patch_id: str) -> PatchState:
        return next(p for p in self.patches if p.id == patch_id)


@contextmanager
def locked(tree: Path) -> Iterator[None]:
    """One lmsforge process per port work tree at a time."""
    lock = Path(git.out(["rev-parse", "--absolute-git-dir"], tree)) / "lmsforge-port.lock"
    try:
        with filelock.FileLock(str(lock), timeout=0):
            yield
    except filelock.Timeout:
        raise UsageError(f"another lmsforge port is running in {tree}; wait for it") from None


def state_path(tree: Path) -> Path:
    return Path(git.out(["rev-parse", "--absolute-git-dir"], tree)) / STATE_FILE


class PortStopped(LmsforgeError):
    exit_code = EXIT_STOPPED


# --- preflight ---------------------------------------------------------------------------------


def check_base(series: series_mod.Series, identity_a: TreeIdentity) -> None:
    recorded_tree = series.upstream.get("tree")
    if series.base != identity_a.commit and recorded_tree != identity_a.tree:
        raise UsageError(
            f"series {series.framework} {series.tag} was exported on {series.base[:12]} (tree "
            f"{str(recorded_tree)[:12]}), but {identity_a.tag} is {identity_a.commit[:12]} (tree "
            f"{identity_a.tree[:12]}); re-export the series on its tag first")


def risk_table(repo: Path, a: str, b: str, series: series_mod.Series,
               shared_history: bool) -> list[dict[str, object]]:
    rows = []
    created: set[str] = set()  # files an earlier patch of the series adds: not upstream's
    for entry in series.patches:
        parsed = patchfile.parse(series.folder / entry.file)
        upstream_files = [f.path for f in parsed.files
                          if not f.new_file and f.path not in created]
        created.update(f.path for f in parsed.files if f.new_file)
        commits = 0
        lines = 0
        for path in upstream_files:
            numstat = git.out(["diff", "--numstat", a, b, "--", path], repo)
            for line in numstat.splitlines():
                added, removed, _ = line.split("\t", 2)
                lines += int(added) + int(removed) if added != "-" else 0
            if shared_history:
                log = git.out(["rev-list", "--count", f"{a}..{b}", "--", path], repo)
                commits += int(log or 0)
        if not upstream_files:
            risk = "none (new files only)"
        elif lines == 0:
            risk = "none (files unchanged upstream)"
        elif lines < 50:
            risk = "low"
        elif lines < 500:
            risk = "medium"
        else:
            risk = "high"
        rows.append({"patch": entry.file, "upstream_files": len(upstream_files),
                     "upstream_lines_changed": lines,
                     "upstream_commits": commits if shared_history else None, "risk": risk})
    return rows


# --- the run -----------------------------------------------------------------------------------


def start(series: series_mod.Series, identity_a: TreeIdentity, identity_b: TreeIdentity,
          into: Path, shared_rr_cache: Path) -> PortState:
    check_base(series, identity_a)
    existed = into.exists() and any(into.iterdir())
    if existed:
        raise UsageError(f"{into} is not empty; pass a new folder with --into for the port")
    created = not into.exists()
    try:
        tree = worktree.create(into, identity_a, series.paths())
        git.run(["fetch", "--quiet", "--no-tags", identity_b.repo,
                 f"refs/tags/{identity_b.tag}:refs/tags/{identity_b.tag}"], into)
        shared = git.run(["merge-base", identity_a.commit, identity_b.commit], into,
                         check=False).returncode == 0
        commits = git.out(["rev-list", "--reverse", f"{tree.base}..{tree.branch}"],
                          into).splitlines()
        state = PortState(
            framework=series.framework, from_tag=series.tag, to_tag=identity_b.tag,
            from_commit=identity_a.commit, to_commit=identity_b.commit,
            to_identity=identity_b.to_json(), from_series_hash=series.content_hash(),
            from_series_base=series.base, created_folder=created, shared_history=shared,
            patches=[PatchState(e.id, e.file, c) for e, c in zip(series.patches, commits)],
            risk=risk_table(into, identity_a.commit, identity_b.commit, series, shared))
        _configure_rerere(into, shared_rr_cache)
        _drop_upstream_patches(into, state, series)
        git.run(["checkout", "--quiet", "-b", worktree.branch_name(series.framework,
                                                                   identity_b.tag),
                 identity_b.commit], into)
        state.save(into)
    except BaseException:
        if created:
            shutil.rmtree(into, ignore_errors=True)
        raise
    return state


def _configure_rerere(tree: Path, shared_rr_cache: Path) -> None:
    git.run(["config", "rerere.enabled", "true"], tree)
    git.run(["config", "rerere.autoUpdate", "true"], tree)
    local = Path(git.out(["rev-parse", "--absolute-git-dir"], tree)) / RR_CACHE
    if shared_rr_cache.is_dir():
        shutil.copytree(shared_rr_cache, local, dirs_exist_ok=True)


def _drop_upstream_patches(tree: Path, state: PortState, series: series_mod.Series) -> None:
    """Mark patches whose change tag B already has (cherry-picked upstream, or reverse-applies)."""
    branch_a = worktree.branch_name(state.framework, state.from_tag)
    cherry = git.out(["cherry", state.to_commit, branch_a], tree).splitlines()
    upstream_has = {line[2:] for line in cherry if line.startswith("- ")}
    with tempfile.TemporaryDirectory() as tmp:
        index = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git.run(["read-tree", state.to_commit], tree, env=index)
        for patch in state.patches:
            path = series.folder / patch.file
            reverse = git.run(["apply", "--check", "--cached", "--reverse", str(path)], tree,
                              env=index, check=False).returncode == 0
            if patch.commit_on_a in upstream_has or reverse:
                patch.status = "dropped"
                patch.note = ("upstream has an equivalent commit" if patch.commit_on_a in
                              upstream_has else f"{state.to_tag} already contains this change")


def resume(tree: Path, state: PortState) -> PortState:
    """Replay every pending patch; stop with PortStopped at a conflict rerere cannot resolve."""
    _sync_with_refs(tree, state)
    for patch in state.patches:
        if patch.status != "pending":
            continue
        proc = git.run(["cherry-pick", "--allow-empty", patch.commit_on_a], tree, env=PORT_ENV,
                       check=False)
        if proc.returncode == 0:
            patch.status = "picked"
            state.save(tree)
            continue
        if _rerere_resolved(tree):
            git.run(["cherry-pick", "--continue"], tree, env={**PORT_ENV, "GIT_EDITOR": "true"})
            patch.status = "rerere"
            patch.note = "conflict resolved by a recorded resolution (rerere)"
            state.save(tree)
            continue
        if not _conflicted_files(tree):
            lines = proc.stderr.decode(errors="replace").strip().splitlines()
            first = next((ln for ln in lines if ln.startswith(("error", "fatal"))), "no output")
            raise CheckFailed(f"cherry-pick of {patch.file} failed ({first}); see `git status` "
                              f"in {tree}")
        state.current = patch.id
        state.save(tree)
        raise PortStopped(conflict_message(tree, state, patch))
    state.current = None
    state.save(tree)
    return state


def _sync_with_refs(tree: Path, state: PortState) -> None:
    """After a killed process, the branch says which patches made it: trust git over the file."""
    branch_b = worktree.branch_name(state.framework, state.to_tag)
    fmt = f"%(trailers:key={series_mod.PATCH_ID_TRAILER},valueonly,separator=%x2C)"
    done = set(git.out(["log", f"--format={fmt}", f"{state.to_commit}..{branch_b}"],
                       tree).split())
    for patch in state.patches:
        if patch.id in done and patch.status == "pending":
            patch.status = "picked"
    git_dir = Path(git.out(["rev-parse", "--absolute-git-dir"], tree))
    for stale_lock in [*git_dir.glob("*.lock"), *(git_dir / "refs").rglob("*.lock")]:
        # The port holds its own lock, so no git command of ours runs here now: these are what
        # a killed git left behind.
        if stale_lock.name != "lmsforge-port.lock":
            stale_lock.unlink()
    picking = git_dir / "CHERRY_PICK_HEAD"
    if not picking.is_file() and state.current is None and git.is_dirty(tree):
        # A cherry-pick killed before it recorded itself: its half-written files are ours to
        # drop (the port's work tree holds nothing else; committed patches stay on the branch).
        git.run(["reset", "--quiet", "--hard", "HEAD"], tree)
    if picking.is_file() and state.current is None:
        # Killed inside a cherry-pick: finish it, or stop at its conflict as if it just happened.
        commit = picking.read_text().strip()
        patch = next((p for p in state.patches if p.commit_on_a == commit), None)
        if patch is None:
            raise UsageError(f"{tree} has a cherry-pick of {commit[:12]} in progress that is "
                             "not part of this port; finish or abort it first")
        if _conflicted_files(tree) and not _rerere_resolved(tree):
            state.current = patch.id
            state.save(tree)
            raise PortStopped(conflict_message(tree, state, patch))
        git.run(["cherry-pick", "--continue"], tree, env={**PORT_ENV, "GIT_EDITOR": "true"})
        patch.status = "picked"
        state.save(tree)
    elif (git_dir / "sequencer").is_dir() and not picking.is_file():
        git.run(["cherry-pick", "--quit"], tree, check=False)


def _conflicted_files(tree: Path) -> list[str]:
    return git.out(["diff", "--name-only", "--diff-filter=U"], tree).splitlines()


def _rerere_resolved(tree: Path) -> bool:
    """rerere (autoUpdate) staged a recorded resolution for every conflicted file."""
    if not (Path(git.out(["rev-parse", "--absolute-git-dir"], tree)) / "CHERRY_PICK_HEAD").exists():
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
        hunks = conflict_hunks(tree, path)
        where = ", ".join(f"lines {a}-{b}" for a, b in hunks) or "whole file"
        files.append(f"{path} ({where})")
    culprit = find_culprit(tree, state, patch)
    return (f"port stopped at {patch.file}: conflicts in {'; '.join(files)}; {culprit}; "
            f"resolve in {tree}, then `lmsforge port --continue --into {tree}` (or --skip "
            "--reason TEXT, or --abort)")


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

    def applies(commit: str) -> bool:
        with tempfile.TemporaryDirectory() as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            git.run(["read-tree", commit], tree, env=env)
            return git.run(["apply", "--check", "--cached"], tree, env=env, input=diff,
                           check=False).returncode == 0

    low, high = 0, len(commits) - 1
    if not commits or applies(commits[-1]):
        return "no single upstream commit breaks it (the conflict comes from earlier LMS patches)"
    while low < high:
        mid = (low + high) // 2
        if applies(commits[mid]):
            low = mid + 1
        else:
            high = mid
    culprit = commits[low]
    subject = git.out(["log", "-1", "--format=%s", culprit], tree)
    return f"first breaking upstream commit {culprit[:12]} ({subject})"


# --- user actions --------------------------------------------------------------------------------


def continue_(tree: Path, state: PortState) -> PortState:
    if state.current is not None:
        if git.in_progress_operation(tree):
            git.run(["add", "-u"], tree)
            if git.run(["diff", "--cached", "--check"], tree, check=False).returncode != 0 or \
                    _has_markers(tree):
                raise UsageError("conflict markers or whitespace errors remain (see `git diff "
                                 "--cached --check`); finish the resolution, then --continue")
            git.run(["cherry-pick", "--continue"], tree,
                    env={**PORT_ENV, "GIT_EDITOR": "true"})
        state.patch(state.current).status = "resolved"
        state.patch(state.current).note = "conflict resolved by hand (recorded for rerere)"
        state.current = None
        state.save(tree)
    return resume(tree, state)


def _has_markers(tree: Path) -> bool:
    staged = git.out(["diff", "--cached", "--name-only"], tree).splitlines()
    for path in staged:
        file = tree / path
        if file.is_file() and re.search(r"^(<<<<<<<|>>>>>>>) ", file.read_text(errors="replace"),
                                        re.M):
            return True
    return False


def skip(tree: Path, state: PortState, reason: str) -> PortState:
    if state.current is None:
        raise UsageError("nothing to skip: the port is not stopped at a patch")
    git.run(["cherry-pick", "--skip"], tree, check=False)
    if git.in_progress_operation(tree):
        git.run(["cherry-pick", "--abort"], tree, check=False)
    patch = state.patch(state.current)
    patch.status, patch.note = "skipped", reason
    state.current = None
    state.save(tree)
    return resume(tree, state)


def abort(tree: Path, state: PortState) -> None:
    if git.in_progress_operation(tree):
        git.run(["cherry-pick", "--abort"], tree, check=False)
    if state.created_folder:
        shutil.rmtree(tree)
    else:
        state_path(tree).unlink(missing_ok=True)


# --- finishing -----------------------------------------------------------------------------------


def save_resolutions(tree: Path, shared_rr_cache: Path) -> int:
    """Copy resolutions recorded in this port into the repository's shared cache."""
    local = Path(git.out(["rev-parse", "--absolute-git-dir"], tree)) / RR_CACHE
    added = 0
    if not local.is_dir():
        return 0
    for entry in sorted(local.iterdir()):
        if not (entry / "postimage").is_file():
            continue  # a conflict seen but never resolved
        target = shared_rr_cache / entry.name
        if not target.exists():
            target.mkdir(parents=True)
            for name in ("preimage", "postimage"):
                shutil.copyfile(entry / name, target / name)
            added += 1
    return added


def _commits_by_patch_id(tree: Path, base: str, branch: str) -> dict[str, str]:
    fmt = f"%H %(trailers:key={series_mod.PATCH_ID_TRAILER},valueonly,separator=%x2C)"
    commits = {}
    for line in git.out(["log", f"--format={fmt}", f"{base}..{branch}"], tree).splitlines():
        commit, _, patch_id = line.partition(" ")
        if patch_id.strip():
            commits[patch_id.strip()] = commit
    return commits


_RANGE_DIFF_HEAD = re.compile(r"^\d+:(\s+\S+ [!=] )\d+:")


def range_diff(tree: Path, state: PortState) -> str:
    """`git range-diff` of each patch against its port, paired by Lms-Patch-Id.

    A whole-range range-diff pairs commits by how alike their diffs are, so a patch whose
    resolution moved its hunks to other files (a hook folded into another file on tag B) shows
    up as one patch removed and an unrelated one added, with nothing to review. The trailer
    says which commits are the same patch, so each pair is compared on its own.
    """
    branch_b = worktree.branch_name(state.framework, state.to_tag)
    on_b = _commits_by_patch_id(tree, state.to_commit, branch_b)
    parts = []
    position_b = 0
    for position, patch in enumerate(state.patches, 1):
        commit_b = on_b.get(patch.id)
        if commit_b is None:
            subject = git.out(["log", "-1", "--format=%s", patch.commit_on_a], tree)
            parts.append(f"{position}:  {patch.commit_on_a[:8]} < -:  -------- {subject} "
                         f"({patch.status}: {patch.note})\n")
            continue
        position_b += 1
        proc = git.run(["range-diff", "--no-color", "--creation-factor=999",
                        f"{patch.commit_on_a}^..{patch.commit_on_a}",
                        f"{commit_b}^..{commit_b}"], tree, check=False)
        text = proc.stdout.decode(errors="replace")
        parts.append(_RANGE_DIFF_HEAD.sub(f"{position}:\\g<1>{position_b}:", text, count=1))
    return "".join(parts)


def write_report(path: Path, state: PortState, tree: Path, resolutions_saved: int) -> None:
    lines = [f"# Port of the {state.framework} LMS series from {state.from_tag} to "
             f"{state.to_tag}", "",
             f"- from: {state.from_tag} ({state.from_commit}), series hash "
             f"{state.from_series_hash}",
             f"- to: {state.to_tag} ({state.to_commit}, {state.to_identity.get('kind')} source)",
             f"- upstream history between the trees: "
             f"{'yes' if state.shared_history else 'no (archives)'}",
             f"- new resolutions saved to the shared rerere cache: {resolutions_saved}", "",
             "## Patches", "", "| patch | outcome | note |", "|---|---|---|"]
    for p in state.patches:
        lines.append(f"| {p.file} | {p.status} | {p.note} |")
    lines += ["", "## Risk table (what upstream changed in each patch's files)", "",
              "| patch | upstream files | lines changed A→B | upstream commits | risk |",
              "|---|---|---|---|---|"]
    for row in state.risk:
        commits = row["upstream_commits"] if row["upstream_commits"] is not None else "n/a"
        lines.append(f"| {row['patch']} | {row['upstream_files']} | "
                     f"{row['upstream_lines_changed']} | {commits} | {row['risk']} |")
    lines += ["", "## Range diff (each patch on A against its port on B, paired by "
              "`Lms-Patch-Id`)", "", "```",
              range_diff(tree, state).rstrip(), "```", ""]
    path.write_text("\n".join(lines))


def finish(tree: Path, state: PortState, patches_dir: Path, shared_rr_cache: Path) -> Path:
    folder = series_mod.find(patches_dir, state.framework, state.to_tag)
    if (folder / series_mod.MANIFEST).is_file():
        raise UsageError(f"{folder} already holds a series; move it away or remove it, then "
                         "`lmsforge port --continue`")
    branch_b = worktree.branch_name(state.framework, state.to_tag)
    folder.parent.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{state.to_tag}.port-"))
    identity = state.to_identity
    try:
        entries = export.format_patches(tree, state.to_commit, branch_b, staged)
        export.round_trip(tree, state.to_commit, branch_b, [staged / e.file for e in entries])
        new = series_mod.Series(
            folder=staged, framework=state.framework, tag=state.to_tag, base=state.to_commit,
            upstream={k: identity[k] for k in ("kind", "archive", "sha256", "upstream_commit",
                                               "commit", "tree") if identity.get(k)},
            ported_from={"tag": state.from_tag, "series_hash": state.from_series_hash,
                         "base": state.from_series_base},
            patches=entries,
            skipped=[{"id": p.id, "reason": p.note} for p in state.patches
                     if p.status == "skipped"] +
                    [{"id": p.id, "reason": f"dropped: {p.note}"} for p in state.patches
                     if p.status == "dropped"])
        series_mod.write_manifest(new)
        shared_rr_cache.mkdir(parents=True, exist_ok=True)
        saved = save_resolutions(tree, shared_rr_cache)
        write_report(staged / "PORT-REPORT.md", state, tree, saved)
        if folder.exists():
            _move_into(staged, folder)
        else:
            staged.rename(folder)
    finally:
        shutil.rmtree(staged, ignore_errors=True)
    # Keep the work tree meta in step: it now holds the series for tag B.
    meta = worktree.WorkTree(tree, state.framework, state.to_tag, state.to_commit, identity)
    worktree._write_meta(meta)
    state_path(tree).unlink(missing_ok=True)
    return folder


def _move_into(staged: Path, folder: Path) -> None:
    for item in staged.iterdir():
        shutil.move(str(item), folder / item.name)
