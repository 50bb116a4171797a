"""The Bazel side of a series, checked without Bazel (finding 6 of the v2.14.1 review).

Bazel cannot be downloaded here, but BUILD and ``.bzl`` files are data. A file the series adds is
compiled or linked wherever an upstream file that needs it is: an upstream file that includes a new
header (directly, or through other files the series touches) needs that header and the new
sources that implement it, and a new source that implements an upstream header (by name:
``bfc_allocator_lms.cc`` next to ``bfc_allocator.cc``) is needed wherever that header's source
is. So every Bazel file list that names such an upstream file must make the new file available:

- the ``srcs``/``hdrs``/``textual_hdrs`` of a rule: the new file is in the rule's own lists, or
  in the lists of a rule reached through its unconditional ``deps`` (what ``select``/``if_*``
  add may be absent in a build, so it does not count);
- a ``filegroup`` (the mobile and private header lists): the new file is in it, or every rule
  that uses the filegroup satisfies the first case;
- ``exports_files``: the new file is exported by its own package too, so that whoever names the
  upstream file by label can name the new one;
- a list assigned to a variable: the new file is in it.

Lists are Starlark expressions read with Python's ``ast``: list literals, ``+``, ``glob``,
``select``/``if_*`` (all branches), names of lists assigned in the same file, and labels of
filegroups (expanded).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Iterator, Sequence

# Compiled lists. textual_hdrs are only included by dependents, which get what those headers
# include from their own deps, so they provide files but impose nothing.
CHECKED_ATTRS = ("srcs", "hdrs")
TEXTUAL_ATTRS = ("textual_hdrs",)
CPP_SUFFIXES = (".h", ".cc")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
MAX_DEPS_DEPTH = 8


@dataclass(frozen=True)
class Missing:
    """A list that names `partner` but cannot reach `needed`."""
    build_file: str
    line: int
    where: str  # e.g. 'cc_library "tensor" hdrs', 'filegroup "mobile_srcs_no_runtime"'
    partner: str
    needed: str

    def __str__(self) -> str:
        return (f"{self.build_file}:{self.line}: {self.where} has {self.partner} "
                f"but not {self.needed}")


@dataclass
class _Unit:
    """One Bazel file list: where it is, the tree files it names, the other labels it names."""
    build_file: str
    package: str
    line: int
    kind: str  # "attr", "filegroup", "exports", "variable"
    target: str | None
    rule: str | None
    files: set[str]  # files of the checked lists (srcs, hdrs; all of other lists)
    labels: set[str] = field(default_factory=set)  # non-file labels in the checked lists
    deps: list[str] = field(default_factory=list)  # unconditional deps of a rule
    textual: set[str] = field(default_factory=set)  # files in textual_hdrs

    def describe(self) -> str:
        if self.kind == "exports":
            return "exports_files"
        if self.kind == "variable":
            return f"list {self.target}"
        if self.kind == "filegroup":
            return f'filegroup "{self.target}"'
        return f'{self.rule} "{self.target}" srcs/hdrs'


@dataclass(frozen=True)
class Report:
    lists: int  # Bazel lists that name an upstream file needing new files
    requirements: int  # (list, new file) pairs checked
    missing: list[Missing]


def check(tree: Path, added: Sequence[str], modified: Sequence[str]) -> Report:
    """Every place where a file the series adds is missing from a Bazel list that needs it."""
    new = sorted(p for p in added if p.endswith(CPP_SUFFIXES) and not _is_test(p))
    touched = set(new) | {p for p in modified if p.endswith(CPP_SUFFIXES)}
    needs = needed_new_files(tree, new, touched)
    if not any(needs.values()):
        return Report(0, 0, [])
    index = _BuildIndex(tree)
    missing: set[Missing] = set()
    lists: set[int] = set()
    requirements = 0
    for partner, wanted in sorted(needs.items()):
        for unit in index.units_naming(partner):
            for needed in sorted(wanted):
                if _linked_elsewhere(unit, partner, needed):
                    continue
                lists.add(id(unit))
                requirements += 1
                if not index.provides(unit, needed, set()):
                    missing.add(Missing(unit.build_file, unit.line, unit.describe(), partner,
                                        needed))
    return Report(len(lists), requirements,
                  sorted(missing, key=lambda m: (m.build_file, m.line, m.partner, m.needed)))


def needed_new_files(tree: Path, new: Sequence[str], touched: set[str]) -> dict[str, set[str]]:
    """For each upstream file the series touches, the new files it needs built with it."""
    new_set = set(new)
    includes = {path: _includes(tree, path, touched) for path in touched}
    implementing: dict[str, set[str]] = {}  # header -> new sources that implement it
    for source in (p for p in new if p.endswith(".cc")):
        header = source[:-3] + ".h"
        if header in new_set:
            implementing.setdefault(header, set()).add(source)
        for companion in _companion_headers(tree, source, touched - new_set):
            implementing.setdefault(companion, set()).add(source)
    needs: dict[str, set[str]] = {}
    for upstream in sorted(touched - new_set):
        headers = {h for h in _closure(upstream, includes) if h in new_set}
        wanted = set(headers)
        if not upstream.endswith(".cc"):  # a header in a list needs no sources
            needs[upstream] = wanted
            continue
        own_header = upstream[:-3] + ".h"
        for header in headers | {own_header}:
            for source in implementing.get(header, set()):
                wanted.add(source)
                wanted |= {h for h in _closure(source, includes) if h in new_set}
        needs[upstream] = wanted - {upstream}
    return needs


def _linked_elsewhere(unit: _Unit, partner: str, needed: str) -> bool:
    """Whether `needed` (a new source) is none of `unit`'s business: a rule gets sources of
    other packages through its deps, often through the framework's shared object, which this
    check cannot follow; a raw file list (filegroup, list variable) has no deps, so it needs
    them all."""
    return (needed.endswith(".cc") and unit.kind == "attr"
            and _package_of(needed) != _package_of(partner))


def _package_of(path: str) -> str:
    return path.rsplit("/", 1)[0]


def _is_test(path: str) -> bool:
    return path.endswith("_test.cc")


def _includes(tree: Path, path: str, touched: set[str]) -> set[str]:
    source = tree / path
    if not source.is_file():
        return set()
    return {inc for inc in INCLUDE.findall(source.read_text(errors="replace")) if inc in touched}


def _closure(start: str, includes: dict[str, set[str]]) -> set[str]:
    seen: set[str] = set()
    todo = [start]
    while todo:
        for inc in includes.get(todo.pop(), set()):
            if inc not in seen:
                seen.add(inc)
                todo.append(inc)
    return seen


def _companion_headers(tree: Path, source: str, upstream: set[str]) -> Iterator[str]:
    """Upstream headers a new source implements by name (x_lms.cc implements x.h)."""
    folder, name = source.rsplit("/", 1)
    stem = name[:-3]
    for header in sorted(upstream):
        if header.endswith(".h") and header.rsplit("/", 1)[0] == folder:
            other = header.rsplit("/", 1)[1][:-2]
            if stem.startswith(other + "_") and (tree / folder / f"{other}.cc").is_file():
                yield header


class _BuildIndex:
    """The BUILD and .bzl files of the tree's tensorflow/ folder and the file lists in them."""

    def __init__(self, tree: Path) -> None:
        self.tree = tree
        self.units: list[_Unit] = []
        for build in self._build_files():
            self.units.extend(_read_units(tree, build))
        self._targets = {f"//{u.package}:{u.target}": u for u in self.units
                         if u.kind in ("attr", "filegroup")}
        self._users: dict[str, list[_Unit]] = {}
        for unit in self.units:
            for label in unit.labels:
                self._users.setdefault(label, []).append(unit)
        for unit in self.units:  # filegroups named in a list stand for their files
            unit.files |= self._expand(unit.labels, set())
        self._naming: dict[str, list[_Unit]] = {}
        for unit in self.units:
            for named in unit.files:
                self._naming.setdefault(named, []).append(unit)

    def _build_files(self) -> Iterator[str]:
        for path in sorted(self.tree.joinpath("tensorflow").rglob("*")):
            if path.name in ("BUILD", "BUILD.bazel") or path.suffix == ".bzl":
                yield str(path.relative_to(self.tree))

    def _expand(self, labels: set[str], seen: set[str]) -> set[str]:
        files: set[str] = set()
        for label in labels - seen:
            seen.add(label)
            group = self._targets.get(label)
            if group is not None and group.kind == "filegroup":
                files |= group.files | self._expand(group.labels, seen)
        return files

    def units_naming(self, path: str) -> list[_Unit]:
        return self._naming.get(path, [])

    def provides(self, unit: _Unit, needed: str, visiting: set[int]) -> bool:
        if needed in unit.files or needed in unit.textual:
            return True
        if unit.kind == "attr":
            return self._reachable_through_deps(unit, needed)
        if unit.kind == "filegroup":
            if id(unit) in visiting:
                return False
            visiting.add(id(unit))
            users = self._users.get(f"//{unit.package}:{unit.target}", [])
            return bool(users) and all(self.provides(user, needed, visiting) for user in users)
        if unit.kind == "exports":
            # Whoever names the partner by label can name the new file: its package exports
            # it or has a filegroup with it.
            package = needed.rsplit("/", 1)[0]
            return any(needed in other.files for other in self.units
                       if other.kind in ("exports", "filegroup") and other.package == package)
        return False

    def _reachable_through_deps(self, unit: _Unit, needed: str) -> bool:
        seen: set[str] = set()
        frontier = [(label, 0) for label in unit.deps]
        while frontier:
            label, depth = frontier.pop()
            if label in seen or depth > MAX_DEPS_DEPTH:
                continue
            seen.add(label)
            target = self._targets.get(label)
            if target is None:
                continue
            if needed in target.files or needed in target.textual:
                return True
            frontier.extend((dep, depth + 1) for dep in target.deps)
        return False


