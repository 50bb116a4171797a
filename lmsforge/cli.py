"""Command-line parsing and dispatch only; each command lives in ``lmsforge/commands/``."""

from __future__ import annotations

import errno
import sys
import tempfile
import traceback
from pathlib import Path
from typing import Any, Callable

import click

from lmsforge import __version__, native_exit, ui
from lmsforge.channel.credentials import redact
from lmsforge.errors import EXIT_FAILED, EXIT_USAGE, LmsforgeError, Terminated
from lmsforge.options import Options, sim_seeds_from_env
from lmsforge.verify.levels import DEFAULT_SIM_SEEDS, LEVELS

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


def _invoke(ctx: click.Context, action: Callable[[Options], int]) -> None:
    opts: Options = ctx.obj
    try:
        code = action(opts)
    except LmsforgeError as exc:
        ui.error(redact(str(exc)))
        code = exc.exit_code
    except ui.OutputClosed:  # the reader of our output went away: its normal end
        code = 0
    except KeyboardInterrupt as exc:
        native_exit.end_children()  # what the signal's first round did not end
        if isinstance(exc, Terminated):
            ui.error(f"terminated by {exc.name}; nothing half-done was kept (run the command "
                     "again)")
            code = 128 + exc.signum
        else:
            ui.error("interrupted; nothing half-done was kept (run the command again)")
            code = 130
    except OSError as exc:
        code = _environment_error(exc, opts)
    except Exception:  # an lmsforge bug: one line for the user, the traceback in a file
        code = _internal_error(opts)
    ctx.exit(code)


def _environment_error(exc: OSError, opts: Options) -> int:
    """A full disk or a permission the user lacks is not an lmsforge bug: one line, no log."""
    where = exc.filename or ""
    if exc.errno == errno.ENOSPC:
        where = exc.filename2 or where  # a copy's full side is its destination (filename2)
        ui.error(f"no space left on the device of {where or opts.cache.root}; free space there, "
                 "or pass --cache-dir on a larger disk")
        return EXIT_FAILED
    if exc.errno == errno.ENAMETOOLONG:
        ui.error(f"{where or 'a path'}: the name is too long for the file system; choose a "
                 "shorter path")
        return EXIT_USAGE
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        ui.error(f"{where or 'a file'}: {exc.strerror}; fix its permissions or choose another "
                 "folder")
        return EXIT_USAGE
    return _internal_error(opts)


def _internal_error(opts: Options) -> int:
    """One line for the user, the traceback in a log (in a temporary folder if the cache's
    log folder cannot be written)."""
    text = redact(traceback.format_exc())  # a URL in it may carry a token
    for folder in (lambda: opts.cache.log_dir, lambda: Path(tempfile.gettempdir())):
        try:
            log = folder() / "last-error.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(text)
            break
        except (OSError, LmsforgeError):
            log = None
    where = f"full traceback in {log}" if log else "the traceback could not be written"
    ui.error(redact(f"internal error: {sys.exc_info()[1]!r}; {where}"))
    return EXIT_FAILED


framework_opt = click.option("--framework", "-f", required=True, metavar="NAME",
                             help="Framework: pytorch or tensorflow.")
tag_opt = click.option("--tag", "-t", required=True, metavar="TAG",
                       help="Upstream release tag, e.g. v2.6.0.")
json_opt = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")


def source_options(func: Callable[..., object]) -> Callable[..., object]:
    func = click.option("--mirror", metavar="PATH_OR_URL",
                        help="Fetch the tag from this git mirror instead of the upstream remote "
                             "(air-gapped sites).")(func)
    func = click.option("--archive", type=click.Path(dir_okay=False, path_type=Path),
                        help="Use this local copy of the tag's declared source archive "
                             "(its sha256 is checked).")(func)
    func = click.option("--source", type=click.Choice(["auto", "archive", "git"]),
                        default="auto", show_default=True,
                        help="Which declared source serves the tree; auto = the archive unless "
                             "a mirror is given.")(func)
    return func


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, prog_name="lmsforge")
@click.option("--patches-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar="LMSFORGE_PATCHES_DIR",
              help="Root of the series folders [default: the repository's patches/].")
@click.option("--cache-dir", type=click.Path(file_okay=False, path_type=Path),
              envvar="LMSFORGE_CACHE_DIR",
              help="Cache for downloads, trees and builds [default: ~/.cache/lmsforge].")
