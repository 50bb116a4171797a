"""Porting again: carry what the previous port of a series to the same tag did (`--previous`).

A series on tag B that an earlier `lmsforge port` made holds everything its maintainer did to fit
the series to B: conflict resolutions, changes folded into other files where B lacks a file (git's
rerere records neither those nor edits outside conflict hunks), and fixups for B's compiler and
APIs made after the port. When the series on A changes and is ported again, none of that should
be done twice. The previous port is materialised on branch ``lms-previous/F/B``, and the series of
A it was made from (found in the git history of the patches folder by its hash) on
``lms-previous/F/A``.

Per patch P that the previous port carried, and per file F that P changes on A now or changed in
the previous port, with the contents (or absence) of F:

- ``H``: on branch B before the pick;
- ``nA0``/``nA1``: before and after P in the series of A now;
- ``pA0``/``pA1``: before and after P in the series the previous port was made from;
- ``pB0``/``pB1``: before and after P in the previous port,

the guide decides F's content after the pick:

1. P changes F on A as it did then (the same lines removed and added): the previous port's change
   to F is replayed on what B holds now, ``merge(base pB0, ours H, theirs pB1)``. A file B lacks
   stays deleted, a change folded into another file comes back, a post-port fixup stays.
2. Otherwise, when F on B and on A is as it was before P then: the previous port's F with what P
   on A changed since, ``merge(base pA1, ours pB1, theirs nA1)``.
3. Otherwise nothing: the plain cherry-pick of P decides, as in a port without ``--previous``.

A merge that conflicts becomes a conflict of the pick, with markers, the three versions in the
index (``git checkout --ours/--theirs`` work) and rerere recording its resolution.
"""

from __future__ import annotations

import re
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

import yaml

from lmsforge import git
from lmsforge.errors import UsageError
from lmsforge.port.state import PortState, clear_scratch, git_dir, scratch
from lmsforge.series import manifest as series_mod, worktree

BRANCH_PREFIX = "lms-previous"
_SAFE_NAME = re.compile(r"(?!\.\.?$)[A-Za-z0-9._-]+")
_HUNK_HEAD = re.compile(rb"^@@ [^@]* @@.*$", re.M)


# --- what the previous port was ------------------------------------------------------------------


class Previous(NamedTuple):
    folder: Path  # the previous port's series of tag B, moved aside
    series_hash: str
    from_series_hash: str  # the series of tag A it was ported from
    from_commit: str  # the commit of the patches folder's repository that holds that series
    from_folder: str  # ... and its folder there, relative to the repository's top


def check_previous(folder: Path, patches_dir: Path, framework: str, from_tag: str, to_tag: str,
                   to_commit: str, from_series: series_mod.Series) -> Previous:
    """The previous port in FOLDER, and where the series of FROM_TAG it was made from is."""
    if folder.exists() and not folder.is_dir():
        raise UsageError(f"--previous {folder} is a file; pass the folder of the earlier series "
                         f"of {framework} {to_tag}")
    if not (folder / series_mod.MANIFEST).is_file():
        raise UsageError(f"--previous {folder} holds no series ({series_mod.MANIFEST} missing); "
                         f"pass the folder of the earlier series of {framework} {to_tag}")
    with tempfile.TemporaryDirectory() as tmp:
        series = load_moved(folder, Path(tmp))
        series_hash = series.content_hash()
    if series.framework != framework or series.tag != to_tag:
        raise UsageError(f"--previous {folder} is the series of {series.framework} {series.tag}, "
                         f"not of {framework} {to_tag}; pass the earlier series of {to_tag}")
    if series.base != to_commit:
        raise UsageError(f"--previous {folder} was exported on {series.base[:12]}, but "
                         f"{to_tag} is {to_commit[:12]}; it cannot guide a port to this tree")
    origin = series.ported_from or {}
    if origin.get("tag") != from_tag or not origin.get("series_hash"):
        made = (f"ported from {origin.get('tag')}" if origin.get("tag") else
                "not made by `lmsforge port`")
        raise UsageError(f"--previous {folder} was {made}; only a series ported from "
                         f"{from_tag} can guide this port")
    commit, relative = find_in_history(patches_dir, framework, from_tag,
                                       str(origin["series_hash"]), from_series)
    return Previous(folder, series_hash, str(origin["series_hash"]), commit, relative)


