"""Where each upstream tag's tree comes from, as declared in ``patches/<framework>/upstream.yaml``.

A tag can be served by a git remote (the tag plus its pinned commit; GitHub by default, a local
mirror for air-gapped sites) and/or by a source archive with a known sha256 (e.g. Debian's
``.orig`` tarball), which lmsforge imports into a cached git repository.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lmsforge.errors import UsageError

UPSTREAM_FILE = "upstream.yaml"


@dataclass(frozen=True)
class DebianPackage:
    package: str
    version: str


@dataclass(frozen=True)
class ArchiveSource:
    name: str  # file name of the archive, also its name in the cache
    sha256: str
    top: str  # the single top-level folder inside the archive
    url: str | None = None
    debian: DebianPackage | None = None
    lacks: tuple[str, ...] = ()  # what upstream's git tree has and this archive does not

    @property
    def complete(self) -> bool:
        """An archive that lacks parts of the tree serves every level except a full build."""
        return not self.lacks


@dataclass(frozen=True)
class TagSource:
    tag: str
    commit: str | None  # the tag's commit in the upstream git repository, where known
    archive: ArchiveSource | None


@dataclass(frozen=True)
class FrameworkSources:
    framework: str
    git_url: str
    tag_pattern: re.Pattern[str]
    tags: dict[str, TagSource] = field(default_factory=dict)

    def is_release_tag(self, tag: str) -> bool:
        return bool(self.tag_pattern.fullmatch(tag))


# What git refuses in one component of a ref (git-check-ref-format), plus "/" and a leading "-":
# framework and tag each become one component of the branch lms/<framework>/<tag> and of a
# folder under patches/, and a leading "-" reads as an option to git.
_BAD_IN_REF = re.compile(r"[\x00-\x20\x7f~^:?*\[\\/]|\.\.|@\{")


def ref_name_problem(name: str) -> str | None:
    """Why NAME cannot be one component of a git ref (a framework or a tag), or None."""
    if not name:
        return "it is empty"
    found = _BAD_IN_REF.search(name)
    if found:
        return f"it contains {found.group()!r}"
    if name.startswith((".", "-")) or name.endswith((".", ".lock")) or name == "@":
        return "git refs cannot start with '.' or '-', end with '.' or '.lock', or be '@'"
    return None


def check_ref_name(kind: str, name: str, fix: str) -> None:
    """A one-line usage error when NAME (a KIND: framework or tag) cannot be part of the branch
    lms/<framework>/<tag>; FIX says where to correct it."""
    problem = ref_name_problem(name)
    if problem:
        raise UsageError(f"{kind} {name!r} cannot be part of a git branch name ({problem}); "
                         f"{fix} (letters, digits, '.', '_' and '-' are safe)")


def _fail(path: Path, where: str, what: str) -> UsageError:
    return UsageError(f"{path}: {where}: {what}; fix the file and run again")


def load_sources(path: Path) -> FrameworkSources:
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f"line {mark.line + 1}" if mark else "top"
        raise _fail(path, line, "not valid YAML") from None
    if not isinstance(data, dict):
        raise _fail(path, "top", "expected a mapping")
    framework = data.get("framework")
    git_url = (data.get("git") or {}).get("url")
    pattern = data.get("release_tag_pattern", r"v\d+\.\d+\.\d+")
    if not isinstance(framework, str) or not framework:
        raise _fail(path, "framework", "missing")
    if not isinstance(git_url, str) or not git_url:
        raise _fail(path, "git.url", "missing")
    # checked before anything uses the names, so no work and no recorded result comes first
    check_ref_name("framework", framework, f"rename it in {path}")
    check_ref_name("framework folder", path.parent.name, f"rename {path.parent}")
    tags: dict[str, TagSource] = {}
    for tag, spec in (data.get("tags") or {}).items():
        spec = spec or {}
        check_ref_name("tag", str(tag), f"fix tags in {path}")
        if not isinstance(spec, dict):
            raise _fail(path, f"tags.{tag}", "expected a mapping")
        commit = spec.get("commit")
        if commit is not None and not re.fullmatch(r"[0-9a-f]{40}", str(commit)):
            raise _fail(path, f"tags.{tag}.commit", "expected a full 40-digit commit id")
        tags[str(tag)] = TagSource(str(tag), commit, _load_archive(path, tag, spec.get("archive")))
    return FrameworkSources(framework, git_url, re.compile(pattern), tags)


def _load_archive(path: Path, tag: str, spec: object) -> ArchiveSource | None:
    if spec is None:
        return None
    if not isinstance(spec, dict):
        raise _fail(path, f"tags.{tag}.archive", "expected a mapping")
    for key in ("name", "sha256", "top"):
        if not isinstance(spec.get(key), str):
            raise _fail(path, f"tags.{tag}.archive.{key}", "missing")
    if not re.fullmatch(r"[0-9a-f]{64}", spec["sha256"]):
        raise _fail(path, f"tags.{tag}.archive.sha256", "expected 64 hex digits")
    debian = spec.get("debian")
    return ArchiveSource(
        name=spec["name"],
        sha256=spec["sha256"],
        top=spec["top"],
        url=spec.get("url"),
        debian=DebianPackage(debian["package"], debian["version"]) if debian else None,
        lacks=tuple(spec.get("lacks") or ()),
    )
