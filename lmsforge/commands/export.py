"""`lmsforge export`: write the branch back to patches/<framework>/<tag>/, check the round trip."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from lmsforge import git, ui
from lmsforge.errors import UsageError
from lmsforge.options import Options
from lmsforge.series import catalogue, export, manifest as series_mod, worktree


def run(opts: Options, framework: str, tag: str, tree_path: Path | None) -> int:
    opts.require_writable_patches_dir("export")
    sources = catalogue.sources_for(opts.patches_dir, framework)
    catalogue.check_tag(opts.patches_dir, sources, tag)
    path = (tree_path or Path.cwd() / f"lms-{framework}-{tag}").absolute()
    tree = worktree.read_meta(path)
    if tree is None:
        raise UsageError(f"{path} is not a work tree made by `lmsforge apply`; pass --tree DIR")
    if (tree.framework, tree.tag) != (framework, tag):
        raise UsageError(f"{path} holds {tree.framework} {tree.tag}, not {framework} {tag}")
    operation = git.in_progress_operation(path)
    if operation:
        raise UsageError(f"{path} has a {operation} in progress; finish or abort it, then export")
    changes = git.uncommitted_changes(path)
    if changes:
        raise UsageError(
            f"{path} has uncommitted changes ({changes}) that export would leave out: commit "
            f"them into the series (`git commit --fixup <commit>` then `git rebase -i "
            f"--autosquash {tag}`) or stash them (`git stash -u`), then export again")
    folder = series_mod.find(opts.patches_dir, framework, tag)
    previous = _previous_manifest(folder)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent, prefix=f".{tag}.export-") as tmp:
        staged = Path(tmp)
        entries = export.format_patches(path, tree.base, tree.branch, staged)
        export.round_trip(path, tree.base, tree.branch, [staged / e.file for e in entries])
        new = series_mod.Series(
            folder=staged, framework=framework, tag=tag, base=tree.base,
            upstream=_identity_record(tree.identity),
            ported_from=previous.ported_from if previous else None, patches=entries,
            skipped=previous.skipped if previous else [])
        series_mod.write_manifest(new)
        names = [e.file for e in entries] + [series_mod.ORDER_FILE, series_mod.MANIFEST]
        changed = export.same_files(staged, folder, names) if folder.is_dir() else names
        stale = sorted(p.name for p in folder.glob("*.patch")
                       if p.name not in names) if folder.is_dir() else []
        if not changed and not stale:
            ui.out.print(f"{folder}: unchanged ({len(entries)} patches, byte-identical)")
            return 0
        folder.mkdir(exist_ok=True)
        for name in names:
            shutil.copyfile(staged / name, folder / name)
        for name in stale:
            (folder / name).unlink()
    ui.out.print(f"{folder}: wrote {len(entries)} patches ({len(changed)} files changed, "
                 f"{len(stale)} removed); round trip verified")
    return 0


def _previous_manifest(folder: Path) -> series_mod.Series | None:
    if not (folder / series_mod.MANIFEST).is_file():
        return None
    try:
        return series_mod.load(folder, check_patch_ids=False)
    except UsageError:
        return None


def _identity_record(identity: dict[str, object]) -> dict[str, object]:
    keys = ("kind", "archive", "sha256", "upstream_commit", "commit", "tree")
    return {k: identity[k] for k in keys if identity.get(k)}