# -- reading one BUILD file -------------------------------------------------------------------


def _read_units(tree: Path, build_file: str) -> Iterator[_Unit]:
    path = tree / build_file
    try:
        module = ast.parse(path.read_text(errors="replace"), filename=build_file)
    except SyntaxError:
        return  # not Starlark that Python reads
    package = build_file.rsplit("/", 1)[0]
    reader = _Reader(tree, package, _assignments(module))
    is_build = path.suffix != ".bzl"
    for node in ast.walk(module):
        if isinstance(node, ast.Call) and is_build:
            unit = reader.call_unit(build_file, node)
            if unit is not None:
                yield unit
        elif isinstance(node, (ast.Assign, ast.Return)) and node.value is not None and \
                _is_list_expr(node.value):
            files, labels = reader.files_and_labels(node.value)
            if files:
                name = next((t.id for t in getattr(node, "targets", [])
                             if isinstance(t, ast.Name)), "returned")
                yield _Unit(build_file, package, node.lineno, "variable", name, None, files,
                            labels)


def _assignments(module: ast.Module) -> dict[str, ast.expr]:
    return {t.id: node.value for node in module.body if isinstance(node, ast.Assign)
            for t in node.targets if isinstance(t, ast.Name)}


def _is_list_expr(node: ast.expr) -> bool:
    listy = isinstance(node, (ast.List, ast.BinOp)) or (
        isinstance(node, ast.Call) and _call_name(node) == "glob")
    return listy and any(isinstance(n, ast.Constant) and isinstance(n.value, str)
                         for n in ast.walk(node))


