"""Get an upstream tag's tree into the cache and say exactly what it is.

Two kinds of source (``sources.py``):

* ``git``: fetch the tag from the remote (or a local mirror), compare its commit with the pinned
  one, and keep it in ``repos/<framework>-git.git``.
* ``archive``: verify the archive's sha256 (on every use), import its tree into
  ``repos/<framework>-archive.git`` as one commit tagged with the upstream tag. The import commit
  has fixed author, date and message, so every machine that imports the same archive gets the same
  commit id: patch exports name it as their base and stay byte-identical across machines.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from lmsforge import debian, git
from lmsforge.cache import Cache
from lmsforge.errors import LmsforgeError, UsageError
from lmsforge.sources import ArchiveSource, FrameworkSources, TagSource

IMPORT_DATE = "946684800 +0000"  # 2000-01-01: any fixed date makes the import reproducible


@dataclass(frozen=True)
class TreeIdentity:
    """What an upstream tree is, precisely enough to trust a cached verification result."""

    framework: str
    tag: str
    kind: str  # "archive" or "git"
    commit: str  # the commit in the cache repository (the import commit for archives)
    tree: str
    repo: str  # the cache repository holding refs/tags/<tag>
    archive: str | None = None
    sha256: str | None = None
    url: str | None = None
    upstream_commit: str | None = None  # the tag's commit upstream, where known
    lacks: tuple[str, ...] = ()

    @property
    def complete(self) -> bool:
        return not self.lacks

    def summary(self) -> str:
        if self.kind == "archive":
            head = (f"{self.framework} {self.tag}: archive {self.archive} "
                    f"sha256 {self.sha256} (verified)")
        else:
            head = f"{self.framework} {self.tag}: git {self.url} commit {self.upstream_commit}"
        return f"{head}; tree {self.tree}, commit {self.commit}"

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["lacks"] = list(self.lacks)
        data["complete"] = self.complete
        return data


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def choose_kind(spec: TagSource, prefer: str, mirror: str | None) -> str:
    """Which source serves TAG: an explicit choice, a configured mirror, else the archive."""
    if prefer == "archive":
        if spec.archive is None:
            raise UsageError(f"{spec.tag} has no declared source archive; use --source git")
        return "archive"
    if prefer == "git" or mirror or spec.archive is None:
        return "git"
    return "archive"


def fetch(
    sources: FrameworkSources,
    tag: str,
    cache: Cache,
    *,
    prefer: str = "auto",
    archive_file: Path | None = None,
    mirror: str | None = None,
) -> TreeIdentity:
    spec = sources.tags.get(tag) or TagSource(tag, None, None)
    kind = "archive" if archive_file else choose_kind(spec, prefer, mirror)
    with cache.lock(f"{sources.framework}-{tag}"):
        if kind == "archive":
            assert spec.archive is not None or archive_file is None
            if spec.archive is None:
                raise UsageError(f"{sources.framework} {tag} declares no source archive, so "
                                 "--archive cannot be checked; declare it in upstream.yaml")
            identity = _fetch_archive(sources.framework, tag, spec, spec.archive, cache,
                                      archive_file)
        else:
            identity = _fetch_git(sources, tag, spec, cache, mirror)
        _record(cache, identity)
    return identity


def recorded(cache: Cache, framework: str, tag: str) -> dict[str, object] | None:
    path = cache.identity_file(framework, tag)
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def _record(cache: Cache, identity: TreeIdentity) -> None:
    path = cache.identity_file(identity.framework, identity.tag)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = json.loads(path.read_text()) if path.is_file() else {}
    data[identity.kind] = identity.to_json()
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


# --- archives --------------------------------------------------------------------------------


def _fetch_archive(framework: str, tag: str, spec: TagSource, source: ArchiveSource,
                   cache: Cache, archive_file: Path | None) -> TreeIdentity:
    cached = cache.archives / source.name
    if archive_file is not None:
        _adopt_local_archive(archive_file, source, cache)
    elif not cached.is_file():
        _download_archive(source, cache)
    actual = sha256_of(cached)
    if actual != source.sha256:
        raise UsageError(
            f"cached archive {cached} has sha256 {actual}, expected {source.sha256}; "
            "delete it and run `lmsforge fetch` again")
    repo = _ensure_bare_repo(cache.repo(framework, "archive"))
    commit = git.rev_parse(repo, f"refs/tags/{tag}")
    if commit is None:
        commit = _import_archive(repo, cached, source, framework, tag, cache)
    elif source.sha256 not in _commit_message(repo, commit):
        raise LmsforgeError(
            f"cache repository {repo} has a tag {tag} that was not imported from {source.name}; "
            "remove that cache folder and fetch again", 2)
    return TreeIdentity(
        framework=framework, tag=tag, kind="archive", commit=commit,
        tree=git.tree_of(repo, commit), repo=str(repo), archive=source.name,
        sha256=source.sha256, url=source.url, upstream_commit=spec.commit, lacks=source.lacks)


def _adopt_local_archive(path: Path, source: ArchiveSource, cache: Cache) -> None:
    if not path.is_file():
        raise UsageError(f"--archive {path}: no such file")
    actual = sha256_of(path)
    if actual != source.sha256:
        raise UsageError(
            f"{path} has sha256 {actual}, but {source.name} must have {source.sha256}; "
            "pass the right file")
    _install_verified(path, cache.archives / source.name, cache, copy=True)


def _download_archive(source: ArchiveSource, cache: Cache) -> None:
    cache.partial.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache.partial, prefix="download-") as tmp:
        work = Path(tmp)
        if source.debian is not None:
            downloaded = debian.download_orig(source.debian, source.name, cache.root / "apt",
                                              work / "files")
        elif source.url is not None:
            downloaded = work / source.name
            _download_url(source.url, downloaded)
        else:
            raise UsageError(f"{source.name} declares neither a Debian package nor a URL; "
                             "pass the file with --archive FILE")
        actual = sha256_of(downloaded)
        if actual != source.sha256:
            raise LmsforgeError(
                f"downloaded {source.name} has sha256 {actual}, expected {source.sha256}; "
                "the mirror serves a different file: check it or pass --archive FILE", 2)
        _install_verified(downloaded, cache.archives / source.name, cache, copy=False)


def _download_url(url: str, dest: Path) -> None:
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=60) as response, dest.open("wb") as out:
            shutil.copyfileobj(response, out, 1 << 20)
    except OSError as exc:
        raise LmsforgeError(f"cannot download {url} ({exc}); pass the file with --archive FILE",
                            2) from None


def _install_verified(src: Path, dest: Path, cache: Cache, *, copy: bool) -> None:
    """Put a verified file at DEST by rename, so DEST is complete or absent, never partial."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if copy:
        cache.partial.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache.partial, delete=False) as tmp:
            staged = Path(tmp.name)
        try:
            shutil.copyfile(src, staged)
            staged.replace(dest)
        finally:
            staged.unlink(missing_ok=True)
    else:
        shutil.move(str(src), str(dest)) if src.parent.stat().st_dev != dest.parent.stat().st_dev \
            else src.replace(dest)


