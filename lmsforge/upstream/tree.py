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

import errno
import hashlib
import json
import os
import shutil
import subprocess
from dataclasses import asdict, dataclass
from pathlib import Path

from lmsforge import git, ui
from lmsforge.cache import Cache
from lmsforge.errors import EXIT_FAILED, LmsforgeError, UsageError
from lmsforge.upstream import debian
from lmsforge.upstream.sources import ArchiveSource, FrameworkSources, TagSource

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
    """The identities recorded by earlier fetches; None when absent or unreadable (damaged files
    are rewritten by the next fetch: every field in them is re-derived from the source)."""
    path = cache.identity_file(framework, tag)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError):
        return None
    return data if isinstance(data, dict) else None


def _record(cache: Cache, identity: TreeIdentity) -> None:
    path = cache.identity_file(identity.framework, identity.tag)
    previous = recorded(cache, identity.framework, identity.tag)
    if previous is None and path.is_file():
        ui.say(f"replacing the damaged identity record {path}")
    data = dict(previous or {})
    data[identity.kind] = identity.to_json()
    if data == previous:
        return  # nothing new: a read-only cache needs no write here
    cache.require_writable(f"cannot record the identity of {identity.framework} {identity.tag}")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


# --- archives --------------------------------------------------------------------------------


def _fetch_archive(framework: str, tag: str, spec: TagSource, source: ArchiveSource,
                   cache: Cache, archive_file: Path | None) -> TreeIdentity:
    cached = cache.archives / source.name
    if archive_file is not None:
        _adopt_local_archive(archive_file, source, cache)
    elif not cached.is_file():
        cache.require_writable(f"lacks {source.name}; ask its owner to run `lmsforge fetch "
                               f"--framework {framework} --tag {tag}` there")
        _download_archive(source, cache)
    actual = sha256_of(cached)
    if actual != source.sha256:
        raise UsageError(
            f"cached archive {cached} has sha256 {actual}, expected {source.sha256}; "
            "delete it and run `lmsforge fetch` again")
    repo = cache.repo(framework, "archive")
    commit = git.rev_parse(repo, f"refs/tags/{tag}") if (repo / "HEAD").is_file() else None
    if commit is None:
        cache.require_writable(f"has not imported {framework} {tag} yet; ask its owner to run "
                               f"`lmsforge fetch --framework {framework} --tag {tag}` there")
        _ensure_bare_repo(repo)
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
    cached = cache.archives / source.name
    if cached.is_file() and sha256_of(cached) == source.sha256:
        return  # the same verified bytes are cached already
    cache.require_writable(f"cannot take in {path.name}")
    _install_verified(path, cache.archives / source.name, cache, copy=True)


def _download_archive(source: ArchiveSource, cache: Cache) -> None:
    with cache.scratch("download") as work:
        if source.debian is not None:
            # apt's lists folder is one per cache, whatever the tag: one apt at a time.
            with cache.lock("apt-state"):
                # apt dies with lmsforge already (run_apt); it holds WORK's lock too.
                downloaded = debian.download_orig(source.debian, source.name,
                                                  cache.root / "apt", work / "files",
                                                  hold=(cache.held_lock(work),))
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
        if exc.errno == errno.ENOSPC:
            raise
        raise LmsforgeError(f"cannot download {url} ({exc}); check the network, or pass the file "
                            "with --archive FILE", EXIT_FAILED) from None