def load_moved(folder: Path, scratch_dir: Path) -> series_mod.Series:
    """A series folder moved aside under any name, read from a copy at <framework>/<tag>."""
    try:
        data = yaml.safe_load((folder / series_mod.MANIFEST).read_text())
    except (OSError, yaml.YAMLError):
        data = None
    names = [str(data.get(key)) for key in ("framework", "tag")] if isinstance(data, dict) \
        else []
    if len(names) != 2 or not all(_SAFE_NAME.fullmatch(name) for name in names):
        raise UsageError(f"{folder / series_mod.MANIFEST} names no framework and tag; pass the "
                         "folder of a series exported by lmsforge")
    copy = scratch_dir / names[0] / names[1]
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(folder, copy)
    try:
        return series_mod.load(copy)
    except series_mod.SeriesProblems as exc:
        # The copy is a temporary folder the user never named (and gone by the time they read
        # this): the problems are the folder's they gave.
        raise series_mod.SeriesProblems(folder, exc.problems) from None


def find_in_history(patches_dir: Path, framework: str, tag: str, wanted_hash: str,
                    current: series_mod.Series) -> tuple[str, str]:
    """The commit of the patches folder's repository whose series of TAG has WANTED_HASH.

    ("", "") when the series in the folder now is that one.
    """
    if current.content_hash() == wanted_hash:
        return "", ""
    top = git.toplevel(patches_dir) if git.is_repo(patches_dir) else None
    if top is None:
        raise UsageError(f"the series of {framework} {tag} that --previous was ported from "
                         f"(hash {wanted_hash[:12]}) is not in {patches_dir}, which has no git "
                         "history to find it in; port without --previous")
    relative = (patches_dir.resolve() / framework / tag).relative_to(top.resolve()).as_posix()
    log = git.run(["log", "--format=%H", "--", f"{relative}/{series_mod.MANIFEST}"], top,
                  check=False)
    for commit in log.stdout.decode().split():
        shown = git.run(["show", f"{commit}:{relative}/{series_mod.MANIFEST}"], top, check=False)
        try:
            data = yaml.safe_load(shown.stdout) if shown.returncode == 0 else None
        except yaml.YAMLError:
            continue
        if isinstance(data, dict) and data.get("series_hash") == wanted_hash:
            return commit, relative
    raise UsageError(f"the series of {framework} {tag} that --previous was ported from (hash "
                     f"{wanted_hash[:12]}) is in no commit of {top}'s history of {relative}; "
                     "port without --previous")


def previous_branch(framework: str, tag: str) -> str:
    return f"{BRANCH_PREFIX}/{framework}/{tag}"


def materialise(tree: Path, state: PortState, patches_dir: Path) -> None:
    """Put both series of the previous port on their branches; record their commits per patch."""
    info = state.previous
    assert info is not None
    folder_b = Path(str(info["folder"]))
    series_b = load_moved(folder_b, scratch(tree) / "previous-to")
    if series_b.content_hash() != info["series_hash"]:
        raise UsageError(f"the series in --previous {folder_b} changed since this port began; "
                         "start the port again")
    if info["from_commit"]:
        series_a = _extract(tree, patches_dir, str(info["from_commit"]),
                            str(info["from_folder"]), str(info["from_series_hash"]))
    else:
        series_a = series_mod.load(patches_dir / state.framework / state.from_tag,
                                   check_patch_ids=False)
    commits = {}
    for tag, base, series in ((state.from_tag, state.from_commit, series_a),
                              (state.to_tag, state.to_commit, series_b)):
        branch = previous_branch(state.framework, tag)
        git.run(["checkout", "--quiet", "-B", branch, base], tree)
        worktree.am(tree, series.paths())
        commits[tag] = _commits_by_patch_id(tree, base, branch)
    clear_scratch(tree)
    info["commits_from"], info["commits_to"] = commits[state.from_tag], commits[state.to_tag]


