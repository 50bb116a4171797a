"""Where a port keeps its progress: a state file, a lock and a scratch folder in the work tree.

Everything lives in the port work tree's git folder, so a killed process leaves nothing outside
the tree, `--abort` removes every trace with the tree, and a port survives a reboot or a
handover. The state names its patches folder: the series and the resolutions go there, whatever
folder a later command would default to.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import filelock

from lmsforge import git
from lmsforge.errors import UsageError
from lmsforge.series.worktree import META_FILE
from lmsforge.upstream.tree import TreeIdentity

STATE_FILE = "lmsforge-port.json"
LOCK_FILE = "lmsforge-port.lock"
# In .git of a folder a start made, until the port ends: a start that takes over from one killed
# before it saved its state knows the folder is the port's, not the user's (engine.claim).
CREATED_MARK = "lmsforge-port-created"
SCRATCH = "lmsforge-port-tmp"
# A key of the work tree's meta (META_FILE) from a port's start to its finish: the tag of B.
PORT_TO = "port_in_progress_to"
STATE_FORMAT = 2
# Phases: `start` (work tree, series on A, drops), `replay` (cherry-picks onto B), `finish`
# (export, round trip, shared resolutions, report). A kill in any phase resumes with --continue.
PHASES = ("start", "replay", "finish")
DONE = ("picked", "resolved", "rerere", "guided")  # outcomes whose commit is on branch B


@dataclass
class PatchState:
    id: str
    file: str  # the file name in series A
    commit_on_a: str
    status: str = "pending"  # pending, picked, resolved, rerere, guided, dropped, skipped
    note: str = ""
    guided: list[str] = field(default_factory=list)  # files the previous port's work decided
    hand_seconds: float = 0.0  # from the stop at this patch to the command that went on
    commit_on_b: str = ""  # the commit the port landed it as: a later hand change shows


@dataclass
class FinishJournal:
    """What the finish phase put into the patches folder, so a resume or abort can undo it."""

    staging: str  # the series is written here, then renamed into its place
    folder_existed: bool  # the series folder existed (empty) before the port wrote it
    rr_cache_existed: bool  # the shared resolution cache folder existed before
    rr_added: list[str] = field(default_factory=list)  # resolution ids this port added
    series_hash: str = ""  # set once the staged series is complete: recognises a finished port
    # "device:inode" of the staged folder, which the rename keeps: the series folder is this
    # port's only while it is that folder. Another port to the same tag writes the same series
    # (the same hash) into a folder of its own, which this port must neither claim nor remove.
    placed: str = ""


@dataclass
class PortState:
    framework: str
    from_tag: str
    to_tag: str
    patches_dir: str
    identity_a: dict[str, object]
    identity_b: dict[str, object]
    from_series_hash: str
    from_series_base: str
    created_folder: bool  # False: --into existed (empty) and only its contents are ours
    phase: str = "start"
    format: int = STATE_FORMAT
    shared_history: bool = False
    patches: list[PatchState] = field(default_factory=list)
    risk: list[dict[str, object]] = field(default_factory=list)
    renamed: dict[str, list[str]] = field(default_factory=dict)  # patch id -> "old → new"
    seeded_resolutions: list[str] = field(default_factory=list)  # rr-cache ids from the repo
    current: str | None = None  # id of the patch the port stopped at, for the user
    stop_head: str | None = None  # HEAD when it stopped: proves what the user committed since
    in_flight: str | None = None  # id of the patch being picked when the state was saved
    in_flight_outcome: str = ""  # what that pick becomes once its commit is on the branch
    finish: FinishJournal | None = None
    # The stop (or interrupted pick) whose patch the user was last shown: by the stop line, by
    # --status, or by a refusal naming it. A kill can come after a stop is saved and before
    # its line is printed; --skip and --continue must not act on a stop nobody has seen.
    shown: str | None = None
    aborting: bool = False  # --abort began removing the port: only --abort may go on
    # --previous: the earlier port to the same tag that guides this one (guide.py): its
    # folder and series hash, where the series it was ported from is (commit and folder in the
    # patches folder's repository, "" for the series of A in the folder now), and the commits
    # of both on their lms-previous/ branches by patch id once materialised.
    previous: dict[str, object] | None = None
    # Wall time: of the port's own commands up to the last stop, and when it last stopped.
    tool_seconds: float = 0.0
    stopped_at: float = 0.0

    @property
    def from_commit(self) -> str:
        return str(self.identity_a["commit"])

    @property
    def to_commit(self) -> str:
        return str(self.identity_b["commit"])

    @property
    def series_folder(self) -> Path:
        return Path(self.patches_dir) / self.framework / self.to_tag

    @property
    def shared_rr_cache(self) -> Path:
        return Path(self.patches_dir) / self.framework / "rr-cache"

    def patch(self, patch_id: str) -> PatchState:
        return next(p for p in self.patches if p.id == patch_id)

    def save(self, tree: Path) -> None:
        """Write the state atomically (saved before and after every pick: keep it cheap)."""
        data = {**vars(self), "patches": [vars(p) for p in self.patches],
                "finish": vars(self.finish) if self.finish else None}
        path = git_dir(tree) / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(data, separators=(",", ":")) + "\n")
        tmp.replace(path)

    @classmethod
    def load(cls, tree: Path) -> "PortState":
        path = git_dir(tree) / STATE_FILE
        if not path.is_file():
            raise UsageError(no_port_message(tree))
        try:
            data = json.loads(path.read_text())
            if data.get("format") != STATE_FORMAT:
                raise ValueError(f"state format {data.get('format')}")
            data["patches"] = [PatchState(**p) for p in data["patches"]]
            if data.get("finish"):
                data["finish"] = FinishJournal(**data["finish"])
            return cls(**data)
        except (ValueError, TypeError, KeyError) as exc:
            raise UsageError(f"the port state {path} is unreadable ({exc}): it was written by "
                             "another lmsforge version or damaged; finish the port with that "
                             "version, or remove the work tree and start again") from None


_command_started: float | None = None


def command_started() -> None:
    """Called when a port command starts: its wall time counts as the tool's."""
    global _command_started
    _command_started = time.time()


