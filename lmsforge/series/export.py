"""Turn a series branch into patch files, deterministically, and check the round trip.

Two exports of the same branch are byte-identical: ``--zero-commit`` hides commit ids,
``--no-signature`` hides the git version, ``--full-index`` avoids abbreviations whose length
depends on the repository's size, and files are named from the ``Lms-Patch-Id`` trailer rather
than the subject.
"""

from __future__ import annotations

import filecmp
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from lmsforge import git
from lmsforge.errors import CheckFailed, UsageError
from lmsforge.series import manifest as series_mod
from lmsforge.series.manifest import CLASS_TRAILER, CLASSES, PATCH_ID_TRAILER, SLUG, PatchEntry


@dataclass(frozen=True)
class CommitInfo:
    commit: str
    subject: str
    patch_slug: str
    klass: str


def series_commits(repo: Path, base: str, branch: str) -> list[CommitInfo]:
    """The branch's commits above BASE, oldest first, with their trailers checked."""
    if git.rev_parse(repo, branch) is None:
        raise UsageError(f"{repo} has no branch {branch}; make it with `lmsforge apply`")
    with git.repository(repo, search_parents=True) as handle:
        listed = list(handle.iter_commits(f"{base}..{branch}", reverse=True))
        if any(len(commit.parents) > 1 for commit in listed):
            raise UsageError(f"{branch} contains merge commits; rebase it onto {base} linearly")
        if not handle.is_ancestor(base, branch):
            raise UsageError(f"{branch} is not based on the tag commit {base}; rebase it first")
        found = [(c.hexsha, _subject(str(c.message)), _trailers(c)) for c in listed]
    commits: list[CommitInfo] = []
    seen: set[str] = set()
    for commit, subject, trailers in found:
        slug = ",".join(trailers.get(PATCH_ID_TRAILER.lower(), []))
        klass = ",".join(trailers.get(CLASS_TRAILER.lower(), []))
        short = commit[:12]
        if not SLUG.fullmatch(slug):
            raise UsageError(f"commit {short} ({subject}) lacks a valid `{PATCH_ID_TRAILER}:` "
                             "trailer; amend its message (lower-case slug)")
        if klass not in CLASSES:
            raise UsageError(f"commit {short} ({subject}) needs a `{CLASS_TRAILER}:` trailer, "
                             f"one of {', '.join(CLASSES)}")
        if slug in seen:
            raise UsageError(f"two commits carry `{PATCH_ID_TRAILER}: {slug}`; ids must be "
                             "unique")
        seen.add(slug)
        commits.append(CommitInfo(commit, subject, slug, klass))
    if not commits:
        raise UsageError(f"{branch} has no commits above the tag; nothing to export")
    return commits


def _subject(message: str) -> str:
    """git's %s: the first paragraph of the message on one line."""
    return " ".join(line.strip() for line in message.strip().split("\n\n", 1)[0].splitlines())


def _trailers(commit: object) -> dict[str, list[str]]:
    """Trailer values by lower-cased key (git matches trailer keys case-insensitively)."""
    found: dict[str, list[str]] = {}
    for key, value in commit.trailers_list:  # type: ignore[attr-defined]
        found.setdefault(key.lower(), []).append(value)
    return found


def format_patches(repo: Path, base: str, branch: str, dest: Path,
                   tmp_root: Path | None = None) -> list[PatchEntry]:
    """Write the branch's patches into DEST (an empty folder); return their manifest entries.

    TMP_ROOT holds the temporary files (default: $TMPDIR).
    """
    commits = series_commits(repo, base, branch)
    with tempfile.TemporaryDirectory(dir=tmp_root) as tmp:
        with git.repository(repo, search_parents=True) as handle:
            handle.git.format_patch("--quiet", "--zero-commit", "--no-signature", "-N",
                                    "--full-index", "--no-cover-letter", f"--base={base}",
                                    "-o", tmp, f"{base}..{branch}")
        produced = sorted(Path(tmp).glob("*.patch"))
        if len(produced) != len(commits):
            raise CheckFailed(f"git format-patch wrote {len(produced)} files for "
                              f"{len(commits)} commits")
        entries = []
        for number, (path, info) in enumerate(zip(produced, commits), 1):
            name = f"{number * 10:04d}-{info.patch_slug}.patch"
            shutil.move(str(path), dest / name)
            entries.append(PatchEntry(info.patch_slug, name, series_mod.patch_id(dest / name),
                                      info.klass, info.subject))
    return entries


def round_trip(repo: Path, base: str, branch: str, patch_files: list[Path],
               tmp_root: Path | None = None) -> None:
    """`git am` of PATCH_FILES onto BASE must give exactly the branch's tree.

    TMP_ROOT holds the temporary check-out (default: $TMPDIR).
    """
    from lmsforge.series import worktree

    expected = git.tree_of(repo, branch)
    with tempfile.TemporaryDirectory(prefix="lmsforge-roundtrip-", dir=tmp_root) as tmp:
        check_tree = Path(tmp) / "tree"
        git.run(["worktree", "add", "--quiet", "--detach", str(check_tree), base], repo)
        try:
            worktree.am(check_tree, patch_files)
            actual = git.tree_of(check_tree, "HEAD")
        finally:
            git.run(["worktree", "remove", "--force", str(check_tree)], repo, check=False)
            git.run(["worktree", "prune"], repo, check=False)
    if actual != expected:
        raise CheckFailed(f"round trip failed: applying the exported files gives tree {actual}, "
                          f"the branch has {expected}")


def same_files(a: Path, b: Path, names: list[str]) -> list[str]:
    """Names among NAMES whose bytes differ between folders A and B (a missing file differs)."""
    differ = []
    for name in names:
        pa, pb = a / name, b / name
        if not (pa.is_file() and pb.is_file() and filecmp.cmp(pa, pb, shallow=False)):
            differ.append(name)
    return differ