@click.option("--jobs", "-j", type=click.IntRange(1),
              help="Parallel compile jobs [default: LMSFORGE_JOBS, else the number of CPUs].")
@click.pass_context
def main(ctx: click.Context, patches_dir: Path | None, cache_dir: Path | None,
         jobs: int | None) -> None:
    """lmsforge: Large Model Support for PyTorch and TensorFlow, carried across releases.

    \b
    Quick start:
      lmsforge list
      lmsforge fetch --framework pytorch --tag v2.6.0
      lmsforge verify --framework pytorch --tag v2.6.0 --level core-cpu
      lmsforge apply --framework pytorch --tag v2.6.0 --into ./pytorch-lms
      lmsforge build --framework pytorch --tag v2.6.0 --profile core --channel ./lms-channel
      lmsforge test --framework pytorch --tag v2.6.0 --channel ./lms-channel
      lmsforge publish --channel quetz://conda.example.org/lms ./lms-channel/linux-64/*.conda

    Exit codes: 0 success, 1 the thing checked failed, 2 bad usage or input,
    3 stopped for you (a port conflict to resolve).
    """
    _warn_of_relative_folders_from_the_environment(ctx, patches_dir, cache_dir)
    try:
        ctx.obj = Options.resolve(patches_dir, cache_dir, jobs)
    except LmsforgeError as exc:  # a folder no command can use: one line, before any work
        ui.error(redact(str(exc)))
        ctx.exit(exc.exit_code)


def _warn_of_relative_folders_from_the_environment(ctx: click.Context, *given: Path | None) -> None:
    """A relative LMSFORGE_CACHE_DIR or LMSFORGE_PATCHES_DIR names another folder in each folder
    lmsforge runs from: one cache per working folder, and `list` elsewhere shows nothing. It is
    used as given (where it points now), with one line that says so (hostile-inputs row 9)."""
    for name, value in zip(("patches_dir", "cache_dir"), given):
        if value is None or value.expanduser().is_absolute() or \
                ctx.get_parameter_source(name) != click.core.ParameterSource.ENVIRONMENT:
            continue
        variable = "LMSFORGE_PATCHES_DIR" if name == "patches_dir" else "LMSFORGE_CACHE_DIR"
        ui.err.print(f"warning: {variable}={value} is relative: it is {value.resolve()} here and "
                     f"another folder wherever lmsforge runs; set an absolute path", markup=False)


@main.command("list")
@json_opt
@click.pass_context
def list_(ctx: click.Context, as_json: bool) -> None:
    """Frameworks, tags, series, their upstream sources and last verification results.

    Example: lmsforge list --json
    """
    from lmsforge.commands import list_cmd

    _invoke(ctx, lambda opts: list_cmd.run(opts, as_json))


@main.command()
@framework_opt
@tag_opt
@source_options
@json_opt
@click.pass_context
def fetch(ctx: click.Context, framework: str, tag: str, source: str, archive: Path | None,
          mirror: str | None, as_json: bool) -> None:
    """Put the upstream tree of TAG in the cache and print its verified identity.

    Example: lmsforge fetch --framework pytorch --tag v2.6.0
    """
    from lmsforge.commands import fetch as command

    _invoke(ctx, lambda opts: command.run(opts, framework, tag, source, archive, mirror,
                                          as_json))


@main.command()
@framework_opt
@tag_opt
@click.option("--into", type=click.Path(file_okay=True, path_type=Path),
              help="Folder for the work tree: new, empty, or a clean git work tree "
                   "[default: ./lms-<framework>-<tag>].")
@click.option("--new", is_flag=True,
              help="Start a new series: the work tree at TAG with no patches (for a first "
                   "series; to carry an existing one to TAG use `lmsforge port`).")
@source_options
@click.pass_context
def apply(ctx: click.Context, framework: str, tag: str, into: Path | None, new: bool,
          source: str, archive: Path | None, mirror: str | None) -> None:
    """Make a work tree at TAG with the LMS series applied as commits on lms/<framework>/<tag>.

    Example: lmsforge apply --framework pytorch --tag v2.6.0 --into ./pytorch-lms
    """
    from lmsforge.commands import apply as command

    _invoke(ctx, lambda opts: command.run(opts, framework, tag, into, source, archive, mirror,
                                          new))


@main.command()
@click.option("--framework", "-f", metavar="NAME", help="Only this framework [default: all].")
@click.option("--tag", "-t", metavar="TAG", help="Only this tag [default: every series].")
@click.option("--level", "-l", type=click.Choice(LEVELS), default="apply", show_default=True,
              help="Run this level and every level below it.")
