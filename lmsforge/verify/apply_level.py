"""Level L0, `apply`: the series applies exactly and round-trips.

1. `git am` without `-3` on the tag tree (one commit per patch);
2. `git diff --check` of the whole series is clean;
3. exporting the branch again reproduces the committed files byte for byte;
4. `git am` of the re-exported files gives the branch's tree hash.
"""

from __future__ import annotations

import dataclasses
import shutil
import tempfile
import time
from pathlib import Path

from lmsforge import git
from lmsforge.errors import LmsforgeError
from lmsforge.series import export, manifest as series_mod, worktree
from lmsforge.series.manifest import ORDER_FILE, Series
from lmsforge.upstream.tree import TreeIdentity
from lmsforge.verify.levels import FAIL, PASS, LevelResult


def prepare_tree(path: Path, identity: TreeIdentity, series: Series) -> worktree.WorkTree:
    """A verification work tree at PATH (owned by the cache): reused, reset, series re-applied.

    Reusing the folder keeps unchanged files' timestamps, so incremental builds of the higher
    levels recompile only what the series touches.
    """
    meta = worktree.read_meta(path)
    if meta is None or meta.base != identity.commit:
        shutil.rmtree(path, ignore_errors=True)
        path.parent.mkdir(parents=True, exist_ok=True)
        return worktree.create(path, identity, series.paths())
    if git.in_progress_operation(path):
        git.run(["am", "--abort"], path, check=False)
    git.run(["checkout", "--quiet", "--force", "--detach", identity.commit], path)
    git.run(["clean", "--quiet", "-fdx"], path)
    git.run(["branch", "--quiet", "-D", meta.branch], path, check=False)
    git.run(["checkout", "--quiet", "-b", meta.branch], path)
    worktree.am(path, series.paths())
    return meta


def rebase_surface(repo: Path, base: str, head: str = "HEAD") -> dict[str, int]:
    """Lines our series changes in files upstream already has, against lines in new files."""
    status = {}
    for line in git.out(["diff", "--name-status", "--no-renames", base, head], repo).splitlines():
        kind, path = line.split("\t", 1)
        status[path] = kind
    upstream_added = upstream_removed = new_lines = upstream_files = new_files = 0
    for line in git.out(["diff", "--numstat", "--no-renames", base, head], repo).splitlines():
        added, removed, path = line.split("\t", 2)
        a = int(added) if added != "-" else 0
        r = int(removed) if removed != "-" else 0
        if status.get(path) == "A":
            new_files += 1
            new_lines += a
        else:
            upstream_files += 1
            upstream_added += a
            upstream_removed += r
    return {"upstream_files": upstream_files, "upstream_lines": upstream_added + upstream_removed,
            "upstream_added": upstream_added, "upstream_removed": upstream_removed,
            "new_files": new_files, "new_lines": new_lines}


def run(tree_path: Path, identity: TreeIdentity, series: Series) -> LevelResult:
    start = time.monotonic()
    try:
        facts = _check(tree_path, identity, series)
    except LmsforgeError as exc:
        return LevelResult("apply", FAIL, time.monotonic() - start, str(exc))
    detail = (f"{len(series.patches)} patches apply exactly and round-trip; rebase surface "
              f"{facts['upstream_lines']} lines in {facts['upstream_files']} upstream files, "
              f"{facts['new_lines']} lines in {facts['new_files']} new files")
    return LevelResult("apply", PASS, time.monotonic() - start, detail, facts)


def _check(tree_path: Path, identity: TreeIdentity, series: Series) -> dict[str, object]:
    tree = prepare_tree(tree_path, identity, series)
    # cr-at-eol: the CR of a CRLF file's line is its line end, not trailing whitespace (a
    # series may edit a CRLF file: `apply` keeps the CRs, see series/worktree.py).
    check = git.run(["-c", "core.whitespace=cr-at-eol", "diff", "--check", tree.base, "HEAD"],
                    tree_path, check=False)
    if check.returncode != 0:
        first = check.stdout.decode(errors="replace").strip().splitlines()[:1]
        raise LmsforgeError(f"`git diff --check` finds whitespace errors: {first[0] if first else ''}"
                            "; fix them on the series branch and re-export")
    with tempfile.TemporaryDirectory(prefix="lmsforge-reexport-") as tmp:
        out = Path(tmp)
        entries = export.format_patches(tree_path, tree.base, tree.branch, out)
        names = [e.file for e in entries]
        if tree.base != series.base:
            # Verified on another source of the same tag (git instead of archive, say): only
            # the `base-commit:` footer may differ.
            for name in names:
                staged = out / name
                staged.write_text(staged.read_text().replace(
                    f"base-commit: {tree.base}", f"base-commit: {series.base}"))
        if names != [p.file for p in series.patches]:
            raise LmsforgeError(f"re-export names the patches {names}, the series has "
                                f"{[p.file for p in series.patches]}")
        differ = export.same_files(out, series.folder, names)
        if differ:
            raise LmsforgeError(f"re-exporting the branch changes {', '.join(differ)}: the "
                                "committed files are not what `lmsforge export` writes")
        for entry, committed in zip(entries, series.patches):
            entry = dataclasses.replace(entry, patch_id=series_mod.patch_id(out / entry.file))
            if entry != committed:
                raise LmsforgeError(f"series.yaml entry for {committed.file} differs from the "
                                    "re-export; re-export the series")
        order = (series.folder / ORDER_FILE).read_text()
        if order != "".join(f"{n}\n" for n in names):
            raise LmsforgeError(f"the `{ORDER_FILE}` file is not what export writes")
        export.round_trip(tree_path, tree.base, "HEAD", [out / n for n in names])
    facts: dict[str, object] = dict(rebase_surface(tree_path, tree.base))
    facts["patches"] = len(series.patches)
    facts["tree"] = git.tree_of(tree_path, "HEAD")
    return facts
