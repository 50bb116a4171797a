"""`lmsforge port`: carry a series to another upstream tag (see ``lmsforge/port.py``)."""

from __future__ import annotations

from pathlib import Path

from lmsforge import frameworks, port, series as series_mod, ui, upstream
from lmsforge.errors import UsageError
from lmsforge.options import Options


def _shared_rr_cache(opts: Options, framework: str) -> Path:
    return opts.patches_dir / framework / port.RR_CACHE


def run(opts: Options, framework: str | None, from_tag: str | None, to_tag: str | None,
        into: Path | None, action: str, reason: str | None, fetch_kwargs: dict[str, object]) -> int:
    if action == "start":
        if not (framework and from_tag and to_tag):
            raise UsageError("a new port needs --framework, --from and --to")
        tree = (into or Path.cwd() / f"lms-port-{framework}-{to_tag}").absolute()
        return _start(opts, framework, from_tag, to_tag, tree, fetch_kwargs)
    if into is None:
        raise UsageError(f"--{action} needs --into DIR, the port's work tree")
    tree = into.absolute()
    state = port.PortState.load(tree)
    if action == "status":
        _print_status(tree, state)
        return 0
    if action == "skip" and not reason:
        raise UsageError("--skip needs --reason TEXT (it is recorded in the manifest)")
    if action == "abort":
        with port.locked(tree):
            port.abort(tree, state)
        ui.out.print(f"port aborted; {'removed ' + str(tree) if state.created_folder else 'state cleared'}"
                     f"; {opts.patches_dir} unchanged")
        return 0
    with port.locked(tree):
        if action == "skip":
            state = port.skip(tree, state, reason or "")
        else:
            state = port.continue_(tree, state)
        return _finish(opts, tree, state)


def _start(opts: Options, framework: str, from_tag: str, to_tag: str, tree: Path,
           fetch_kwargs: dict[str, object]) -> int:
    sources = frameworks.sources_for(opts.patches_dir, framework)
    folder = frameworks.series_folder(opts.patches_dir, sources, from_tag)
    frameworks.check_tag(opts.patches_dir, sources, to_tag)
    target = series_mod.find(opts.patches_dir, framework, to_tag)
    if (target / series_mod.MANIFEST).is_file():
        raise UsageError(f"a series for {framework} {to_tag} exists already at {target}")
    series = series_mod.load(folder)
    with ui.step(f"fetching {framework} {from_tag} and {to_tag}"):
        identity_a = upstream.fetch(sources, from_tag, opts.cache, **fetch_kwargs)  # type: ignore
        identity_b = upstream.fetch(sources, to_tag, opts.cache, **fetch_kwargs)  # type: ignore
    with ui.step(f"materialising {len(series.patches)} patches on {from_tag}"):
        state = port.start(series, identity_a, identity_b, tree,
                           _shared_rr_cache(opts, framework))
    _print_risk(state)
    with port.locked(tree):
        return _finish(opts, tree, port.resume(tree, state))


def _finish(opts: Options, tree: Path, state: port.PortState) -> int:
    folder = port.finish(tree, state, opts.patches_dir, _shared_rr_cache(opts, state.framework))
    counts = {s: sum(p.status == s for p in state.patches)
              for s in ("picked", "rerere", "resolved", "dropped", "skipped")}
    ui.out.print(f"ported {state.framework} {state.from_tag} → {state.to_tag}: "
                 + ", ".join(f"{n} {k}" for k, n in counts.items() if n)
                 + f"; series written to {folder} (review {folder / 'PORT-REPORT.md'})")
    return 0


def _print_risk(state: port.PortState) -> None:
    rows = [[str(r["patch"]), str(r["upstream_files"]), str(r["upstream_lines_changed"]),
             "n/a" if r["upstream_commits"] is None else str(r["upstream_commits"]),
             str(r["risk"])] for r in state.risk]
    ui.table(f"risk: what upstream changed between {state.from_tag} and {state.to_tag}",
             ["patch", "upstream files", "lines changed", "commits", "risk"], rows)
    for patch in state.patches:
        if patch.status == "dropped":
            ui.out.print(f"dropping {patch.file}: {patch.note}")


def _print_status(tree: Path, state: port.PortState) -> None:
    ui.out.print(f"port {state.framework} {state.from_tag} → {state.to_tag} in {tree}")
    for patch in state.patches:
        marker = "→" if patch.id == state.current else " "
        ui.out.print(f" {marker} {patch.file:45} {patch.status:9} {patch.note}")
    if state.current:
        ui.out.print(f"stopped at {state.patch(state.current).file}: resolve the conflicts, then "
                     f"`lmsforge port --continue --into {tree}`")