@click.option("--require", is_flag=True,
              help="Exit non-zero when the requested level could not run (e.g. no GPU).")
@click.option("--sim-seeds", type=click.IntRange(1, 1000),
              help="core-sim: run the CUDA tests under seeds 1..N of the simulator "
                   f"[default: LMSFORGE_SIM_SEEDS, else {DEFAULT_SIM_SEEDS}].")
@click.option("--report", "report_path", type=click.Path(dir_okay=False, path_type=Path),
              help="Also write the JSON report to this file.")
@source_options
@json_opt
@click.pass_context
def verify(ctx: click.Context, framework: str | None, tag: str | None, level: str,
           require: bool, sim_seeds: int | None, report_path: Path | None, source: str,
           archive: Path | None, mirror: str | None, as_json: bool) -> None:
    """Run verification levels (apply, compile, core-cpu, core-sim, core-gpu, full) on series.

    Example: lmsforge verify --framework pytorch --tag v2.6.0 --level core-cpu
    """
    from lmsforge.commands import verify as command

    fetch_kwargs = {"prefer": source, "archive_file": archive, "mirror": mirror}

    def action(opts: Options) -> int:
        seeds = sim_seeds
        if seeds is None:  # the variable matters only to a verify that reaches core-sim
            seeds = (sim_seeds_from_env(DEFAULT_SIM_SEEDS)
                     if LEVELS.index(level) >= LEVELS.index("core-sim") else DEFAULT_SIM_SEEDS)
        return command.run(opts, framework, tag, level, require, as_json, report_path,
                           fetch_kwargs, seeds)

    _invoke(ctx, action)


@main.command()
@framework_opt
@tag_opt
@click.option("--tree", "tree_path", type=click.Path(file_okay=False, path_type=Path),
              help="The work tree made by `lmsforge apply` [default: ./lms-<framework>-<tag>].")
@click.pass_context
def export(ctx: click.Context, framework: str, tag: str, tree_path: Path | None) -> None:
    """Write branch lms/<framework>/<tag> back to patches/<framework>/<tag>/ (deterministic).

    Example: lmsforge export --framework pytorch --tag v2.6.0 --tree ./pytorch-lms
    """
    from lmsforge.commands import export as command

    _invoke(ctx, lambda opts: command.run(opts, framework, tag, tree_path))


@main.command()
@click.option("--tree", "tree_path", type=click.Path(file_okay=False, path_type=Path),
              help="The work tree made by `lmsforge apply` [default: the current folder].")
@click.option("--series", "series", is_flag=True,
              help="Instead: which patches and tests each series carries; exit 1 when one is "
                   "in some series only without a reason in patches/<framework>/parity.yaml.")
@click.option("--framework", "-f", metavar="NAME", help="With --series: only this framework.")
@json_opt
@click.pass_context
def status(ctx: click.Context, tree_path: Path | None, series: bool, framework: str | None,
           as_json: bool) -> None:
    """Where a work tree stands: branch, commits, sync with the patch files, last verify.

    Example: lmsforge status --tree ./pytorch-lms --json;  lmsforge status --series
    """
    from lmsforge.commands import status as command

    if series and tree_path is not None:
        raise click.UsageError("--series compares the patch folders; it takes no --tree")
    if framework and not series:
        raise click.UsageError("--framework goes with --series")
    if series:
        _invoke(ctx, lambda opts: command.run_series(opts, framework, as_json))
    else:
        _invoke(ctx, lambda opts: command.run(opts, tree_path, as_json))


@main.command()
@click.option("--framework", "-f", metavar="NAME", help="Framework (to start a port).")
@click.option("--from", "from_tag", metavar="TAG", help="Tag whose series is ported.")
@click.option("--to", "to_tag", metavar="TAG", help="Tag to port the series to.")
@click.option("--into", type=click.Path(file_okay=True, path_type=Path),
              help="The port's work tree [default: ./lms-port-<framework>-<to> for a new "
                   "port; the work tree you are in for --continue, --skip, --status].")
@click.option("--continue", "continue_", is_flag=True,
              help="Go on after resolving a conflict (refused while conflict markers remain).")
