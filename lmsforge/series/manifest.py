"""The series format: ``series.yaml`` manifest, ``series`` order file, ``NNNN-<slug>.patch`` files.

``load`` validates a series folder completely and names every problem it finds (all of them, not
just the first), because a maintainer fixing a series by hand wants one list, not a loop.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lmsforge import git
from lmsforge.errors import UsageError
from lmsforge.series import patchfile

FORMAT_VERSION = 1
MANIFEST = "series.yaml"
ORDER_FILE = "series"
CLASSES = ("new-files", "hook", "policy", "bindings", "tests", "docs", "build-fix")
PATCH_NAME = re.compile(r"(\d{4})-([a-z0-9][a-z0-9-]*)\.patch")
SLUG = re.compile(r"[a-z0-9][a-z0-9-]*")
PATCH_ID_TRAILER = "Lms-Patch-Id"
CLASS_TRAILER = "Lms-Class"


@dataclass(frozen=True)
class PatchEntry:
    id: str
    file: str
    patch_id: str  # `git patch-id --stable` of the file
    klass: str
    purpose: str

    def to_yaml(self) -> dict[str, str]:
        return {"id": self.id, "file": self.file, "patch_id": self.patch_id,
                "class": self.klass, "purpose": self.purpose}


@dataclass
class Series:
    folder: Path
    framework: str
    tag: str
    base: str  # the commit the patches were exported against (`base-commit:`)
    upstream: dict[str, object]  # identities this series was verified on
    ported_from: dict[str, object] | None
    patches: list[PatchEntry]
    skipped: list[dict[str, str]] = field(default_factory=list)  # patches dropped by a port

    def paths(self) -> list[Path]:
        return [self.folder / p.file for p in self.patches]

    def content_hash(self) -> str:
        return series_hash(self.paths())


class SeriesProblems(UsageError):
    def __init__(self, folder: Path, problems: list[str]) -> None:
        self.problems = problems
        shown = "; ".join(problems[:4]) + (f"; and {len(problems) - 4} more" if len(problems) > 4
                                           else "")
        super().__init__(f"series {folder}: {shown}; fix these (or re-export the series from its "
                         "branch with `lmsforge export`)")


def series_hash(paths: list[Path]) -> str:
    """sha256 over the patch files in order: the identity of a series in reports and packages."""
    digest = hashlib.sha256()
    for path in paths:
        data = path.read_bytes()
        digest.update(f"{path.name}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()


def patch_id(path: Path) -> str:
    """`git patch-id --stable` of a patch file: unchanged by line shifts and header changes."""
    proc = git.run(["patch-id", "--stable"], input=path.read_bytes(), check=False)
    words = proc.stdout.decode().split()
    return words[0] if words else ""


def load(folder: Path, *, check_patch_ids: bool = True) -> Series:
    problems: list[str] = []
    manifest_path = folder / MANIFEST
    if not manifest_path.is_file():
        raise SeriesProblems(folder, [f"{MANIFEST} is missing"])
    try:
        data = yaml.safe_load(manifest_path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = getattr(exc, "problem", None) or "syntax error"
        raise SeriesProblems(folder, [f"{MANIFEST} is not valid YAML{where} ({reason})"]) from None
    if not isinstance(data, dict):
        raise SeriesProblems(folder, [f"{MANIFEST} must be a mapping at the top level"])

    def field_(name: str, kind: type, required: bool = True) -> object:
        value = data.get(name)
        if value is None:
            if required:
                problems.append(f"{MANIFEST}: `{name}` is missing")
            return None
        if not isinstance(value, kind):
            problems.append(f"{MANIFEST}: `{name}` must be a {kind.__name__}")
            return None
        return value

    version = field_("format", int)
    if version is not None and version != FORMAT_VERSION:
        problems.append(f"{MANIFEST}: format {version} is not supported (this lmsforge reads "
                        f"format {FORMAT_VERSION}); upgrade lmsforge")
    framework = field_("framework", str)
    tag = field_("tag", str)
    base = field_("base", str)
    upstream = field_("upstream", dict) or {}
    ported_from = field_("ported_from", dict, required=False)
    skipped = field_("skipped", list, required=False) or []
    raw_patches = field_("patches", list)
    if framework and folder.parent.name != framework:
        problems.append(f"{MANIFEST}: framework `{framework}` but the folder is "
                        f"{folder.parent.name}/")
    if tag and folder.name != tag:
        problems.append(f"{MANIFEST}: tag `{tag}` but the folder is {folder.name}/")
    if base is not None and not re.fullmatch(r"[0-9a-f]{40}", base):
        problems.append(f"{MANIFEST}: `base` must be a 40-digit commit id")

    recorded_hash = field_("series_hash", str, required=False)
    entries = _load_entries(raw_patches or [], problems)
    _check_files(folder, entries, problems, check_patch_ids)
    if base is not None and not problems:
        _check_base(folder, entries, str(base), problems)
    if recorded_hash and not problems:
        actual = series_hash([folder / e.file for e in entries])
        if actual != recorded_hash:
            problems.append(_describe_changed_files(folder, entries))
    if problems:
        raise SeriesProblems(folder, problems)
    return Series(folder, str(framework), str(tag), str(base), dict(upstream),
                  dict(ported_from) if ported_from else None, entries, list(skipped))


def _load_entries(raw: list[object], problems: list[str]) -> list[PatchEntry]:
    entries: list[PatchEntry] = []
    seen_ids: set[str] = set()
    for index, item in enumerate(raw, 1):
        where = f"{MANIFEST}: patches[{index}]"
        if not isinstance(item, dict):
            problems.append(f"{where} must be a mapping")
            continue
        missing = [k for k in ("id", "file", "patch_id", "class", "purpose") if not item.get(k)]
        if missing:
            problems.append(f"{where} lacks {', '.join(missing)}")
            continue
        entry = PatchEntry(str(item["id"]), str(item["file"]), str(item["patch_id"]),
                           str(item["class"]), str(item["purpose"]))
        if not SLUG.fullmatch(entry.id):
            problems.append(f"{where}: id `{entry.id}` must be lower-case letters, digits, dashes")
        if entry.id in seen_ids:
            problems.append(f"{where}: id `{entry.id}` appears twice")
        seen_ids.add(entry.id)
        if entry.klass not in CLASSES:
            problems.append(f"{where}: class `{entry.klass}` is not one of {', '.join(CLASSES)}")
        name = PATCH_NAME.fullmatch(entry.file)
        expected_number = index * 10
        if not name:
            problems.append(f"{where}: file `{entry.file}` is not named NNNN-<slug>.patch")
        elif int(name.group(1)) != expected_number or name.group(2) != entry.id:
            problems.append(f"{where}: file `{entry.file}` should be "
                            f"{expected_number:04d}-{entry.id}.patch (steps of 10, named by id)")
        entries.append(entry)
    return entries


def _check_files(folder: Path, entries: list[PatchEntry], problems: list[str],
                 check_patch_ids: bool) -> None:
    listed = [e.file for e in entries]
    present = sorted(p.name for p in folder.glob("*.patch"))
    for name in sorted(set(present) - set(listed)):
        problems.append(f"{name} is in the folder but not in {MANIFEST}")
    order_path = folder / ORDER_FILE
    if not order_path.is_file():
        problems.append(f"the `{ORDER_FILE}` order file is missing")
    else:
        order = [ln.strip() for ln in order_path.read_text().splitlines()
                 if ln.strip() and not ln.startswith("#")]
        if order != listed:
            problems.append(f"the `{ORDER_FILE}` file lists {order} but {MANIFEST} lists "
                            f"{listed}")
    for entry in entries:
        path = folder / entry.file
        if not path.is_file():
            problems.append(f"{entry.file} is listed in {MANIFEST} but missing")
            continue
        try:
            parsed = patchfile.parse(path)
        except UsageError as exc:
            problems.append(str(exc).split("; the patch file is damaged")[0])
            continue
        problems.extend(f"{entry.file}: {problem}" for problem in parsed.outside_the_tree())
        if parsed.trailers.get(PATCH_ID_TRAILER) != entry.id:
            problems.append(f"{entry.file}: trailer `{PATCH_ID_TRAILER}: "
                            f"{parsed.trailers.get(PATCH_ID_TRAILER)}` does not match id "
                            f"`{entry.id}`")
        if parsed.trailers.get(CLASS_TRAILER) != entry.klass:
            problems.append(f"{entry.file}: trailer `{CLASS_TRAILER}` does not match class "
                            f"`{entry.klass}`")
        if check_patch_ids and patch_id(path) != entry.patch_id:
            problems.append(f"{entry.file}: its diff changed since export (patch-id differs "
                            f"from {MANIFEST}); never hand-edit a .patch file")


_BASE_FOOTER = re.compile(rb"^base-commit: ([0-9a-f]{40})$", re.M)


def _check_base(folder: Path, entries: list[PatchEntry], base: str, problems: list[str]) -> None:
    """`base` and the files' `base-commit:` footers are written together by export."""
    for entry in entries:
        footer = _BASE_FOOTER.search((folder / entry.file).read_bytes())
        if footer and footer.group(1).decode() != base:
            problems.append(f"{MANIFEST}: `base` {base[:12]} is not the commit the patch files "
                            f"were exported on ({entry.file} says base-commit "
                            f"{footer.group(1).decode()[:12]}); restore {MANIFEST} from git or "
                            "re-export the series")
            return


