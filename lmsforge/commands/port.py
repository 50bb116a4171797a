"""`lmsforge port`: carry a series to another upstream tag (see ``lmsforge/port/engine.py``)."""

from __future__ import annotations

import errno
from pathlib import Path

from lmsforge import ui
from lmsforge.port import engine as port, finish as port_finish, guide as port_guide, state as port_state
from lmsforge.port import disk as port_disk
from lmsforge.series import catalogue, manifest as series_mod
from lmsforge.upstream import tree as upstream
from lmsforge.errors import LmsforgeError, UsageError
from lmsforge.options import Options
from lmsforge.port.state import PortState, command
from lmsforge.port.steps import PortStopped

OUTCOMES = ("picked", "guided", "rerere", "resolved", "dropped", "skipped", "pending")


def run(opts: Options, framework: str | None, from_tag: str | None, to_tag: str | None,
        into: Path | None, action: str, reason: str | None, fetch_kwargs: dict[str, object],
        previous: Path | None = None) -> int:
    port_state.command_started()
    try:
        if action == "start":
            return _start(opts, framework, from_tag, to_tag, into, fetch_kwargs, previous)
        if previous is not None:
            raise UsageError(f"--previous goes with the start of a port, not with --{action}")
        return _act(opts, port_state.locate(into, action), action, reason)
    except PortStopped as stop:
        # Not an error: the port waits for the user (exit 3).
        ui.err.print(f"lmsforge: {stop}", markup=False, highlight=False)
        return stop.exit_code
    except OSError as exc:
        if exc.errno != errno.ENOSPC:
            raise
        raise _no_space(exc, opts, into, action, framework, to_tag) from exc


def _no_space(exc: OSError, opts: Options, into: Path | None, action: str,
              framework: str | None, to_tag: str | None) -> LmsforgeError:
    """The port's own words for a full disk: which device, and what it left there."""
    tree: Path | None = None
    state = None
    try:
        tree = (port_state.locate(into, action) if action != "start" else
                (into or Path.cwd() / f"lms-port-{framework}-{to_tag}").absolute())
        state = PortState.load(tree)
    except (LmsforgeError, OSError):
        pass
    places = [p for p in (tree, opts.patches_dir, opts.cache.root) if p is not None]
    return port_disk.no_space(exc, places, tree, state)


def _act(opts: Options, tree: Path, action: str, reason: str | None) -> int:
    if action == "skip" and not (reason and reason.strip()):
        raise UsageError("--skip needs --reason TEXT (it is recorded in the manifest)")
    if action == "status":
        shown = _print_status(tree, PortState.load(tree))
        if shown is not None:
            port_state.note_shown(tree, shown.id)
        return 0
    with port_state.locked(tree):
        state = PortState.load(tree)
        try:
            return _go_on(opts, tree, state, action, reason)
        except PortStopped as stop:
            return _stopped(tree, state, stop)


def _stopped(tree: Path, state: PortState, stop: PortStopped) -> int:
    """Print the stop line (exit 3), then note that the user has seen this stop."""
    ui.err.print(f"lmsforge: {stop}", markup=False, highlight=False)
    state.shown = state.current
    state.save(tree)
    return stop.exit_code


def _go_on(opts: Options, tree: Path, state: PortState, action: str,
           reason: str | None) -> int:
    if action == "abort":
        port.abort(tree, state)
        kept = "removed" if state.created_folder else "emptied"
        ui.out.print(f"port aborted; {tree} {kept}; {state.patches_dir} as it was before "
                     "the port")
        return 0
    if state.aborting:
        raise UsageError(_aborting(tree, state))
    if opts.patches_dir.resolve() != Path(state.patches_dir):
        raise UsageError(f"this port writes its series to {state.patches_dir} (where it "
                         f"started), not {opts.patches_dir}; run "
                         f"`{command(state, tree, action)}`")
    if action == "skip":
        port.skip(tree, state, " ".join((reason or "").split()))
    else:
        port.continue_(tree, state)
    if state.phase == "start":
        port.run_start(tree, state)
        _print_risk(state)
    return _done(tree, state, port.proceed(tree, state))