@click.option("--skip", is_flag=True, help="Leave out the patch the port stopped at.")
@click.option("--reason", metavar="TEXT", help="Why --skip (recorded in series.yaml).")
@click.option("--abort", is_flag=True, help="Stop the port and remove its work tree.")
@click.option("--status", "show_status", is_flag=True, help="Show where the port stands.")
@click.option("--previous", type=click.Path(path_type=Path),  # a file: our one-line error
              help="An earlier series of --to made by a port from --from (moved aside): the "
                   "port carries its resolutions, folds and fixups.")
@source_options
@click.pass_context
def port(ctx: click.Context, framework: str | None, from_tag: str | None, to_tag: str | None,
         into: Path | None, continue_: bool, skip: bool, reason: str | None, abort: bool,
         show_status: bool, previous: Path | None, source: str, archive: Path | None,
         mirror: str | None) -> None:
    """Carry the series of --from to the tag --to; stops (exit 3) on conflicts to resolve.

    Example: lmsforge port --framework pytorch --from v2.6.0 --to v1.13.1 --into ./port
    """
    from lmsforge.commands import port as command

    actions = [name for name, on in (("continue", continue_), ("skip", skip), ("abort", abort),
                                     ("status", show_status)) if on]
    if len(actions) > 1:
        raise click.UsageError("choose one of --continue, --skip, --abort, --status")
    action = actions[0] if actions else "start"
    fetch_kwargs = {"prefer": source, "archive_file": archive, "mirror": mirror}
    if archive:
        raise click.UsageError("--archive is ambiguous for a port (two tags): put each archive "
                               "in the cache with `lmsforge fetch --archive FILE` first")
    _invoke(ctx, lambda opts: command.run(opts, framework, from_tag, to_tag, into, action, reason,
                                          fetch_kwargs, previous))


platform_choice = click.Choice(["linux-64", "linux-ppc64le"])


variant_opt = click.option("--variant", "variant_args", multiple=True, metavar="KEY=VALUE",
                           help="Narrow the variant matrix, e.g. --variant cuda=12.4 "
                                "--variant python=3.11 (repeatable).")


@main.command()
@framework_opt
@tag_opt
@click.option("--profile", type=click.Choice(["core", "full"]), default="core",
              show_default=True, help="core: c10 + LMS tests (minutes); full: the framework.")
@click.option("--platform", "platforms", type=platform_choice, multiple=True,
              help="Target platform(s) [default: both].")
@variant_opt
@click.option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Where to write the rendered recipes [default: in the cache].")
@json_opt
@click.pass_context
def render(ctx: click.Context, framework: str, tag: str, profile: str,
           platforms: tuple[str, ...], variant_args: tuple[str, ...], out_dir: Path | None,
           as_json: bool) -> None:
    """Render the rattler-build recipe(s) and print the variant matrix that would be built.

    Example: lmsforge render --framework pytorch --tag v2.6.0 --profile full
    """
    from lmsforge.commands import render as command

    chosen = list(platforms) or ["linux-64", "linux-ppc64le"]
    _invoke(ctx, lambda opts: command.run(opts, framework, tag, profile, chosen,
                                          list(variant_args), out_dir, as_json))


@main.command()
@framework_opt
@tag_opt
@click.option("--profile", type=click.Choice(["core", "full"]), default="core",
              show_default=True, help="core: c10 + LMS tests (minutes); full: the framework.")
@click.option("--platform", type=platform_choice, default="linux-64", show_default=True,
              help="Target platform of the packages; linux-ppc64le cross-compiles "
                   "(docs/building.md).")
@variant_opt
@click.option("--channel", default="lms-channel", show_default=True, metavar="DIR",
              help="Local output channel folder (or file:///abs/path) the packages are added "
                   "to.")
@source_options
@click.pass_context
def build(ctx: click.Context, framework: str, tag: str, profile: str, platform: str,
          variant_args: tuple[str, ...], channel: str, source: str, archive: Path | None,
          mirror: str | None) -> None:
    """Build conda packages of the patched tree with rattler-build (one call per variant).

    Example: lmsforge build --framework pytorch --tag v2.6.0 --profile core --channel ./ch
    """
    from lmsforge.commands import build as command

    fetch_kwargs = {"prefer": source, "archive_file": archive, "mirror": mirror}
    _invoke(ctx, lambda opts: command.run(opts, framework, tag, profile, platform,
                                          list(variant_args), channel, fetch_kwargs))


