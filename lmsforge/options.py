"""Settings resolved once (command line > environment > defaults) into one frozen object."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from lmsforge import bundled
from lmsforge.cache import Cache, default_cache_dir
from lmsforge.errors import UsageError

CHANNEL_TIMEOUT_ENV = "LMSFORGE_CHANNEL_TIMEOUT"
DEFAULT_CHANNEL_TIMEOUT_S = 60.0


def channel_timeout_s() -> float:
    """How long a channel server may take to accept a connection or to send the next bytes of
    an answer (``LMSFORGE_CHANNEL_TIMEOUT``, seconds) before a command gives it up."""
    text = os.environ.get(CHANNEL_TIMEOUT_ENV, "").strip()
    if not text:
        return DEFAULT_CHANNEL_TIMEOUT_S
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 86400:  # nan fails too
        raise UsageError(f"{CHANNEL_TIMEOUT_ENV}={text!r} is not a number of seconds; set it to "
                         f"e.g. {DEFAULT_CHANNEL_TIMEOUT_S:.0f}, or unset it")
    return value


def default_patches_dir() -> Path:
    env = os.environ.get("LMSFORGE_PATCHES_DIR")
    if env:
        return Path(env).expanduser().resolve()
    shipped = bundled.path("patches")  # the checkout's, or the copy a wheel installed
    if shipped.is_dir():
        return shipped
    return (Path.cwd() / "patches").resolve()


def default_jobs() -> int:
    """LMSFORGE_JOBS, else the number of CPUs; read where the jobs are used, so a bad value
    breaks only the commands that compile, and the error names the variable."""
    text = os.environ.get("LMSFORGE_JOBS", "").strip()
    if not text:
        return max(1, os.cpu_count() or 1)
    if not text.isdigit() or int(text) < 1:
        raise UsageError(f"LMSFORGE_JOBS={text!r} is not a number of jobs (1 or more); fix it, "
                         "or unset it to use every CPU")
    return int(text)


def sim_seeds_from_env(default: int) -> int:
    """LMSFORGE_SIM_SEEDS (1..1000), else DEFAULT; the error names the variable."""
    text = os.environ.get("LMSFORGE_SIM_SEEDS", "").strip()
    if not text:
        return default
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise UsageError(f"LMSFORGE_SIM_SEEDS={text!r} is not a number of seeds from 1 to 1000; "
                         "fix it, or unset it")
    return int(text)


# Linux ends a path at PATH_MAX (4096 bytes); lmsforge writes paths up to about this much below
# the cache (apt's lists, build trees, test logs), so a cache deeper than the rest fails midway.
PATH_MAX = 4096
DEPTH_BELOW_CACHE = 1024


def _refuse_a_cache_too_deep(cache: Path) -> None:
    """A cache path too long for what goes below it failed deep inside apt ("File name too
    long", with network advice): refuse it before anything is made (hostile-inputs row 16)."""
    length = len(os.fsencode(cache))
    if length > PATH_MAX - DEPTH_BELOW_CACHE:
        raise UsageError(f"the cache folder {str(cache)[:60]}… is {length} bytes long; paths end "
                         f"at {PATH_MAX} and lmsforge needs up to {DEPTH_BELOW_CACHE} below it: "
                         "choose a shorter --cache-dir (or LMSFORGE_CACHE_DIR)")


@dataclass(frozen=True)
class Options:
    patches_dir: Path
    cache: Cache
    jobs_given: int | None  # --jobs; None: LMSFORGE_JOBS or the CPUs, read when used
    patches_dir_given: bool = False  # by --patches-dir or LMSFORGE_PATCHES_DIR

    @classmethod
    def resolve(cls, patches_dir: Path | None, cache_dir: Path | None,
                jobs: int | None = None) -> "Options":
        # ~ is expanded here too: LMSFORGE_CACHE_DIR='~/x' from CI YAML or systemd reaches us
        # through click unexpanded, and would make a folder named ~ in the current one
        cache = cache_dir.expanduser().resolve() if cache_dir else default_cache_dir()
        _refuse_a_cache_too_deep(cache)
        # Build harnesses and the tools they start find the cache through the environment.
        os.environ["LMSFORGE_CACHE_DIR"] = str(cache)
        return cls(
            patches_dir=(patches_dir.expanduser().resolve() if patches_dir
                         else default_patches_dir()),
            cache=Cache(cache),
            jobs_given=jobs,
            patches_dir_given=patches_dir is not None or bool(
                os.environ.get("LMSFORGE_PATCHES_DIR")),
        )

    @property
    def jobs(self) -> int:
        return self.jobs_given or default_jobs()

    def refuse_inside_managed(self, target: Path, option: str) -> None:
        """Refuse a work tree inside the cache (verify resets its trees, the next download sweeps
        partial/) or inside the patches folder (the series' own files), where a user's commits
        and files would be lost or mixed into the series."""
        where = target.absolute().resolve()
        for root, what in ((self.cache.root, "the cache"),
                           (self.patches_dir, "the patches folder")):
            root = root.resolve()
            if where == root or root in where.parents:
                raise UsageError(f"{option} {target} is inside {what} ({root}), whose contents "
                                 "lmsforge resets and removes; choose a folder outside it")

    def require_writable_patches_dir(self, command: str) -> None:
        """Refuse to write a series into the copy an installed wheel carries: the next upgrade
        of lmsforge would replace it, and the series with it."""
        if bundled.is_installed_copy(self.patches_dir):
            raise UsageError(f"{self.patches_dir} holds the series installed with lmsforge, which "
                             f"an upgrade replaces; `lmsforge {command}` writes series, so copy "
                             f"them to a folder of your own (cp -r {self.patches_dir} ./patches) "
                             "and pass --patches-dir ./patches")

    def require_patches_dir(self) -> None:
        """Refuse a patches folder that does not exist (a typo in LMSFORGE_PATCHES_DIR or
        --patches-dir would otherwise read as "no series at all")."""
        if self.patches_dir.is_dir():
            return
        if self.patches_dir_given:
            raise UsageError(f"the patches folder {self.patches_dir} does not exist; fix "
                             "--patches-dir or LMSFORGE_PATCHES_DIR, or leave both out")
        raise UsageError(f"no patches folder at {self.patches_dir}; pass --patches-dir with the "
                         "folder that holds the series")