def _describe_changed_files(folder: Path, entries: list[PatchEntry]) -> str:
    """Why the series hash differs, naming the file where it can be told from the file alone."""
    for entry in entries:
        data = (folder / entry.file).read_bytes()
        if data.split(b"\n", 1)[0].endswith(b"\r"):
            return (f"{entry.file} has CRLF line endings (a checkout with core.autocrlf=true?): "
                    f"restore it byte for byte (`git rm --cached -r {folder.name} && git checkout "
                    f"-- {folder.name}`; .gitattributes marks patches/ as binary-exact)")
    for entry in entries:
        try:
            subject = patchfile.parse(folder / entry.file).subject
        except UsageError:
            continue
        if subject != entry.purpose:
            return (f"{entry.file}: its subject is not the one exported ({MANIFEST} says "
                    f"`{entry.purpose}`); never hand-edit a .patch file: restore it from git, "
                    "or change the commit and re-export")
    return (f"the patch files changed since export (series_hash in {MANIFEST} differs) but no "
            "single file shows it; never hand-edit a .patch file: restore the folder from git "
            "or re-export the series")


def find(patches_root: Path, framework: str, tag: str) -> Path:
    return patches_root / framework / tag


def available_tags(patches_root: Path, framework: str) -> list[str]:
    root = patches_root / framework
    if not root.is_dir():
        return []
    return sorted((p.name for p in root.iterdir() if (p / MANIFEST).is_file()),
                  key=_version_key, reverse=True)


def _version_key(tag: str) -> tuple[object, ...]:
    return tuple(int(x) if x.isdigit() else x for x in re.split(r"[.\-]", tag.lstrip("v")))


def write_manifest(series: Series) -> None:
    data: dict[str, object] = {
        "format": FORMAT_VERSION,
        "framework": series.framework,
        "tag": series.tag,
        "base": series.base,
        "upstream": series.upstream,
    }
    if series.ported_from:
        data["ported_from"] = series.ported_from
    if series.skipped:
        data["skipped"] = series.skipped
    data["series_hash"] = series.content_hash()
    data["patches"] = [p.to_yaml() for p in series.patches]
    header = ("# Written by `lmsforge export` from the branch "
              f"lms/{series.framework}/{series.tag}; do not edit by hand.\n")
    (series.folder / MANIFEST).write_text(
        header + yaml.safe_dump(data, sort_keys=False, width=100, allow_unicode=True))
    (series.folder / ORDER_FILE).write_text("".join(f"{p.file}\n" for p in series.patches))