def _ensure_bare_repo(repo: Path) -> Path:
    if not (repo / "HEAD").is_file():
        repo.parent.mkdir(parents=True, exist_ok=True)
        git.run(["init", "--quiet", "--bare", str(repo)])
        # Store archive bytes exactly: in-tree .gitattributes must not convert line endings or
        # run filters during the import.
        (repo / "info").mkdir(exist_ok=True)
        (repo / "info" / "attributes").write_text("* -text -eol -filter -ident\n")
    return repo


def import_message(framework: str, tag: str, source: ArchiveSource) -> str:
    return (f"Import {framework} {tag} from {source.name}\n\n"
            f"Lmsforge-Archive-Sha256: {source.sha256}\n")


def _import_archive(repo: Path, archive: Path, source: ArchiveSource, framework: str, tag: str,
                    cache: Cache) -> str:
    cache.partial.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache.partial, prefix="import-") as tmp:
        root = Path(tmp) / "tree"
        root.mkdir()
        untar = subprocess.run(["tar", "-xf", str(archive), "-C", str(root)],
                               capture_output=True, text=True)
        if untar.returncode != 0:
            raise LmsforgeError(f"cannot unpack {archive}: {untar.stderr.strip()}", 2)
        entries = sorted(p.name for p in root.iterdir())
        if entries != [source.top]:
            raise LmsforgeError(
                f"{source.name} unpacks to {entries}, expected the single folder {source.top}; "
                "fix `top` in upstream.yaml", 2)
        env = {"GIT_DIR": str(repo), "GIT_WORK_TREE": str(root / source.top),
               "GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git.run(["add", "--all", "--force", "."], root / source.top, env=env)
        tree = git.out(["write-tree"], root / source.top, env=env)
    stamp = {"GIT_AUTHOR_NAME": git.LMSFORGE_NAME, "GIT_AUTHOR_EMAIL": git.LMSFORGE_EMAIL,
             "GIT_AUTHOR_DATE": IMPORT_DATE, "GIT_COMMITTER_NAME": git.LMSFORGE_NAME,
             "GIT_COMMITTER_EMAIL": git.LMSFORGE_EMAIL, "GIT_COMMITTER_DATE": IMPORT_DATE}
    commit = git.out(["commit-tree", tree], repo, env=stamp,
                     input=import_message(framework, tag, source).encode())
    git.run(["update-ref", f"refs/tags/{tag}", commit, ""], repo)
    return commit


def _commit_message(repo: Path, commit: str) -> str:
    return git.out(["log", "-1", "--format=%B", commit], repo)


# --- git remotes -----------------------------------------------------------------------------


def _fetch_git(sources: FrameworkSources, tag: str, spec: TagSource, cache: Cache,
               mirror: str | None) -> TreeIdentity:
    url = mirror or sources.git_url
    repo = _ensure_bare_repo(cache.repo(sources.framework, "git"))
    incoming = f"refs/lmsforge/incoming/{tag}"
    proc = git.run(["fetch", "--quiet", "--no-tags", url, f"+refs/tags/{tag}:{incoming}"], repo,
                   check=False)
    if proc.returncode != 0:
        reason = git.GitError(["fetch"], proc.returncode, "", proc.stderr.decode()).stderr
        first = next((ln for ln in reason.splitlines() if ln.strip()), "no output")
        if "couldn't find remote ref" in reason:
            raise UsageError(f"{url} has no tag {tag}; check the tag's name")
        raise UsageError(
            f"cannot fetch tag {tag} from {url} ({first.strip()}); on a site without access, "
            "pass --mirror PATH_OR_URL to a local mirror")
    try:
        commit = git.out(["rev-parse", f"{incoming}^{{commit}}"], repo)
        pinned = spec.commit or _previously_seen(cache, sources.framework, tag)
        if pinned and commit != pinned:
            raise UsageError(
                f"tag {tag} at {url} points to {commit}, but {sources.framework} {tag} is pinned "
                f"to {pinned}: the tag moved; check the mirror, or update the pin in "
                "upstream.yaml after review")
        old = git.rev_parse(repo, f"refs/tags/{tag}")
        if old != commit:
            git.run(["update-ref", f"refs/tags/{tag}", commit], repo)
    finally:
        git.run(["update-ref", "-d", incoming], repo, check=False)
    return TreeIdentity(
        framework=sources.framework, tag=tag, kind="git", commit=commit,
        tree=git.tree_of(repo, commit), repo=str(repo), url=url, upstream_commit=commit)


def _previously_seen(cache: Cache, framework: str, tag: str) -> str | None:
    """A tag with no pin in upstream.yaml is pinned by its first fetch into this cache."""
    data = recorded(cache, framework, tag) or {}
    seen = data.get("git")
    return seen.get("commit") if isinstance(seen, dict) else None  # type: ignore[return-value]
