"""Work trees: an upstream tag checked out with a series applied as commits by plain `git am`.

A work tree records what it was made from in ``.git/lmsforge.json`` so `export`, `status` and
`verify` know the framework, tag, base commit and upstream identity without asking again.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import filelock

from lmsforge import git
from lmsforge.errors import LmsforgeError, UsageError
from lmsforge.series import patchfile
from lmsforge.upstream.tree import TreeIdentity

META_FILE = "lmsforge.json"
# Commits made by `git am` get our committer identity and a fixed committer date, so the branch
# a series produces has the same commit ids on every machine.
AM_ENV = {"GIT_COMMITTER_NAME": git.LMSFORGE_NAME, "GIT_COMMITTER_EMAIL": git.LMSFORGE_EMAIL,
          "GIT_COMMITTER_DATE": "946684800 +0000"}


def branch_name(framework: str, tag: str) -> str:
    return f"lms/{framework}/{tag}"


@dataclass(frozen=True)
class WorkTree:
    path: Path
    framework: str
    tag: str
    base: str
    identity: dict[str, object]

    @property
    def branch(self) -> str:
        return branch_name(self.framework, self.tag)


def read_meta(path: Path) -> WorkTree | None:
    if not git.is_repo(path):
        return None
    meta = Path(git.out(["rev-parse", "--absolute-git-dir"], path)) / META_FILE
    if not meta.is_file():
        return None
    data = json.loads(meta.read_text())
    return WorkTree(path, data["framework"], data["tag"], data["base"], data["identity"])


def write_meta(tree: WorkTree) -> None:
    meta = Path(git.out(["rev-parse", "--absolute-git-dir"], tree.path)) / META_FILE
    meta.write_text(json.dumps({"framework": tree.framework, "tag": tree.tag, "base": tree.base,
                                "identity": tree.identity}, indent=2, sort_keys=True) + "\n")


@contextmanager
def target_lock(path: Path) -> Iterator[None]:
    """Only one lmsforge at a time makes a work tree in PATH (any cache, same user)."""
    key = hashlib.sha256(str(path.absolute()).encode()).hexdigest()[:24]
    folder = Path(tempfile.gettempdir()) / f"lmsforge-{os.getuid()}" / "work-trees"
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = filelock.FileLock(str(folder / f"{key}.lock"), timeout=0)
    try:
        lock.acquire()
    except filelock.Timeout:
        raise UsageError(f"another lmsforge is making a work tree in {path}; wait for it to "
                         "finish, or pass another --into") from None
    try:
        yield
    finally:
        lock.release()


def _check_writable(path: Path) -> None:
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not os.access(existing, os.W_OK | os.X_OK):
        what = f"{path}" if existing == path else f"{existing} (to create {path} in)"
        raise UsageError(f"{what} is not writable by this user; pass --into a folder you can "
                         "write")


def check_target(path: Path, framework: str, tag: str) -> bool:
    """Refuse a folder we must not touch; return True when PATH is an existing git work tree."""
    if path.exists() and not path.is_dir():
        raise UsageError(f"{path} is a file, not a folder; pass another --into")
    _check_writable(path)
    if not path.exists() or not any(path.iterdir()):
        return False
    top = git.toplevel(path) if git.is_repo(path) else None
    if top is None or top.resolve() != path.resolve():
        raise UsageError(f"{path} is not empty and not a git work tree; pass a new or empty "
                         "folder with --into")
    if git.in_progress_operation(path):
        raise UsageError(f"{path} has a {git.in_progress_operation(path)} in progress; finish or "
                         "abort it first")
    if git.is_dirty(path):
        raise UsageError(f"{path} has uncommitted changes; commit or stash them first, or pass "
                         "another --into")
    if git.rev_parse(path, f"refs/heads/{branch_name(framework, tag)}"):
        raise UsageError(f"branch {branch_name(framework, tag)} already exists in {path}; work "
                         "there, or pass another --into")
    return True


def check_related(path: Path, identity: TreeIdentity) -> None:
    """An existing repository is taken only if it holds this framework already (an lmsforge work
    tree of it, the tag's commit, or its upstream commit) or nothing at all (no ref: a fresh
    `git init`, as a port makes). Anything else is someone's other work."""
    meta = read_meta(path)
    if meta is not None and meta.framework == identity.framework:
        return
    if not git.out(["for-each-ref", "--count=1", "--format=%(refname)"], path):
        return
    for commit in (identity.commit, identity.upstream_commit):
        if commit and git.run(["cat-file", "-e", f"{commit}^{{commit}}"], path,
                              check=False).returncode == 0:
            return
    raise UsageError(f"{path} is a git repository that holds neither {identity.framework} "
                     f"{identity.tag} nor an lmsforge work tree of it; pass a new or empty folder "
                     "with --into")


def init_repo(path: Path) -> None:
    """`git init` PATH (again, harmlessly, if it is one) for byte-exact checkouts."""
    git.run(["init", "--quiet", str(path)])
    # Check files out byte for byte, whatever the tree's .gitattributes say.
    attributes = Path(git.out(["rev-parse", "--absolute-git-dir"], path)) / "info"
    attributes.mkdir(exist_ok=True)
    (attributes / "attributes").write_text("* -text -eol -filter -ident\n")


