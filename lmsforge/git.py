"""The git operations lmsforge uses: GitPython for repositories, refs, commits and trailers, and
the git binary for plumbing GitPython has no safe equivalent of (CONTRIBUTING.md, "Git").

Every call runs with a fixed, minimal configuration so results do not depend on the user's
``~/.gitconfig`` (hooks, signing, autocrlf, pagers), which is what makes imports and exports
byte-reproducible across machines. GitPython's commands get the same configuration and
environment (``repository``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

# GitPython refuses to import when no git binary is on PATH; commands that need no git (test,
# publish) must still run there, and those that do get NO_GIT below as their one-line error.
os.environ.setdefault("GIT_PYTHON_REFRESH", "quiet")
import git as gitpython  # noqa: E402
from gitdb.exc import BadName, BadObject  # noqa: E402

from lmsforge.errors import LmsforgeError  # noqa: E402

NO_GIT = "git is not on PATH; install git (apt-get install git) or add it to PATH"

# The identity that owns every commit lmsforge creates itself (archive imports, series commits
# replayed by `git am` keep their own author; only the committer is ours).
LMSFORGE_NAME = "lmsforge"
LMSFORGE_EMAIL = "lmsforge@lmsforge.invalid"

_NEUTRAL_CONFIG = (
    "-c", "core.autocrlf=false",
    "-c", "core.safecrlf=false",
    "-c", "core.hooksPath=/dev/null",
    "-c", "commit.gpgSign=false",
    "-c", "tag.gpgSign=false",
    "-c", "format.signature=",
    "-c", "diff.noprefix=false",
    "-c", "diff.mnemonicPrefix=false",
    "-c", "diff.renames=true",
    "-c", "core.quotePath=true",
    "-c", "advice.detachedHead=false",
    "-c", "init.defaultBranch=main",
    "-c", f"user.name={LMSFORGE_NAME}",
    "-c", f"user.email={LMSFORGE_EMAIL}",
)


class GitError(LmsforgeError):
    """A git command failed; ``stderr`` holds git's own words."""

    def __init__(self, args: Sequence[str], returncode: int, stdout: str, stderr: str) -> None:
        self.args_run = list(args)
        self.returncode = returncode
        self.stdout = stdout
        self.stderr = stderr
        first = (stderr.strip() or stdout.strip() or "no output").splitlines()[0]
        super().__init__(f"git {' '.join(args[:2])} failed: {first}")


def git_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_NOSYSTEM="1",
        GIT_CONFIG_GLOBAL="/dev/null",
        GIT_TERMINAL_PROMPT="0",
        LC_ALL="C",
        LANG="C",
        TZ="UTC",
    )
    if extra:
        env.update(extra)
    return env


def run(
    args: Sequence[str],
    cwd: Path | str | None = None,
    *,
    env: Mapping[str, str] | None = None,
    input: bytes | None = None,
    check: bool = True,
    child_options: Mapping[str, Any] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git ARGS`` and return the completed process (bytes out). CHILD_OPTIONS: more
    ``subprocess`` keyword arguments (``Cache.child_options`` for git working in a scratch folder)."""
    try:
        proc = subprocess.run(
            ["git", *_NEUTRAL_CONFIG, *args],
            cwd=cwd,
            env=git_env(env),
            input=input,
            capture_output=True,
            **(child_options or {}),
        )
    except FileNotFoundError:
        if shutil.which("git", path=git_env(env).get("PATH")) is None:
            raise LmsforgeError(NO_GIT) from None
        raise
    if check and proc.returncode != 0:
        raise GitError(list(args), proc.returncode,
                       proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))
    return proc


def out(args: Sequence[str], cwd: Path | str | None = None, **kwargs: object) -> str:
    """Run git and return its stdout as stripped text."""
    return run(args, cwd, **kwargs).stdout.decode().strip()  # type: ignore[arg-type]


@contextmanager
def repository(path: Path | str, *, search_parents: bool = False) -> Iterator[gitpython.Repo]:
    """A GitPython repository whose git commands run with lmsforge's neutral configuration;
    closed on exit (GitPython keeps `git cat-file` processes open while it is in use)."""
    if shutil.which("git") is None:
        raise LmsforgeError(NO_GIT)
    repo = gitpython.Repo(path, search_parent_directories=search_parents)
    try:
        env = {k: v for k, v in git_env().items() if k.startswith(("GIT_", "LC_", "LANG", "TZ"))}
        # A GIT_DIR (or kin) inherited from a caller, e.g. a git hook, must not redirect us.
        env.update(GIT_DIR=repo.git_dir, GIT_COMMON_DIR=repo.common_dir,
                   GIT_OBJECT_DIRECTORY=str(Path(repo.common_dir) / "objects"),
                   GIT_INDEX_FILE=str(Path(repo.git_dir) / "index"))
        if repo.working_tree_dir:
            env["GIT_WORK_TREE"] = str(repo.working_tree_dir)
        repo.git.update_environment(**env)
        repo.git.set_persistent_git_options(c=list(_NEUTRAL_CONFIG[1::2]))
        yield repo
    finally:
        repo.close()


def is_repo(path: Path) -> bool:
    if not path.is_dir():
        return False
    try:
        with repository(path, search_parents=True):
            return True
    except (gitpython.InvalidGitRepositoryError, gitpython.NoSuchPathError):
        return False


def toplevel(path: Path) -> Path | None:
    try:
        with repository(path, search_parents=True) as repo:
            return Path(repo.working_tree_dir) if repo.working_tree_dir else None
    except (gitpython.InvalidGitRepositoryError, gitpython.NoSuchPathError):
        return None


def rev_parse(repo: Path, rev: str) -> str | None:
    """The commit REV names (a tag is peeled), or None when it names no commit."""
    with repository(repo, search_parents=True) as handle:
        try:
            return handle.commit(rev).hexsha
        except (BadName, BadObject, ValueError, gitpython.GitCommandError):
            return None


def tree_of(repo: Path, rev: str) -> str:
    with repository(repo, search_parents=True) as handle:
        return handle.commit(rev).tree.hexsha


def is_dirty(repo: Path) -> bool:
    """True when the work tree has staged, unstaged or untracked (not ignored) changes."""
    with repository(repo, search_parents=True) as handle:
        return handle.is_dirty(index=True, working_tree=True, untracked_files=True)


def uncommitted_changes(repo: Path) -> str:
    """What `git status` would list, counted: "" when clean (untracked, not ignored, count)."""
    lines = out(["status", "--porcelain", "--untracked-files=normal"], repo).splitlines()
    untracked = sum(1 for line in lines if line.startswith("??"))
    changed = len(lines) - untracked
    parts = [f"{changed} changed file{'s' * (changed != 1)}"] if changed else []
    parts += [f"{untracked} untracked file{'s' * (untracked != 1)}"] if untracked else []
    return ", ".join(parts)


def current_branch(repo: Path) -> str | None:
    with repository(repo, search_parents=True) as handle:
        return None if handle.head.is_detached else handle.head.ref.name


def in_progress_operation(repo: Path) -> str | None:
    """Name the am/rebase/merge/cherry-pick left half-done in REPO, if any."""
    with repository(repo, search_parents=True) as handle:
        git_dir = Path(handle.git_dir)
    for marker, name in (("rebase-apply", "git am or rebase"), ("rebase-merge", "rebase"),
                         ("MERGE_HEAD", "merge"), ("CHERRY_PICK_HEAD", "cherry-pick")):
        if (git_dir / marker).exists():
            return name
    return None