def _install_verified(src: Path, dest: Path, cache: Cache, *, copy: bool) -> None:
    """Put a verified file at DEST by rename, so DEST is complete or absent, never partial."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    if copy:
        with cache.scratch("adopt") as work:
            staged = work / dest.name
            shutil.copyfile(src, staged)
            staged.replace(dest)
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
    with cache.scratch("import") as tmp:
        root = tmp / "tree"
        root.mkdir()
        # Both children write into TMP: they hold its lock and die with us (Cache.child_options).
        children = cache.child_options(tmp)
        untar = subprocess.run(tar_command(archive, root), capture_output=True, text=True,
                               **children)  # type: ignore[call-overload]
        if untar.returncode != 0:
            raise tar_error(archive, root, untar.stderr)
        entries = sorted(p.name for p in root.iterdir())
        if entries != [source.top]:
            raise LmsforgeError(
                f"{source.name} unpacks to {entries}, expected the single folder {source.top}; "
                "fix `top` in upstream.yaml", 2)
        env = {"GIT_DIR": str(repo), "GIT_WORK_TREE": str(root / source.top),
               "GIT_INDEX_FILE": str(tmp / "index")}
        git.run(["add", "--all", "--force", "."], root / source.top, env=env,
                child_options=children)
        tree = git.out(["write-tree"], root / source.top, env=env, child_options=children)
    stamp = {"GIT_AUTHOR_NAME": git.LMSFORGE_NAME, "GIT_AUTHOR_EMAIL": git.LMSFORGE_EMAIL,
             "GIT_AUTHOR_DATE": IMPORT_DATE, "GIT_COMMITTER_NAME": git.LMSFORGE_NAME,
             "GIT_COMMITTER_EMAIL": git.LMSFORGE_EMAIL, "GIT_COMMITTER_DATE": IMPORT_DATE}
    commit = git.out(["commit-tree", tree], repo, env=stamp,
                     input=import_message(framework, tag, source).encode())
    git.run(["update-ref", f"refs/tags/{tag}", commit, ""], repo)
    return commit


def tar_command(archive: Path, into: Path) -> list[str]:
    # Files belong to whoever imports them: as root, GNU tar would otherwise restore the
    # packager's owners, which fails without CAP_CHOWN (containers, fakeroot).
    return ["tar", "--no-same-owner", "--no-same-permissions", "-xf", str(archive), "-C",
            str(into)]


def tar_error(archive: Path, into: Path, stderr: str) -> LmsforgeError:
    """One line for a failed unpack, however many lines tar wrote."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if any("No space left on device" in line for line in lines):
        return LmsforgeError(f"no space left on the device of {into} while unpacking "
                             f"{archive.name}; free space there or pass --cache-dir on a larger "
                             "disk", EXIT_FAILED)
    first = lines[0].strip() if lines else "no output"
    more = f" (and {len(lines) - 1} more lines)" if len(lines) > 1 else ""
    return LmsforgeError(f"cannot unpack {archive.name}: {first}{more}; check the file, or "
                         "delete it from the cache and fetch again", 2)


def _commit_message(repo: Path, commit: str) -> str:
    return git.out(["log", "-1", "--format=%B", commit], repo)


# --- git remotes -----------------------------------------------------------------------------


def _fetch_git(sources: FrameworkSources, tag: str, spec: TagSource, cache: Cache,
               mirror: str | None) -> TreeIdentity:
    url = mirror or sources.git_url
    repo = cache.repo(sources.framework, "git")
    pinned = spec.commit or _previously_seen(cache, sources.framework, tag)
    if not cache.writable() and (repo / "HEAD").is_file() and pinned and \
            git.rev_parse(repo, f"refs/tags/{tag}") == pinned:
        # A read-only cache that has the pinned commit: nothing to fetch, nothing to write.
        return TreeIdentity(
            framework=sources.framework, tag=tag, kind="git", commit=pinned,
            tree=git.tree_of(repo, pinned), repo=str(repo), url=url, upstream_commit=pinned)
    cache.require_writable(f"git fetches write into it ({sources.framework} {tag})")
    repo = _ensure_bare_repo(repo)
    incoming = f"refs/lmsforge/incoming/{tag}"
    proc = git.run(["fetch", "--quiet", "--no-tags", url, f"+refs/tags/{tag}:{incoming}"], repo,
                   check=False)
    if proc.returncode != 0:
        reason = proc.stderr.decode(errors="replace")
        first = next((ln for ln in reason.splitlines() if ln.strip()), "no output")
        if "couldn't find remote ref" in reason:
            raise UsageError(f"{url} has no tag {tag}; check the tag name (or the mirror)")
        raise LmsforgeError(
            f"cannot fetch tag {tag} from {url} ({first.strip()}); check the network, or on a "
            "site without access pass --mirror PATH_OR_URL to a local mirror", EXIT_FAILED)
    try:
        commit = git.out(["rev-parse", f"{incoming}^{{commit}}"], repo)
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
