"""The finish phase of a port: the series into the patches folder, restartable and undoable.

The series is exported into a staging folder next to its place, round-trip checked, given its
manifest and PORT-REPORT.md, then renamed into place. A journal in the state says what this
port added to the patches folder, so a resumed finish starts over cleanly, a finish killed after
the rename is recognised as done, and --abort takes everything back out.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from lmsforge.errors import UsageError
from lmsforge.port import report as port_report
from lmsforge.port.state import (
    CREATED_MARK,
    LOCK_FILE,
    STATE_FILE,
    FinishJournal,
    PortState,
    clear_scratch,
    command,
    git_dir,
    scratch,
    staging_owner,
)
from lmsforge.series import export, manifest as series_mod, worktree


def finish(tree: Path, state: PortState) -> Path:
    """Export the series into the patches folder: restartable, and undone by --abort."""
    folder = state.series_folder
    journal = state.finish
    if journal is not None and is_ours(folder, journal):
        _finalize(tree, state)  # killed after the series was in place
        return folder
    if journal is None:
        if (folder / series_mod.MANIFEST).is_file() or \
                (folder.is_dir() and any(folder.iterdir())):
            raise UsageError(f"{folder} holds files already; move them away (or remove them), "
                             f"then `{command(state, tree, 'continue')}`")
        # Named after the work tree: two ports to the same tag never share a staging folder.
        owner = staging_owner(tree)
        journal = FinishJournal(staging=str(folder.parent / f".{state.to_tag}.port-{owner}"),
                                folder_existed=folder.is_dir(),
                                rr_cache_existed=state.shared_rr_cache.is_dir())
        state.finish = journal
        state.save(tree)
    staging = Path(journal.staging)
    if journal.series_hash or journal.placed:  # about to be remade: it names nothing any more
        journal.series_hash, journal.placed = "", ""
        state.save(tree)
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
    journal.placed = _folder_id(staging)
    state.save(tree)
    try:
        staging.rename(folder)  # atomic; replaces the folder when it existed empty
    except OSError as exc:
        if not folder.is_dir() or not any(folder.iterdir()):
            raise
        raise UsageError(f"{folder} was written meanwhile by something else, another port to "
                         f"{state.to_tag} perhaps; this port's series is in {staging}. Keep one: "
                         f"move {folder} away and `{command(state, tree, 'continue')}`, or "
                         f"`{command(state, tree, 'abort')}`") from exc
    _finalize(tree, state)
    return folder


def is_ours(folder: Path, journal: FinishJournal) -> bool:
    """Whether FOLDER is the series this port wrote: its staged folder, renamed into place, with
    the series it staged (the same content from another port does not count)."""
    return bool(journal.series_hash and journal.placed) and \
        _folder_id(folder) == journal.placed and holds_series(folder, journal.series_hash)


def _folder_id(folder: Path) -> str:
    try:
        found = folder.stat()
    except OSError:
        return ""
    return f"{found.st_dev}:{found.st_ino}"


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
    recorded = sorted(e.name for e in local.iterdir() if resolution_variants(e)
                      and e.name not in state.seeded_resolutions) if local.is_dir() else []
    to_add = [name for name in recorded
              if name in journal.rr_added or not (shared / name).exists()]
    journal.rr_added = sorted(set(journal.rr_added) | set(to_add))
    state.save(tree)
    for name in to_add:
        target = shared / name
        target.mkdir(parents=True, exist_ok=True)
        # Numbered from 0 in the shared cache: a conflict met again after a kill is recorded
        # as a new variant (preimage.1, postimage.1) next to the first preimage, which has no
        # resolution; the shared cache keeps resolutions only.
        for number, suffix in enumerate(resolution_variants(local / name)):
            for part in ("preimage", "postimage"):
                tmp = target / f".{part}.tmp"
                shutil.copyfile(local / name / f"{part}{suffix}", tmp)
                tmp.replace(target / f"{part}{f'.{number}' if number else ''}")
    return len(recorded)


def resolution_variants(entry: Path) -> list[str]:
    """The suffixes ("", ".1", …) of the variants of a rerere entry that hold a resolution: a
    preimage with its postimage. rerere records a conflict it meets again, once the entry's
    first preimage has no resolution, as a new variant of the same entry."""
    if not entry.is_dir():
        return []
    suffixes = sorted((m.group(1) for f in entry.iterdir()
                       if (m := _PREIMAGE.fullmatch(f.name))),
                      key=lambda suffix: int(suffix[1:] or 0))
    return [suffix for suffix in suffixes if (entry / f"postimage{suffix}").is_file()]


_PREIMAGE = re.compile(r"preimage((?:\.[1-9][0-9]*)?)")


def undo_finish(state: PortState) -> None:
    journal = state.finish
    assert journal is not None
    shutil.rmtree(journal.staging, ignore_errors=True)
    folder = state.series_folder
    if is_ours(folder, journal):
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
    # The state keeps whether the folder was the port's; the mark is not needed after it.
    (git_dir(tree) / CREATED_MARK).unlink(missing_ok=True)
    # The lock file goes before the state (still held: no other port waits on it), so a kill
    # in between leaves a state that a resume finishes, never a stray lock file.
    (git_dir(tree) / LOCK_FILE).unlink(missing_ok=True)
    (git_dir(tree) / STATE_FILE).unlink(missing_ok=True)