def _extract(tree: Path, patches_dir: Path, commit: str, relative: str,
             wanted_hash: str) -> series_mod.Series:
    top = git.toplevel(patches_dir)
    assert top is not None
    target = scratch(tree) / "previous-from" / Path(relative).parent.name / Path(relative).name
    target.mkdir(parents=True, exist_ok=True)
    names = git.out(["ls-tree", "--name-only", f"{commit}:{relative}"], top).splitlines()
    for name in names:
        blob = git.run(["show", f"{commit}:{relative}/{name}"], top, check=False)
        if blob.returncode == 0:
            (target / name).write_bytes(blob.stdout)
    series = series_mod.load(target, check_patch_ids=False)
    if series.content_hash() != wanted_hash:
        raise UsageError(f"the series in commit {commit[:12]} of {top} does not hash to "
                         f"{wanted_hash[:12]}; port without --previous")
    return series


def _commits_by_patch_id(tree: Path, base: str, branch: str) -> dict[str, str]:
    fmt = f"%H %(trailers:key={series_mod.PATCH_ID_TRAILER},valueonly,separator=%x2C)"
    commits = {}
    for line in git.out(["log", "--reverse", f"--format={fmt}", f"{base}..{branch}"],
                        tree).splitlines():
        commit, _, patch_id = line.partition(" ")
        if patch_id.strip():
            commits[patch_id.strip()] = commit
    return commits


# --- what the guide does to one pick -------------------------------------------------------------


@dataclass(frozen=True)
class Blob:
    oid: str
    mode: str


@dataclass(frozen=True)
class Decision:
    path: str
    rule: str  # "replayed" (rule 1) or "carried" (rule 2)
    content: bytes | None  # None: the file is deleted
    mode: str
    conflicts: int
    stages: tuple[Blob | None, Blob | None, Blob | None]  # base, ours, theirs (for conflicts)


def commits_for(state: PortState, patch_id: str) -> tuple[str, str] | None:
    """(commit on the previous A branch, commit on the previous B branch) of PATCH_ID."""
    info = state.previous
    if not info:
        return None
    on_a = dict(info.get("commits_from") or {}).get(patch_id)
    on_b = dict(info.get("commits_to") or {}).get(patch_id)
    return (on_a, on_b) if on_a and on_b else None


def plan(tree: Path, state: PortState, patch_commit: str, previous: tuple[str, str],
         head: str) -> list[Decision]:
    """What the guide writes for each file after the plain pick of PATCH_COMMIT onto HEAD."""
    prev_a, prev_b = previous
    paths = sorted(set(_changed(tree, patch_commit)) | set(_changed(tree, prev_b)))
    revisions = {"H": head, "nA0": f"{patch_commit}^", "nA1": patch_commit,
                 "pA0": f"{prev_a}^", "pA1": prev_a, "pB0": f"{prev_b}^", "pB1": prev_b}
    blobs = {name: _blobs(tree, rev, paths) for name, rev in revisions.items()}
    decisions = []
    for path in paths:
        v = {name: blobs[name].get(path) for name in revisions}
        if _same_change(tree, v["nA0"], v["nA1"], v["pA0"], v["pA1"]):
            decision = _merge(tree, path, "replayed", v["pB0"], v["H"], v["pB1"],
                              ("now on " + state.to_tag, "before the previous port",
                               "previous port"))
        elif v["H"] == v["pB0"] and v["nA0"] == v["pA0"]:
            decision = _merge(tree, path, "carried", v["pA1"], v["pB1"], v["nA1"],
                              ("previous port", f"{state.from_tag} series then",
                               f"{state.from_tag} series now"))
        else:
            decision = None
        if decision is not None:
            decisions.append(decision)
    return decisions


def _changed(tree: Path, commit: str) -> list[str]:
    out = git.out(["diff-tree", "--no-commit-id", "--name-only", "-r", "-z", "--no-renames",
                   f"{commit}^", commit], tree)
    return [p for p in out.split("\0") if p]


def _blobs(tree: Path, rev: str, paths: list[str]) -> dict[str, Blob]:
    if not paths:
        return {}
    out = git.out(["ls-tree", "-z", "--full-tree", rev, "--", *paths], tree)
    found = {}
    for entry in filter(None, out.split("\0")):
        meta, _, path = entry.partition("\t")
        mode, kind, oid = meta.split()
        if kind == "blob":
            found[path] = Blob(oid, mode)
    return found