def command_seconds() -> float:
    return time.time() - _command_started if _command_started is not None else 0.0


def stopped(state: PortState) -> None:
    """The port waits for the user from now on: the command's time was the tool's."""
    state.tool_seconds += command_seconds()
    state.stopped_at = time.time()


def went_on(state: PortState, patch: PatchState) -> None:
    """The user went on past PATCH: the time since the stop was spent by hand on it."""
    if state.stopped_at:
        patch.hand_seconds += max(0.0, time.time() - state.stopped_at)
        state.stopped_at = 0.0


def identity(data: dict[str, object]) -> TreeIdentity:
    fields = {k: v for k, v in data.items() if k != "complete"}
    fields["lacks"] = tuple(fields.get("lacks") or ())  # type: ignore[arg-type]
    return TreeIdentity(**fields)  # type: ignore[arg-type]


def git_dir(tree: Path) -> Path:
    # A port work tree is always a repository of its own made by the port: its git folder is
    # .git, and asking git would fail while a restart rebuilds it.
    return tree / ".git"


def exists(tree: Path) -> bool:
    return (git_dir(tree) / STATE_FILE).is_file()


def remove(tree: Path) -> None:
    (git_dir(tree) / STATE_FILE).unlink(missing_ok=True)


def no_port_message(tree: Path) -> str:
    stranded = stranded_port(tree)
    if stranded is not None:
        return stranded
    if (git_dir(tree) / "lmsforge.json").is_file():
        return (f"no port in progress in {tree}: it is the work tree of a finished port (or of "
                "`lmsforge apply`); `lmsforge status --tree DIR` says what it holds")
    return (f"no port in progress in {tree}; start one with `lmsforge port --framework F "
            f"--from A --to B --into {shlex.quote(str(tree))}`")


def stranded_port(tree: Path) -> str | None:
    """What to say of a tree holding an unfinished port whose state file is gone, else None.

    The start marks the work tree's meta with the tag it ports to (`mark_unfinished`); the
    finish rewrites that meta for B before it removes the state. A marked meta without a state
    file is a port that can neither resume nor undo itself, not a finished one.
    """
    gd = git_dir(tree)
    if (gd / STATE_FILE).exists():
        return None
    try:
        meta = json.loads((gd / META_FILE).read_text())
        framework, tag, to_tag = str(meta["framework"]), str(meta["tag"]), str(meta[PORT_TO])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    quoted = shlex.quote(str(tree))
    return (f"{tree} holds an unfinished port of {framework} {tag} to {to_tag} whose state file "
            f"(.git/{STATE_FILE}) is gone, so it can neither go on nor be aborted; keep what you "
            f"need from its branches (`git -C {quoted} branch`), remove the folder (`rm -rf "
            f"{quoted}`) and the hidden {framework}/.{to_tag}.port-{staging_owner(tree)} "
            "folder of the patches folder if it is there, then start the port again")


def mark_unfinished(tree: Path, to_tag: str) -> None:
    """Mark the work tree's meta (written for tag A) as the tree of a port to TO_TAG."""
    meta = git_dir(tree) / META_FILE
    data = json.loads(meta.read_text())
    data[PORT_TO] = to_tag
    meta.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def staging_owner(tree: Path) -> str:
    """The suffix of the finish's staging folder: two ports to one tag never share one."""
    return hashlib.sha256(str(tree).encode()).hexdigest()[:12]