def create(path: Path, identity: TreeIdentity, patches: list[Path]) -> WorkTree:
    """Make PATH a work tree at the tag with PATCHES applied; on failure leave PATH as it was."""
    existing = check_target(path, identity.framework, identity.tag)
    if existing:
        check_related(path, identity)
    created_folder = not path.exists()
    if created_folder:
        try:
            path.mkdir(parents=True)
        except FileExistsError:  # made by someone else meanwhile: never ours to remove
            raise UsageError(f"{path} appeared while lmsforge was preparing it; pass another "
                             "--into") from None
    branch = branch_name(identity.framework, identity.tag)
    previous_head = None
    fetched_tag = None
    try:
        if not existing:
            init_repo(path)
        else:
            previous_head = git.current_branch(path) or git.rev_parse(path, "HEAD")
        tag_ref = f"refs/tags/{identity.tag}"
        have = git.rev_parse(path, tag_ref)
        if have is not None and have != identity.commit:
            raise UsageError(f"{path} has a tag {identity.tag} at {have}, not the fetched "
                             f"{identity.commit}; use a new --into folder")
        if have is None:
            git.run(["fetch", "--quiet", "--no-tags", identity.repo, f"{tag_ref}:{tag_ref}"], path)
            fetched_tag = tag_ref
        git.run(["checkout", "--quiet", "-b", branch, identity.commit], path)
        tree = WorkTree(path, identity.framework, identity.tag, identity.commit,
                        identity.to_json())
        write_meta(tree)
        am(path, patches)
        return tree
    except BaseException:
        _undo(path, created_folder, existing, previous_head, branch, fetched_tag)
        raise


def _undo(path: Path, created_folder: bool, existing: bool, previous_head: str | None,
          branch: str, fetched_tag: str | None) -> None:
    if not existing:
        # We made this folder (or it was empty): put it back as it was.
        if created_folder:
            shutil.rmtree(path, ignore_errors=True)
        else:
            for child in path.iterdir():
                shutil.rmtree(child) if child.is_dir() and not child.is_symlink() \
                    else child.unlink()
        return
    if git.in_progress_operation(path):
        git.run(["am", "--abort"], path, check=False)
    if previous_head:
        git.run(["checkout", "--quiet", previous_head], path, check=False)
    git.run(["branch", "--quiet", "-D", branch], path, check=False)
    if fetched_tag:
        git.run(["update-ref", "-d", fetched_tag], path, check=False)


def am(path: Path, patches: list[Path]) -> None:
    """`git am` the patches exactly (no -3, no fuzz); on failure abort and say what broke.

    --keep-cr: a patch line of a CRLF file ends in CR LF, and `git am` would strip the CR (its
    mail splitting assumes a mail transport's line ends), so the hunk would not match the file.
    """
    if not patches:
        return
    with git.repository(path) as repo:
        status, stdout, stderr = repo.git.am("--quiet", "--keep-cr", *[str(p) for p in patches], env=AM_ENV,
                                             with_extended_output=True, with_exceptions=False)
    if status == 0:
        return
    stderr = f"{stderr}\n{stdout}"
    failed = _failed_patch(path, patches)
    git.run(["am", "--abort"], path, check=False)
    raise UsageError(describe_am_failure(failed, stderr))


def carries(path: Path, base: str, patches: list[Path]) -> bool:
    """Whether the work tree at PATH is BASE with PATCHES applied, committed and clean.

    The expected tree is made in a scratch index (`git apply --cached`), so the check touches no
    file: applying the series again would rewrite every patched file, and an incremental build
    of the tree would then recompile everything that includes them."""
    if not git.is_repo(path) or git.in_progress_operation(path):
        return False
    with tempfile.TemporaryDirectory() as scratch:
        env = {"GIT_INDEX_FILE": str(Path(scratch) / "index")}
        if git.run(["read-tree", base], path, env=env, check=False).returncode != 0:
            return False
        applied = git.run(["apply", "--cached", *(str(p.resolve()) for p in patches)], path,
                          env=env, check=False) if patches else None
        if applied is not None and applied.returncode != 0:
            return False
        expected = git.out(["write-tree"], path, env=env)
    return expected == git.tree_of(path, "HEAD") and not git.is_dirty(path)


def _failed_patch(path: Path, patches: list[Path]) -> Path | None:
    apply_dir = Path(git.out(["rev-parse", "--absolute-git-dir"], path)) / "rebase-apply"
    try:
        number = int((apply_dir / "next").read_text())
    except (OSError, ValueError):
        return None
    return patches[number - 1] if 0 < number <= len(patches) else None


def describe_am_failure(patch: Path | None, stderr: str) -> str:
    name = patch.name if patch else "a patch"
    where = re.search(r"error: patch failed: (.+):(\d+)", stderr)
    missing = re.search(r"error: (.+): does not exist in index", stderr)
    exists = re.search(r"error: (.+): already exists in index", stderr)
    if where and patch is not None:
        file, line = where.group(1), int(where.group(2))
        try:
            hunk = patchfile.parse(patch).hunk_number(file, line)
        except LmsforgeError:
            hunk = None
        hunk_text = f"hunk {hunk} (at line {line})" if hunk else f"the hunk at line {line}"
        detail = f"{file} {hunk_text} does not match the tree"
    elif missing:
        detail = f"{missing.group(1)} does not exist in the tree"
    elif exists:
        detail = f"{exists.group(1)} already exists in the tree"
    else:
        lines = [ln for ln in stderr.splitlines() if ln.strip()]
        detail = lines[0] if lines else "git am failed"
    return (f"{name} does not apply: {detail}; the series needs porting to this tree "
            "(`lmsforge port`) or the patch must be fixed on its branch")
