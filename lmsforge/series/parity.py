"""Whether every series of a framework carries the same patches and the same tests.

A fix lands in one series first (usually the newest) and must be ported to the others; when it
is not, the series drift apart silently. This check lists, for each framework, every patch (by
its ``Lms-Patch-Id``) and every test the series add (googletest ``Suite.Name``, Python
``file::Class.test_name``; each fix of the series comes with a regression test, so a test is the
finest handle on a fix) and which series carry it.

Something carried by some series only is accepted when a reason is recorded, either

- in ``patches/<framework>/parity.yaml``, an ``only_in`` entry naming the item and exactly the
  tags that carry it (a reason that no longer matches the series is reported as stale, so the
  file cannot rot), or
- for a patch, by a port's ``--skip --reason`` (``skipped:`` in the manifest of the series that
  lacks it); the tests a patch adds share its reason when they are carried by the same series.

``parity.yaml``::

    format: 1
    only_in:
    - patch: memory-policy            # or  test: LargeModelSupportTest.Foo
      tags: [v2.6.0]
      reason: needs the expandable segments of 2.1+
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from lmsforge.errors import UsageError
from lmsforge.series import manifest as series_mod

REASONS_FILE = "parity.yaml"
FORMAT_VERSION = 1
KINDS = ("patch", "test")

_DIFF = re.compile(r"^diff --git a/(.+) b/(.+)$")
_GTEST = re.compile(r"^\+\s*TEST(?:_F|_P)?\(\s*(\w+)\s*,\s*(\w+)\s*\)")
_PY_CLASS = re.compile(r"^\+class (\w+)\b")
_PY_TEST = re.compile(r"^\+\s*(?:async )?def (test_\w+)\(")


@dataclass(frozen=True)
class Reason:
    kind: str
    name: str
    tags: frozenset[str]
    reason: str


@dataclass
class Item:
    kind: str  # "patch" or "test"
    name: str
    carried_by: list[str]  # tags, newest first
    missing_from: list[str]
    reason: str = ""  # why it is not in every series; empty when it is, or when nobody said

    @property
    def status(self) -> str:
        if not self.missing_from:
            return "all"
        return "explained" if self.reason else "unexplained"


@dataclass
class Parity:
    framework: str
    tags: list[str]
    items: list[Item]
    stale: list[str] = field(default_factory=list)  # reasons that no longer match the series

    @property
    def ok(self) -> bool:
        return not self.stale and all(i.status != "unexplained" for i in self.items)

    def counts(self) -> dict[str, int]:
        result = {"all": 0, "explained": 0, "unexplained": 0}
        for item in self.items:
            result[item.status] += 1
        return result


def tests_added(patch: Path) -> list[str]:
    """The tests a patch file adds: googletest ``Suite.Name``, Python ``file::Class.test_x``."""
    found: list[str] = []
    path = ""
    py_class = ""
    for line in patch.read_text(errors="replace").splitlines():
        diff = _DIFF.match(line)
        if diff:
            path, py_class = diff.group(2), ""
            continue
        if not line.startswith("+") or line.startswith("+++"):
            continue
        gtest = _GTEST.match(line)
        if gtest and path.endswith((".cpp", ".cc", ".cu")):
            found.append(f"{gtest.group(1)}.{gtest.group(2)}")
            continue
        if not path.endswith(".py") or not Path(path).name.startswith("test"):
            continue
        klass = _PY_CLASS.match(line)
        if klass:
            py_class = klass.group(1)
            continue
        test = _PY_TEST.match(line)
        if test:
            owner = f"{py_class}." if py_class and line.startswith("+ ") else ""
            found.append(f"{Path(path).name}::{owner}{test.group(1)}")
    return found


def load_reasons(framework_dir: Path) -> list[Reason]:
    path = framework_dir / REASONS_FILE
    if not path.is_file():
        return []
    where = f"{framework_dir.name}/{REASONS_FILE}"
    try:
        data = yaml.safe_load(path.read_text())
    except yaml.YAMLError:
        raise UsageError(f"{where} is not valid YAML; fix it (format: see lmsforge/series/parity.py)")\
            from None
    if not isinstance(data, dict) or data.get("format") != FORMAT_VERSION:
        raise UsageError(f"{where}: needs `format: {FORMAT_VERSION}` and an `only_in` list")
    reasons = []
    for number, entry in enumerate(data.get("only_in") or [], 1):
        kinds = [k for k in KINDS if isinstance(entry, dict) and k in entry]
        tags = entry.get("tags") if isinstance(entry, dict) else None
        text = entry.get("reason") if isinstance(entry, dict) else None
        if len(kinds) != 1 or not isinstance(tags, list) or not tags or \
                not isinstance(text, str) or not text.strip():
            raise UsageError(f"{where}: only_in entry {number} needs exactly one of `patch:` or "
                             "`test:`, a non-empty `tags:` list and a `reason:`")
        reasons.append(Reason(kinds[0], str(entry[kinds[0]]),
                              frozenset(str(t) for t in tags), text.strip()))
    return reasons


def check(patches_root: Path, framework: str) -> Parity:
    """Compare every series of FRAMEWORK; raises UsageError for an unreadable series."""
    tags = series_mod.available_tags(patches_root, framework)
    carried: dict[tuple[str, str], list[str]] = {}
    skipped: dict[tuple[str, str], str] = {}  # (patch id, tag lacking it) -> reason
    added_by: dict[str, set[str]] = {}  # test -> the patches that add it, in any series
    for tag in tags:
        series = series_mod.load(series_mod.find(patches_root, framework, tag),
                                 check_patch_ids=False)
        names = {("patch", p.id) for p in series.patches}
        for entry in series.patches:
            for name in tests_added(series.folder / entry.file):
                names.add(("test", name))
                added_by.setdefault(name, set()).add(entry.id)
        for key in names:
            carried.setdefault(key, []).append(tag)
        for entry in series.skipped:
            skipped[(str(entry.get("id")), tag)] = str(entry.get("reason") or "skipped by a port")
    reasons = load_reasons(patches_root / framework)
    used: set[Reason] = set()
    items = []
    for (kind, name), carriers in sorted(carried.items()):
        missing = [t for t in tags if t not in carriers]
        item = Item(kind, name, carriers, missing)
        if missing:
            item.reason = _reason_for(item, reasons, skipped, used)
        items.append(item)
    # A test that comes with a patch carried by the same series only shares the patch's reason:
    # a patch with a reason needs no second one per test.
    patch_reasons = {(i.name, tuple(i.carried_by)): i.reason for i in items
                     if i.kind == "patch" and i.reason}
    for item in items:
        if item.kind == "test" and item.missing_from and not item.reason:
            for patch_id in sorted(added_by.get(item.name, ())):
                reason = patch_reasons.get((patch_id, tuple(item.carried_by)))
                if reason:
                    item.reason = f"with patch {patch_id}: {reason}"
                    break
    stale = [f"{r.kind} {r.name} only_in {sorted(r.tags)}: "
             + ("no series carries it" if (r.kind, r.name) not in carried else
                f"carried by {sorted(carried[(r.kind, r.name)])}")
             for r in reasons if r not in used]
    return Parity(framework, tags, items, stale)


def _reason_for(item: Item, reasons: list[Reason], skipped: dict[tuple[str, str], str],
                used: set[Reason]) -> str:
    for reason in reasons:
        if (reason.kind, reason.name) == (item.kind, item.name) and \
                reason.tags == frozenset(item.carried_by):
            used.add(reason)
            return reason.reason
    if item.kind == "patch" and all((item.name, tag) in skipped for tag in item.missing_from):
        return "; ".join(f"{tag}: {skipped[(item.name, tag)]}" for tag in item.missing_from)
    return ""


def frameworks(patches_root: Path) -> list[str]:
    return sorted(p.name for p in patches_root.iterdir()
                  if p.is_dir() and series_mod.available_tags(patches_root, p.name))