class _Reader:
    def __init__(self, tree: Path, package: str, names: dict[str, ast.expr]) -> None:
        self.tree = tree
        self.package = package
        self.names = names

    def call_unit(self, build_file: str, call: ast.Call) -> _Unit | None:
        rule = _call_name(call)
        keywords = {k.arg: k.value for k in call.keywords if k.arg}
        if rule == "exports_files":
            value = call.args[0] if call.args else keywords.get("srcs")
            if value is None:
                return None
            files, labels = self.files_and_labels(value)
            return _Unit(build_file, self.package, call.lineno, "exports", None, rule, files,
                         labels)
        name = keywords.get("name")
        if not (isinstance(name, ast.Constant) and isinstance(name.value, str)):
            return None
        files, labels, textual = set(), set(), set()
        for attr in CHECKED_ATTRS + TEXTUAL_ATTRS:
            if attr in keywords:
                more_files, more_labels = self.files_and_labels(keywords[attr])
                if attr in TEXTUAL_ATTRS:
                    textual |= more_files
                else:
                    files |= more_files
                    labels |= more_labels
        deps = [self.label(s) for s in _unconditional_strings(keywords.get("deps"))
                if not s.startswith("@")]
        kind = "filegroup" if rule == "filegroup" else "attr"
        return _Unit(build_file, self.package, call.lineno, kind, name.value, rule, files,
                     labels, deps, textual)

    def files_and_labels(self, node: ast.expr) -> tuple[set[str], set[str]]:
        files: set[str] = set()
        labels: set[str] = set()
        for kind, value, exclude in self._items(node, set()):
            if kind == "glob":
                files |= self._glob(value, exclude)
            elif not value.startswith("@"):
                label = self.label(value)
                path = self._path(label)
                if path is not None and (self.tree / path).is_file():
                    files.add(path)
                else:
                    labels.add(label)
        return files, labels

    def _items(self, node: ast.expr | None,
               names_seen: set[str]) -> Iterator[tuple[str, object, list[str]]]:
        if node is None:
            return
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            yield "label", node.value, []
        elif isinstance(node, (ast.List, ast.Tuple)):
            for element in node.elts:
                yield from self._items(element, names_seen)
        elif isinstance(node, ast.BinOp):
            yield from self._items(node.left, names_seen)
            yield from self._items(node.right, names_seen)
        elif isinstance(node, ast.Dict):
            for value in node.values:
                yield from self._items(value, names_seen)
        elif isinstance(node, ast.Name) and node.id in self.names and node.id not in names_seen:
            yield from self._items(self.names[node.id], names_seen | {node.id})
        elif isinstance(node, ast.Call):
            keywords = {k.arg: k.value for k in node.keywords if k.arg}
            if _call_name(node) == "glob":
                include = node.args[0] if node.args else keywords.get("include")
                yield "glob", list(_strings(include)), list(_strings(keywords.get("exclude")))
            else:  # select(), if_static(), if_mobile(), ...: every branch
                for arg in [*node.args, *keywords.values()]:
                    yield from self._items(arg, names_seen)

    def label(self, text: str) -> str:
        if text.startswith("//"):
            return text if ":" in text else f"{text}:{text.rsplit('/', 1)[-1]}"
        return f"//{self.package}:{text.lstrip(':')}"

    @staticmethod
    def _path(label: str) -> str | None:
        package, name = _split_label(label)
        return None if package is None else f"{package}/{name}"

    def _glob(self, patterns: object, exclude: list[str]) -> set[str]:
        """Bazel's glob: files of this package only (not of sub-packages), `**` for any
        number of folders."""
        include_res = [_glob_regex(p) for p in patterns]  # type: ignore[attr-defined]
        exclude_res = [_glob_regex(p) for p in exclude]
        found: set[str] = set()
        for rel in _package_files(self.tree / self.package):
            if any(r.fullmatch(rel) for r in include_res) and \
                    not any(r.fullmatch(rel) for r in exclude_res):
                found.add(f"{self.package}/{rel}")
        return found


