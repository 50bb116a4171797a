"""Which frameworks, tags and series exist: what is declared under ``patches/<framework>/``.

A framework is declared by ``patches/<name>/upstream.yaml`` (its upstream sources); a series by
``patches/<name>/<tag>/series.yaml``. Every command that takes ``--framework``/``--tag`` resolves
them here, so an unknown name gets the same one-line answer everywhere.
"""

from __future__ import annotations

from pathlib import Path

from lmsforge.errors import UsageError
from lmsforge.series import manifest as series_mod
from lmsforge.upstream.sources import (UPSTREAM_FILE, FrameworkSources, check_ref_name,
                                       load_sources)


def known(patches_dir: Path) -> list[str]:
    if not patches_dir.is_dir():
        return []
    return sorted(p.name for p in patches_dir.iterdir() if (p / UPSTREAM_FILE).is_file())


def sources_for(patches_dir: Path, framework: str) -> FrameworkSources:
    names = known(patches_dir)
    if framework not in names:
        raise UsageError(f"unknown framework `{framework}`; known: {', '.join(names) or 'none'} "
                         f"(declared under {patches_dir})")
    return load_sources(patches_dir / framework / UPSTREAM_FILE)


def known_tags(patches_dir: Path, sources: FrameworkSources) -> list[str]:
    tags = set(sources.tags) | set(series_mod.available_tags(patches_dir, sources.framework))
    return sorted(tags, key=series_mod._version_key, reverse=True)


def check_tag(patches_dir: Path, sources: FrameworkSources, tag: str) -> None:
    """Accept declared tags and anything shaped like a release tag; refuse the rest."""
    if "/" in tag or tag.startswith("."):  # a path, not a tag: never a folder outside patches/
        raise UsageError(f"unknown tag `{tag}` for {sources.framework}; known tags: "
                         f"{', '.join(known_tags(patches_dir, sources))}")
    if tag in sources.tags or sources.is_release_tag(tag):
        return
    if (patches_dir / sources.framework / tag / series_mod.MANIFEST).is_file():
        # a series folder nobody declared: its name becomes the branch lms/<framework>/<tag>
        check_ref_name("tag", tag, f"rename {patches_dir / sources.framework / tag}")
        return
    raise UsageError(f"unknown tag `{tag}` for {sources.framework}; known tags: "
                     f"{', '.join(known_tags(patches_dir, sources))}")


def series_folder(patches_dir: Path, sources: FrameworkSources, tag: str) -> Path:
    """The series folder for TAG, or a usage error that says how to create one."""
    check_tag(patches_dir, sources, tag)
    folder = series_mod.find(patches_dir, sources.framework, tag)
    if (folder / series_mod.MANIFEST).is_file():
        return folder
    stray = sorted(folder.glob("*.patch")) if folder.is_dir() else []
    if stray:
        raise UsageError(f"{folder} has {len(stray)} .patch files but no {series_mod.MANIFEST}; "
                         f"restore it (`git checkout -- {folder / series_mod.MANIFEST}`) or "
                         "re-export the series from its branch with `lmsforge export`")
    have = series_mod.available_tags(patches_dir, sources.framework)
    source_tag = have[0] if have else "<tag>"
    if tag not in sources.tags:
        raise UsageError(
            f"no LMS series for {tag}, and {sources.framework}'s upstream.yaml does not declare "
            f"{tag}; if upstream has that tag, declare it (its commit, and any source archive) "
            f"in {patches_dir / sources.framework / 'upstream.yaml'}, then `lmsforge port "
            f"--framework {sources.framework} --from {source_tag} --to {tag}`")
    raise UsageError(
        f"no LMS series for {tag} yet; series exist for {', '.join(have) or 'no tag'}; create one "
        f"with `lmsforge port --framework {sources.framework} --from {source_tag} --to {tag}` "
        "on a host that can fetch the tag")