@main.command("test")
@framework_opt
@tag_opt
@click.option("--channel", "channels", multiple=True, required=True, metavar="CHANNEL",
              help="Channel folder, URL or quetz:// address to install from (repeatable; "
                   "credentials: RATTLER_AUTH_FILE, or LMSFORGE_CHANNEL_TOKEN for the host in "
                   "LMSFORGE_CHANNEL_HOST; docs/channel.md).")
@click.option("--prefix", type=click.Path(file_okay=False, path_type=Path),
              help="Fresh prefix to install into [default: a temporary one].")
@click.option("--gpu/--cpu", "gpu", default=None,
              help="Force the GPU or the CPU tests [default: GPU tests when a GPU is present].")
@click.option("--platform", type=platform_choice, default="linux-64", show_default=True,
              help="Platform of the package to test; linux-ppc64le runs under qemu-user.")
@click.pass_context
def test_(ctx: click.Context, framework: str, tag: str, channels: tuple[str, ...],
          prefix: Path | None, gpu: bool | None, platform: str) -> None:
    """Install the built package from a channel into a fresh prefix and run its LMS tests.

    Example: lmsforge test --framework pytorch --tag v2.6.0 --channel ./ch
    """
    from lmsforge.commands import test as command

    _invoke(ctx, lambda opts: command.run(opts, framework, tag, list(channels), prefix, gpu,
                                          platform))


@main.command()
@click.option("--channel", "target", required=True, metavar="DEST",
              help="Channel folder, file:// URI, or server: quetz://HOST/CHANNEL, "
                   "artifactory://HOST/PATH/CHANNEL, https://HOST/PATH/CHANNEL (PUT), "
                   "https://prefix.dev/CHANNEL, https://anaconda.org/OWNER (docs/channel.md).")