def _glob_regex(pattern: str) -> re.Pattern[str]:
    out = ""
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out += "(?:.*/)?"
            i += 3
        elif pattern.startswith("**", i):
            out += ".*"
            i += 2
        elif pattern[i] == "*":
            out += "[^/]*"
            i += 1
        elif pattern[i] == "?":
            out += "[^/]"
            i += 1
        else:
            out += re.escape(pattern[i])
            i += 1
    return re.compile(out)


def _package_files(package: Path) -> Iterator[str]:
    todo = [package]
    while todo:
        folder = todo.pop()
        for entry in sorted(folder.iterdir()):
            if entry.is_dir():
                if not any((entry / b).is_file() for b in ("BUILD", "BUILD.bazel")):
                    todo.append(entry)
            elif entry.is_file():
                yield str(entry.relative_to(package))


def _split_label(label: str) -> tuple[str | None, str]:
    if not label.startswith("//"):
        return None, label
    package, _, name = label[2:].partition(":")
    return package, name or package.rsplit("/", 1)[-1]


def _call_name(call: ast.Call) -> str:
    func = call.func
    if isinstance(func, ast.Name):
        return func.id
    if isinstance(func, ast.Attribute):
        return func.attr
    return ""


def _strings(node: ast.expr | None) -> Iterable[str]:
    if node is None:
        return []
    return [n.value for n in ast.walk(node) if isinstance(n, ast.Constant)
            and isinstance(n.value, str)]


def _unconditional_strings(node: ast.expr | None) -> Iterable[str]:
    """Strings of list literals joined by `+`, not those inside select()/if_*() calls."""
    if node is None:
        return []
    if isinstance(node, ast.List):
        return [e.value for e in node.elts if isinstance(e, ast.Constant)
                and isinstance(e.value, str)]
    if isinstance(node, ast.BinOp):
        return [*_unconditional_strings(node.left), *_unconditional_strings(node.right)]
    return []