def _same_change(tree: Path, new_0: Blob | None, new_1: Blob | None, old_0: Blob | None,
                 old_1: Blob | None) -> bool:
    """Whether new_0 → new_1 removes and adds the same lines as old_0 → old_1.

    Compared without context and line numbers: what earlier patches changed around it does not
    make it another change. Modes are not compared.
    """
    oids = [blob.oid if blob else None for blob in (new_0, new_1, old_0, old_1)]
    if oids[:2] == oids[2:]:
        return True
    if (new_0 is None) != (old_0 is None) or (new_1 is None) != (old_1 is None):
        return False
    if new_0 is None or new_1 is None:  # a file added (or deleted) both times: same content?
        return oids[0] == oids[2] and oids[1] == oids[3]
    assert old_0 is not None and old_1 is not None
    return _bare_diff(tree, new_0, new_1) == _bare_diff(tree, old_0, old_1)


def _bare_diff(tree: Path, before: Blob, after: Blob) -> bytes:
    diff = git.run(["diff", "--no-color", "--no-ext-diff", "-U0", before.oid, after.oid],
                   tree).stdout
    start = diff.find(b"\n@@")
    return _HUNK_HEAD.sub(b"@@", diff[start + 1:]) if start >= 0 else b""


def _merge(tree: Path, path: str, rule: str, base: Blob | None, ours: Blob | None,
           theirs: Blob | None, labels: tuple[str, str, str]) -> Decision | None:
    """Three-way merge of one file, where a missing version is a version too."""
    if base == theirs or base == ours or ours == theirs:
        result = ours if base == theirs else theirs
        return Decision(path, rule, _read(tree, result) if result else None,
                        result.mode if result else "100644", 0, (None, None, None))
    if base is None or ours is None or theirs is None:
        return None  # a deletion against a change: only the maintainer can say
    work = scratch(tree) / "guide"
    work.mkdir(exist_ok=True)
    files = []
    for name, blob in (("ours", ours), ("base", base), ("theirs", theirs)):
        file = work / name
        file.write_bytes(_read(tree, blob))
        files.append(str(file))
    proc = git.run(["merge-file", "-p", "-L", labels[0], "-L", labels[1], "-L", labels[2],
                    *files], tree, check=False)
    if proc.returncode > 127:
        raise UsageError(f"git merge-file failed on {path}: "
                         f"{proc.stderr.decode(errors='replace').strip()}")
    return Decision(path, rule, proc.stdout, ours.mode, proc.returncode, (base, ours, theirs))


def _read(tree: Path, blob: Blob) -> bytes:
    return git.run(["cat-file", "blob", blob.oid], tree).stdout


def apply(tree: Path, decisions: list[Decision]) -> list[str]:
    """Write the decisions into the work tree and index; returns the files that changed."""
    changed = []
    for decision in decisions:
        file = tree / decision.path
        now = file.read_bytes() if file.is_file() else None
        unmerged = bool(git.out(["ls-files", "--unmerged", "--", decision.path], tree))
        if now == decision.content and not decision.conflicts and not unmerged:
            continue
        changed.append(decision.path)
        if decision.content is None:
            git.run(["rm", "--quiet", "--cached", "--ignore-unmatch", "--", decision.path], tree)
            file.unlink(missing_ok=True)
            continue
        file.parent.mkdir(parents=True, exist_ok=True)
        file.write_bytes(decision.content)
        if decision.mode == "100755":
            file.chmod(0o755)
        if not decision.conflicts:
            git.run(["add", "--", decision.path], tree)
            continue
        entries = [f"0 {'0' * 40}\t{decision.path}"]
        for stage, blob in enumerate(decision.stages, 1):
            if blob is not None:
                entries.append(f"{blob.mode} {blob.oid} {stage}\t{decision.path}")
        git.run(["update-index", "--index-info"], tree,
                input=("\n".join(entries) + "\n").encode())
    return changed


def forget_rerere_entries(tree: Path, paths: list[str]) -> None:
    """Let rerere see PATHS as new conflicts (MERGE_RR lists the conflicts it already saw)."""
    merge_rr = git_dir(tree) / "MERGE_RR"
    if not merge_rr.is_file():
        return
    entries = merge_rr.read_bytes().split(b"\0")
    kept = [e for e in entries if e and e.split(b"\t", 1)[-1].decode(errors="replace")
            not in paths]
    merge_rr.write_bytes(b"".join(e + b"\0" for e in kept))