@click.argument("packages", nargs=-1, required=True,
                type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.pass_context
def publish(ctx: click.Context, target: str, packages: tuple[Path, ...]) -> None:
    """Add packages to a private channel under a lock, re-indexing atomically.

    Credentials for a server: an entry for its host in RATTLER_AUTH_FILE, or
    LMSFORGE_CHANNEL_TOKEN (or LMSFORGE_CHANNEL_USER + LMSFORGE_CHANNEL_PASSWORD); never in the
    URL. A server that does not answer in LMSFORGE_CHANNEL_TIMEOUT seconds (default 60) is given
    up (docs/channel.md).

    Example: lmsforge publish --channel /srv/conda/lms ch/linux-64/*.conda
    """
    from lmsforge.commands import publish as command

    _invoke(ctx, lambda opts: command.run(opts, target, list(packages)))


@main.command()
@json_opt
@click.pass_context
def doctor(ctx: click.Context, as_json: bool) -> None:
    """Check this host: git, compilers, CUDA toolkit, GPU, rattler-build, disk, credentials.

    Example: lmsforge doctor
    """
    from lmsforge.commands import doctor as command

    _invoke(ctx, lambda opts: command.run(opts, as_json))


@main.command()
@framework_opt
@tag_opt
@click.option("--into", "dest", type=click.Path(path_type=Path), required=True,
              help="Folder to write (new or empty), or a .tar.gz file with --tarball.")
@click.option("--tarball", is_flag=True, help="Write one .tar.gz instead of a folder.")
@click.pass_context
def bundle(ctx: click.Context, framework: str, tag: str, dest: Path, tarball: bool) -> None:
    """Write what a GPU host without network needs to run the GPU level and the benchmarks.

    Example: lmsforge bundle --framework pytorch --tag v2.6.0 --into lms-gpu.tar.gz --tarball

    TensorFlow (the GPU test of its core-sim build; verifies first when needed): lmsforge
    bundle --framework tensorflow --tag v2.14.1 --into lms-gpu-tf.tar.gz --tarball
    """
    from lmsforge.commands import bundle as command

    _invoke(ctx, lambda opts: command.run(opts, framework, tag, dest, tarball))


class NonEmpty(click.ParamType):
    """A string or path option that refuses "" instead of treating it as not given."""

    def __init__(self, inner: click.ParamType) -> None:
        self.inner = inner
        self.name = inner.name

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and not value.strip():
            self.fail("must not be empty; give a value or leave the option out",
                      param, ctx)
        return self.inner.convert(value, param, ctx)

    def get_metavar(self, *args: Any, **kwargs: Any) -> str | None:  # signature varies by click
        return self.inner.get_metavar(*args, **kwargs)

    def shell_complete(self, ctx: click.Context, param: click.Parameter,
                       incomplete: str) -> list[Any]:
        return self.inner.shell_complete(ctx, param, incomplete)


@main.command()
@click.option("--model", "-m", required=True, metavar="MODEL",
              help="resnet50, unet3d or gpt2-medium (built in), torchvision:NAME, or "
                   "MODULE:FUNCTION (your function returning a torch.nn.Module).")
@click.option("--input", "input_text", metavar="SHAPE",
              help="One sample's shape, e.g. 3x2048x2048 (gpt2-medium: tokens) "
                   "[default for the built-in models: 3x224x224, 1x64x64x64, 1024].")
@click.option("--batch", "-b", type=int, metavar="N",
              help="Batch size [default: 8, 2 or 4 for the built-in models, else 1].")
@click.option("--gpu", "gpu_name", default="h100-pcie", show_default=True, metavar="PROFILE",
              help="GPU profile: h100-pcie, a100-pcie, v100-power9, gh200.")
@click.option("--gpu-memory", metavar="SIZE",
              help="Device memory to plan for, e.g. 16G [default: the profile's].")
@click.option("--optimizer", type=click.Choice(["sgd", "adam", "adamw"]),
              help="[default: the built-in model's; SGD with momentum for others].")
@click.option("--dtype", type=click.Choice(["float32", "tf32"]), default="float32",
              show_default=True, help="Matmul precision for the kernels' roofline times.")
@click.option("--plot", type=click.Path(path_type=Path), metavar="PNG",
              help="Write memory over the step, with and without LMS, as a PNG.")
@click.option("--no-search", "no_search", is_flag=True,
              help="Replay LMS's default settings only (no search of the knobs).")
@json_opt
@click.pass_context
def plan(ctx: click.Context, model: str, input_text: str | None, batch: int | None,
         gpu_name: str, gpu_memory: str | None, optimizer: str | None, dtype: str,
         plot: Path | None, no_search: bool, as_json: bool) -> None:
    """Will MODEL train on a GPU, with LMS or without, and how fast? Simulated, no GPU needed.

    Traces one training step on fake tensors and replays it through the v2.6.0 series' real
    caching allocator and LMS on lmsforge's simulated CUDA runtime (the first run builds it).

    Example: lmsforge plan --model resnet50 --input 3x2048x2048 --batch 16 --gpu h100-pcie

    \b
    More:
      lmsforge plan --model gpt2-medium --gpu a100-pcie --gpu-memory 16G --plot mem.png
      lmsforge plan --model torchvision:resnet152 --input 3x1024x1024 --batch 4 --json
      lmsforge plan --model my_module:build_model --input 3x512x512
    """
    from lmsforge.commands import plan as command

    _invoke(ctx, lambda opts: command.run(opts, model, input_text, batch, gpu_name, gpu_memory,
                                          optimizer, dtype, plot, as_json, not no_search))


def refuse_empty_values(command: click.Command) -> None:
    """Every string and path parameter of COMMAND and its subcommands refuses "" (the class of
    `-t ""` verifying every series and `--cache-dir ""` making the current folder the cache)."""
    for param in command.params:
        if isinstance(param.type, (click.types.StringParamType, click.Path)):
            param.type = NonEmpty(param.type)
    if isinstance(command, click.Group):
        for sub in command.commands.values():
            refuse_empty_values(sub)


refuse_empty_values(main)


def run() -> None:
    """The `lmsforge` program (console script and `python -m lmsforge`)."""
    native_exit.handle_signals()
    ui.guard_stdout()
    status: object = 0
    try:
        main(standalone_mode=True)
    except SystemExit as exc:
        status = exc.code
    except click.exceptions.Abort:
        native_exit.finish(EXIT_USAGE)
    except ui.OutputClosed:  # click's own output (--help, --version) to a reader that went away
        native_exit.finish(0)
    except LmsforgeError as exc:  # the same for standard output that cannot be written
        ui.error(redact(str(exc)))
        ui.silence_stdout()
        native_exit.finish(exc.exit_code)
    # What is still buffered is written now, where a failure is reported like any other (once:
    # a command that failed has said why already, maybe this very write).
    try:
        sys.stdout.flush()
    except ui.OutputClosed:
        pass
    except LmsforgeError as exc:
        ui.silence_stdout()
        if status in (0, None):
            ui.error(redact(str(exc)))
            native_exit.finish(exc.exit_code)
    native_exit.finish(status)
