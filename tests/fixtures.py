"""Real git repositories for tests: a small "upstream" with release tags, and series over it.

Nothing is mocked: the upstream is a git repository on disk, fetched through its path exactly as
lmsforge fetches GitHub, and series are made the way maintainers make them (commits with trailers
on the branch of a work tree made by `lmsforge apply`, then `lmsforge export`).
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import tarfile
from pathlib import Path

from click.testing import CliRunner, Result

from lmsforge.cli import main

ENV = {"GIT_AUTHOR_NAME": "upstream dev", "GIT_AUTHOR_EMAIL": "dev@upstream.invalid",
       "GIT_COMMITTER_NAME": "upstream dev", "GIT_COMMITTER_EMAIL": "dev@upstream.invalid",
       "GIT_AUTHOR_DATE": "1700000000 +0000", "GIT_COMMITTER_DATE": "1700000000 +0000",
       "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1"}
SERIES_ENV = {**ENV, "GIT_AUTHOR_NAME": "lmsforge", "GIT_AUTHOR_EMAIL": "lmsforge@lmsforge.invalid"}

ALLOCATOR_V1 = "".join(f"int step_{i}(void) {{ return {i}; }}\n" for i in range(40))
STORAGE_V1 = "struct storage {\n  void *data;\n  unsigned long size;\n};\n"


def git(cwd: Path, *args: str, env: dict[str, str] | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **(env or ENV)},
                          capture_output=True, text=True)
    if proc.returncode != 0:
        raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
    return proc.stdout.strip()


def make_upstream(root: Path) -> Path:
    """An upstream repo with tags v1.0.0, v1.1.0 (context moved), v2.0.0 (conflicting change)."""
    repo = root / "upstream"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "src").mkdir()
    (repo / "src" / "alloc.c").write_text(ALLOCATOR_V1)
    (repo / "src" / "storage.h").write_text(STORAGE_V1)
    (repo / "README").write_text("toy framework\n")
    (repo / ".gitignore").write_text("*.o\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "toy 1.0.0")
    git(repo, "tag", "v1.0.0")
    (repo / "src" / "alloc.c").write_text("/* header added upstream */\n" + ALLOCATOR_V1)
    git(repo, "commit", "-q", "-am", "toy 1.1.0: move code down")
    git(repo, "tag", "v1.1.0")
    (repo / "src" / "storage.h").write_text(STORAGE_V1.replace("unsigned long size", "size_t n"))
    git(repo, "commit", "-q", "-am", "toy 2.0.0: rename size")
    git(repo, "tag", "v2.0.0")
    return repo


def make_archive(upstream: Path, tag: str, dest: Path) -> tuple[Path, str]:
    """A source tarball of TAG with one top folder, as distributions publish them."""
    export = dest / f"toy-{tag}"
    export.mkdir(parents=True)
    data = subprocess.run(["git", "archive", "--format=tar", tag], cwd=upstream,
                          capture_output=True, check=True).stdout
    (dest / "raw.tar").write_bytes(data)
    with tarfile.open(dest / "raw.tar") as raw:
        raw.extractall(export, filter="data")
    archive = dest / f"toy_{tag}.orig.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(export, arcname=f"toy-{tag.lstrip('v')}")
    (dest / "raw.tar").unlink()
    return archive, hashlib.sha256(archive.read_bytes()).hexdigest()


def write_upstream_yaml(patches: Path, upstream: Path, archive: tuple[Path, str] | None = None,
                        url: str | None = None) -> None:
    """Declare the toy framework; URL replaces the upstream's path as the git remote."""
    folder = patches / "toy"
    folder.mkdir(parents=True, exist_ok=True)
    lines = ["framework: toy", "git:", f"  url: {url or upstream}", "tags:"]
    for tag in ("v1.0.0", "v1.1.0", "v2.0.0"):
        commit = git(upstream, "rev-parse", f"{tag}^{{commit}}")
        lines += [f"  {tag}:", f"    commit: {commit}"]
        if archive and tag == "v1.0.0":
            path, sha = archive
            lines += ["    archive:", f"      name: {path.name}", f"      sha256: {sha}",
                      "      top: toy-1.0.0", f"      url: {path.as_uri()}",
                      "      lacks: [vendored/ (removed by the packager)]"]
    lines += ["  v0.9.0: {}"]
    (folder / "upstream.yaml").write_text("\n".join(lines) + "\n")


def lmsforge(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def commit_patch(tree: Path, slug: str, klass: str, subject: str, edit) -> None:
    edit(tree)
    git(tree, "add", "-A")
    message = f"{subject}\n\nWhy: tests need a realistic series.\n\nLms-Patch-Id: {slug}\n" \
              f"Lms-Class: {klass}\n"
    git(tree, "commit", "-q", "-m", message, env=SERIES_ENV)


def add_lms_file(tree: Path) -> None:
    (tree / "src" / "lms.c").write_text("int lms_reclaim(void) { return 0; }\n")


def hook_allocator(tree: Path) -> None:
    path = tree / "src" / "alloc.c"
    text = path.read_text().replace("int step_20(void) { return 20; }\n",
                                    "int step_20(void) { return 20; }\n"
                                    "int lms_reclaim(void);\n")
    path.write_text(text)


def hook_storage(tree: Path) -> None:
    path = tree / "src" / "storage.h"
    path.write_text(path.read_text().replace("  unsigned long size;\n",
                                             "  unsigned long size;\n  void *lms;\n"))


def build_series(patches: Path, work: Path, tag: str = "v1.0.0") -> Path:
    """Make patches/toy/TAG the way a maintainer would: apply --new, commit, export."""
    tree = work / f"tree-{tag}"
    result = lmsforge("--patches-dir", str(patches), "apply", "-f", "toy", "-t", tag, "--new",
                      "--into", str(tree))
    assert result.exit_code == 0, result.output
    commit_patch(tree, "lms-core", "new-files", "Add the LMS core", add_lms_file)
    commit_patch(tree, "allocator-hook", "hook", "Reclaim in the allocator", hook_allocator)
    commit_patch(tree, "storage-hook", "hook", "Track LMS state per storage", hook_storage)
    result = lmsforge("--patches-dir", str(patches), "export", "-f", "toy", "-t", tag,
                      "--tree", str(tree))
    assert result.exit_code == 0, result.output
    return tree


def snapshot(path: Path) -> dict[str, bytes | str]:
    """Every file and folder under PATH with its bytes, to assert that nothing changed."""
    state: dict[str, bytes | str] = {}
    if not path.exists():
        return state
    for item in sorted(path.rglob("*")):
        rel = str(item.relative_to(path))
        if item.is_symlink():
            state[rel] = "symlink:" + os.readlink(item)
        elif item.is_file():
            state[rel] = item.read_bytes()
        else:
            state[rel] = "dir"
    return state


def one_line_error(result: Result) -> str:
    """The single `lmsforge: error:` line of a failed command (asserts there is exactly one)."""
    errors = [ln for ln in result.stderr.splitlines() if ln.startswith("lmsforge: error:")]
    assert len(errors) == 1, result.stderr
    return errors[0]
