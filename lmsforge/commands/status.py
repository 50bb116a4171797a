"""`lmsforge status`: where a work tree and its series stand."""

from __future__ import annotations

import tempfile
from pathlib import Path

from lmsforge import git, ui
from lmsforge.errors import CheckFailed, UsageError
from lmsforge.options import Options
from lmsforge.port import state as port_state
from lmsforge.series import export, manifest as series_mod, parity, worktree
from lmsforge.verify import runner


def collect(opts: Options, tree_path: Path) -> dict[str, object]:
    tree = worktree.read_meta(tree_path)
    if tree is None:
        raise UsageError(f"{tree_path} is not a work tree made by `lmsforge apply`; pass --tree "
                         "DIR")
    branch_exists = git.rev_parse(tree_path, tree.branch) is not None
    commits = (len(git.out(["rev-list", f"{tree.base}..{tree.branch}"], tree_path).splitlines())
               if branch_exists else 0)
    folder = series_mod.find(opts.patches_dir, tree.framework, tree.tag)
    state = "no series folder"
    if branch_exists and (folder / series_mod.MANIFEST).is_file():
        state = _sync_state(tree, folder)
    has_series = (folder / series_mod.MANIFEST).is_file()
    verified = runner.last_verify(opts, tree.framework, tree.tag, folder if has_series else None)
    return {
        "tree": str(tree_path),
        "framework": tree.framework,
        "tag": tree.tag,
        "base": tree.base,
        "source": tree.identity.get("kind"),
        "branch": tree.branch,
        "branch_exists": branch_exists,
        "current_branch": git.current_branch(tree_path),
        "commits": commits,
        "dirty": git.is_dirty(tree_path),
        "operation_in_progress": git.in_progress_operation(tree_path),
        "series": str(folder),
        "series_state": state,
        "last_verify": verified["last_verify"],
        "last_verify_was_other_content": verified.get("last_verify_was_other_content", False),
        "last_verify_by_older_lmsforge": verified.get("last_verify_by_older_lmsforge", False),
        "port_in_progress": port_state.summary(tree_path),
    }


def _sync_state(tree: worktree.WorkTree, folder: Path) -> str:
    """Whether the branch and the committed patch files say the same thing."""
    try:
        current = series_mod.load(folder, check_patch_ids=False)
    except UsageError:
        return "series folder is invalid"
    with tempfile.TemporaryDirectory() as tmp:
        try:
            entries = export.format_patches(tree.path, tree.base, tree.branch, Path(tmp))
        except UsageError as exc:
            return f"branch cannot be exported: {exc}"
        names = [e.file for e in entries]
        if names != [p.file for p in current.patches] or \
                export.same_files(Path(tmp), folder, names):
            return "branch has changes not exported (run `lmsforge export`)"
    return "in sync (export would change nothing)"


def run(opts: Options, tree_path: Path | None, as_json: bool) -> int:
    path = (tree_path or Path.cwd()).absolute()
    if tree_path is None and worktree.read_meta(path) is None:
        raise UsageError(f"{path} is not a work tree made by `lmsforge apply`; pass --tree DIR")
    data = collect(opts, path)
    if as_json:
        ui.print_json(data)
        return 0
    ui.out.print(f"{data['framework']} {data['tag']} in {data['tree']}")
    ui.out.print(f"  base      {data['base']} ({data['source']} source)")
    ui.out.print(f"  branch    {data['branch']}: {data['commits']} commits"
                 + ("" if data["branch_exists"] else " (missing)"))
    ui.out.print(f"  work tree {'dirty' if data['dirty'] else 'clean'}"
                 + (f", {data['operation_in_progress']} in progress"
                    if data["operation_in_progress"] else ""))
    ui.out.print(f"  series    {data['series_state']}")
    if data["port_in_progress"]:
        ui.out.print(f"  port      {data['port_in_progress']}")
    last = data["last_verify"]
    never = (runner.OLDER_LMSFORGE if data["last_verify_by_older_lmsforge"]
             else "not run on this content of the series"
             if data["last_verify_was_other_content"] else "never run")
    ui.out.print("  verify    " + (", ".join(f"{k}: {v}" for k, v in last.items())  # type: ignore
                                   if last else never))
    return 0


def run_series(opts: Options, framework: str | None, as_json: bool) -> int:
    """`status --series`: which patches and tests each series of a framework carries."""
    opts.require_patches_dir()
    names = [framework] if framework else parity.frameworks(opts.patches_dir)
    if framework and not series_mod.available_tags(opts.patches_dir, framework):
        raise UsageError(f"no series of `{framework}` in {opts.patches_dir}; run `lmsforge list`")
    results = [parity.check(opts.patches_dir, name) for name in names]
    if as_json:
        ui.print_json([{"framework": r.framework, "tags": r.tags, "ok": r.ok, "stale": r.stale,
                        "items": [{"kind": i.kind, "name": i.name, "carried_by": i.carried_by,
                                   "missing_from": i.missing_from, "status": i.status,
                                   "reason": i.reason} for i in r.items]} for r in results])
    else:
        for result in results:
            _print_parity(result)
    unexplained = [f"{r.framework}: {i.kind} {i.name} only in {', '.join(i.carried_by)}"
                   for r in results for i in r.items if i.status == "unexplained"]
    stale = [f"{r.framework}: stale reason ({s})" for r in results for s in r.stale]
    problems = unexplained + stale
    if problems:
        raise CheckFailed(f"{len(problems)} series difference(s) without a reason, first: "
                          f"{problems[0]}; port it, or record why in "
                          f"patches/<framework>/{parity.REASONS_FILE} (see lmsforge/series/parity.py)")
    return 0


def _print_parity(result: parity.Parity) -> None:
    counts = result.counts()
    ui.out.print(f"{result.framework} ({', '.join(result.tags)}): "
                 f"{counts['all']} patches and tests in every series, "
                 f"{counts['explained']} in some with a reason, "
                 f"{counts['unexplained']} in some without one")
    rows = [[i.kind, i.name, ", ".join(i.carried_by), i.reason or "NO REASON RECORDED"]
            for i in result.items if i.missing_from]
    rows += [["reason", s, "", "STALE: no longer matches the series"] for s in result.stale]
    if rows:
        ui.table(None, ["kind", "name", "only in", "reason"], rows)