def _start(opts: Options, framework: str | None, from_tag: str | None, to_tag: str | None,
           into: Path | None, fetch_kwargs: dict[str, object], previous_dir: Path | None) -> int:
    if not (framework and from_tag and to_tag):
        raise UsageError("a new port needs --framework, --from and --to")
    tree = (into or Path.cwd() / f"lms-port-{framework}-{to_tag}").absolute()
    opts.refuse_inside_managed(tree, "--into")
    opts.require_writable_patches_dir("port")
    sources = catalogue.sources_for(opts.patches_dir, framework)
    folder = catalogue.series_folder(opts.patches_dir, sources, from_tag)
    catalogue.check_tag(opts.patches_dir, sources, to_tag)
    target = series_mod.find(opts.patches_dir, framework, to_tag)
    if (target / series_mod.MANIFEST).is_file():
        raise UsageError(f"a series for {framework} {to_tag} exists already at {target}; to port "
                         "again move it away first and pass it with --previous DIR (the port "
                         "then carries what it did), or change it in a work tree made with "
                         f"`lmsforge apply --framework {framework} --tag {to_tag} --into DIR`")
    port.check_new_target(tree)
    series = series_mod.load(folder)
    with ui.step(f"fetching {framework} {from_tag} and {to_tag}"):
        identity_a = upstream.fetch(sources, from_tag, opts.cache, **fetch_kwargs)  # type: ignore
        identity_b = upstream.fetch(sources, to_tag, opts.cache, **fetch_kwargs)  # type: ignore
    previous = None if previous_dir is None else port_guide.check_previous(
        previous_dir.absolute(), opts.patches_dir, framework, from_tag, to_tag,
        identity_b.commit, series)
    created = port.claim(tree)
    with port_state.locked(tree):
        state = port.begin(tree, series, identity_a, identity_b, opts.patches_dir, previous,
                           created)
        state.save(tree)
        with ui.step(f"materialising {len(series.patches)} patches on {from_tag}"):
            port.run_start(tree, state)
        _print_risk(state)
        try:
            return _done(tree, state, port.proceed(tree, state))
        except PortStopped as stop:
            return _stopped(tree, state, stop)


def _done(tree: Path, state: PortState, folder: Path) -> int:
    counts = _counts(state)
    ui.out.print(f"ported {state.framework} {state.from_tag} → {state.to_tag}: "
                 + ", ".join(f"{n} {k}" for k, n in counts.items() if n)
                 + f"; series written to {folder} (review {folder / 'PORT-REPORT.md'}); "
                 f"work tree {tree}")
    return 0


def _counts(state: PortState) -> dict[str, int]:
    return {s: sum(p.status == s for p in state.patches) for s in OUTCOMES}


def _print_risk(state: PortState) -> None:
    rows = [[str(r["patch"]), str(r["upstream_files"]), str(r["upstream_lines_changed"]),
             "n/a" if r["upstream_commits"] is None else str(r["upstream_commits"]),
             str(r["risk"]) + (f"; renamed: {'; '.join(r['renamed'])}"  # type: ignore[arg-type]
                               if r.get("renamed") else "")] for r in state.risk]
    ui.table(f"risk: what upstream changed between {state.from_tag} and {state.to_tag}",
             ["patch", "upstream files", "lines changed", "commits", "risk"], rows)
    for patch in state.patches:
        if patch.status == "dropped":
            ui.out.print(f"dropping {patch.file}: {patch.note}")


def _print_status(tree: Path, state: PortState) -> port_state.PatchState | None:
    """A summary, the patches that need a look, and the next command; returns the patch it
    showed the port stopped (or interrupted) at."""
    ui.out.print(f"port {state.framework} {state.from_tag} → {state.to_tag} in {tree}; series "
                 f"goes to {state.series_folder}")
    if state.previous:
        ui.out.print(f"guided by the previous port in {state.previous['folder']}")
    counts = _counts(state)
    ui.out.print(f"{len(state.patches)} patches: "
                 + (", ".join(f"{n} {k}" for k, n in counts.items() if n) or "none read yet"))
    stopped = port.interrupted_patch(tree, state) if state.phase == "replay" else None
    for patch in state.patches:
        if patch.status not in ("picked", "pending") or patch is stopped:
            marker = "→" if patch is stopped else " "
            ui.out.print(f" {marker} {patch.file:45} {patch.status:9} {patch.note}")
    ui.out.print(_next_step(tree, state, stopped))
    return stopped


def _aborting(tree: Path, state: PortState) -> str:
    return (f"an --abort of this port was interrupted (a killed process?) and {tree} is half "
            f"removed; finish removing it with `{command(state, tree, 'abort')}`")


def _next_step(tree: Path, state: PortState, stopped: port_state.PatchState | None) -> str:
    if state.aborting:
        return _aborting(tree, state)
    go_on = f"`{command(state, tree, 'continue')}`"
    if state.phase == "start":
        return (f"the port was interrupted while starting: {go_on} starts it again, "
                f"`{command(state, tree, 'abort')}` removes it")
    if state.phase == "finish":
        written = state.finish is not None and \
            port_finish.is_ours(state.series_folder, state.finish)
        return (f"every patch is in; {'the series is written, ' if written else ''}{go_on} "
                "finishes the port")
    if stopped is not None and state.current is None:
        return (f"the cherry-pick of {stopped.file} was interrupted (a killed process): "
                f"{go_on} finishes it or stops at its conflict, "
                f"`{command(state, tree, 'skip')}` leaves the patch out")
    if stopped is not None:
        return (f"stopped at {stopped.file}: resolve the conflicts in {tree}, then {go_on}; or "
                f"leave it out with `{command(state, tree, 'skip')}`")
    return f"replaying: {go_on} goes on (if no lmsforge process is running it now)"
