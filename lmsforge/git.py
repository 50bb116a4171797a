"""The git operations lmsforge uses, as a thin wrapper over the git binary.

Every call runs with a fixed, minimal configuration so results do not depend on the user's
``~/.gitconfig`` (hooks, signing, autocrlf, pagers), which is what makes imports and exports
byte-reproducible across machines.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Mapping, Sequence

from lmsforge.errors import LmsforgeError

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
) -> subprocess.CompletedProcess[bytes]:
    """Run ``git ARGS`` and return the completed process (bytes out)."""
    proc = subprocess.run(
        ["git", *_NEUTRAL_CONFIG, *args],
        cwd=cwd,
        env=git_env(env),
        input=input,
        capture_output=True,
    )
    if check and proc.returncode != 0:
        raise GitError(list(args), proc.returncode,
                       proc.stdout.decode(errors="replace"), proc.stderr.decode(errors="replace"))
    return proc


def out(args: Sequence[str], cwd: Path | str | None = None, **kwargs: object) -> str:
    """Run git and return its stdout as stripped text."""
    return run(args, cwd, **kwargs).stdout.decode().strip()  # type: ignore[arg-type]


def is_repo(path: Path) -> bool:
    if not path.is_dir():
        return False
    proc = run(["rev-parse", "--git-dir"], path, check=False)
    return proc.returncode == 0


def toplevel(path: Path) -> Path | None:
    proc = run(["rev-parse", "--show-toplevel"], path, check=False)
    if proc.returncode != 0:
        return None
    return Path(proc.stdout.decode().strip())


def rev_parse(repo: Path, rev: str) -> str | None:
    proc = run(["rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], repo, check=False)
    if proc.returncode != 0:
        return None
    return proc.stdout.decode().strip()


def tree_of(repo: Path, rev: str) -> str:
    return out(["rev-parse", f"{rev}^{{tree}}"], repo)


def is_dirty(repo: Path) -> bool:
    """True when the work tree has staged, unstaged or untracked (not ignored) changes."""
    return bool(out(["status", "--porcelain", "--untracked-files=normal"], repo))


def uncommitted_changes(repo: Path) -> str:
    """What `git status` would list, counted: "" when clean (untracked, not ignored, count)."""
    lines = out(["status", "--porcelain", "--untracked-files=normal"], repo).splitlines()
    untracked = sum(1 for line in lines if line.startswith("??"))
    changed = len(lines) - untracked
    parts = [f"{changed} changed file{'s' * (changed != 1)}"] if changed else []
    parts += [f"{untracked} untracked file{'s' * (untracked != 1)}"] if untracked else []
    return ", ".join(parts)


def current_branch(repo: Path) -> str | None:
    proc = run(["symbolic-ref", "--quiet", "--short", "HEAD"], repo, check=False)
    return proc.stdout.decode().strip() or None


def in_progress_operation(repo: Path) -> str | None:
    """Name the am/rebase/merge/cherry-pick left half-done in REPO, if any."""
    git_dir = Path(out(["rev-parse", "--absolute-git-dir"], repo))
    for marker, name in (("rebase-apply", "git am or rebase"), ("rebase-merge", "rebase"),
                         ("MERGE_HEAD", "merge"), ("CHERRY_PICK_HEAD", "cherry-pick")):
        if (git_dir / marker).exists():
            return name
    return None