def locate(into: Path | None, action: str) -> Path:
    """The port work tree that --into (or the current folder) names, as an absolute path."""
    if into is None:
        if action == "abort":
            raise UsageError("--abort needs --into DIR, the port work tree it removes")
        top = git.toplevel(Path.cwd()) if git.is_repo(Path.cwd()) else None
        if top is None:
            raise UsageError(f"--{action} needs --into DIR, the port's work tree (or run it "
                             "inside that tree)")
        return top.resolve()
    path = into.absolute()
    if (path / ".git").is_dir():
        return path.resolve()  # PortState.load says whether a port is in progress there
    if not path.exists():
        raise UsageError(f"no port in progress in {path}: the folder does not exist; start one "
                         f"with `lmsforge port --framework F --from A --to B --into "
                         f"{shlex.quote(str(path))}`")
    if not path.is_dir():
        raise UsageError(f"{path} is a file, not a port work tree; pass the folder given to "
                         "--into when the port started")
    top = git.toplevel(path) if git.is_repo(path) else None
    if top is None:
        raise UsageError(f"{path} is not a port work tree (no git repository in it); pass the "
                         "folder given to --into when the port started")
    if top.resolve() != path.resolve():
        raise UsageError(f"{path} is inside the work tree {top}; pass --into {top}")
    return path.resolve()


@contextmanager
def locked(tree: Path) -> Iterator[None]:
    """One lmsforge process per port work tree; the lock file goes once the port is over."""
    lock = git_dir(tree) / LOCK_FILE
    try:
        with filelock.FileLock(str(lock), timeout=0):
            try:
                yield
            finally:
                if lock.parent.is_dir() and not (lock.parent / STATE_FILE).exists():
                    lock.unlink(missing_ok=True)  # still held: no other port can be waiting
    except filelock.Timeout:
        raise UsageError(f"another lmsforge port is running in {tree}; wait for it") from None


def note_shown(tree: Path, patch_id: str) -> None:
    """--status showed the stop at PATCH_ID: note it, unless a port command runs now (a
    status never waits, and the stop line of that command will say it again)."""
    try:
        with locked(tree):
            state = PortState.load(tree)
            if state.shown != patch_id and not state.aborting:
                state.shown = patch_id
                state.save(tree)
    except UsageError:
        pass


def scratch(tree: Path) -> Path:
    """A folder for temporary files inside the tree's git folder (never in $TMPDIR)."""
    path = git_dir(tree) / SCRATCH
    path.mkdir(exist_ok=True)
    return path


def clear_scratch(tree: Path) -> None:
    """Drop what a killed process left in the scratch folder, round-trip work trees included."""
    shutil.rmtree(git_dir(tree) / SCRATCH, ignore_errors=True)
    _unlock_scratch_worktrees(tree)
    git.run(["worktree", "prune"], tree, check=False)


def _unlock_scratch_worktrees(tree: Path) -> None:
    """`git worktree add` locks its entry ("initializing") until it is done, and `git worktree
    prune` keeps locked entries: a kill inside it would refuse every later add of that path.
    Only the port adds work trees in its scratch folder, and it holds the port lock."""
    inside = os.path.realpath(git_dir(tree) / SCRATCH) + os.sep  # git writes real paths
    for entry in (git_dir(tree) / "worktrees").glob("*"):
        try:
            checkout = os.path.realpath((entry / "gitdir").read_text().strip())
        except OSError:
            continue
        if checkout.startswith(inside):
            (entry / "locked").unlink(missing_ok=True)


def command(state: PortState, tree: Path, action: str) -> str:
    """A command line for the next step that works pasted as is, from any folder."""
    extra = " --reason 'WHY'" if action == "skip" else ""
    return (f"lmsforge --patches-dir {shlex.quote(state.patches_dir)} port --{action}{extra} "
            f"--into {shlex.quote(str(tree))}")


def summary(tree: Path) -> str | None:
    """One line on the port in progress in TREE (for `lmsforge status`), or None."""
    if not exists(tree):
        return stranded_port(tree)
    try:
        state = PortState.load(tree)
    except UsageError as exc:
        return str(exc)
    where = {"start": "starting", "replay": "replaying", "finish": "writing the series"}
    stopped = f", stopped at {state.patch(state.current).file}" if state.current else ""
    branch = (f"; the work is on branch lms/{state.framework}/{state.to_tag}"
              if state.phase != "start" else "")
    return (f"{state.framework} {state.from_tag} → {state.to_tag} in progress "
            f"({where.get(state.phase, state.phase)}{stopped}{branch}); "
            f"`{command(state, tree, 'status')}` says more")
