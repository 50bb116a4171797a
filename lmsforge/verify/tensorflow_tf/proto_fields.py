"""Fields a series adds to upstream protos, checked without Bazel (findings 7 and 8 of the v2.14.1
review).

- **Numbers** (finding 8): upstream numbers a message's fields one after another, so a field a
  series adds with the next free number collides with the next release's (TensorFlow 2.15 took
  ``GPUOptions.Experimental`` 15 to 19), and a ConfigProto written by that release would set the
  series' field by accident. Fields the series adds must take numbers from
  ``FIRST_SERIES_FIELD_NUMBER`` up.
- **API goldens** (finding 7): ``tensorflow/tools/api/golden`` embeds the descriptor of every
  exported proto message; ``api_compatibility_test`` fails when one lacks a field. Every golden
  describing a message of a proto the series changes must list exactly its fields and numbers.

Protos are read as text: messages, nested messages, ``oneof`` blocks and field lines; enums,
options and reserved ranges are skipped. Goldens are protobuf text format.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Sequence

FIRST_SERIES_FIELD_NUMBER = 1000
GOLDEN_DIRS = ("tensorflow/tools/api/golden/v1", "tensorflow/tools/api/golden/v2")

Fields = dict[str, dict[str, int]]  # message path ("GPUOptions.Experimental") -> name -> number

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_FIELD = re.compile(r"^(?:repeated\s+|optional\s+|required\s+)?(?:map\s*<[^>]*>|[\w.]+)\s+"
                    r"(\w+)\s*=\s*(\d+)")
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}:\[\],]|[^\s{}:\[\],"]+')


@dataclass(frozen=True)
class Problem:
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def check(tree: Path, modified_protos: Sequence[str],
          base_text: Callable[[str], str]) -> list[Problem]:
    """Problems with the fields the series adds to `modified_protos` (paths in `tree`);
    `base_text(path)` is the proto at the upstream tag."""
    problems: list[Problem] = []
    patched: Fields = {}
    for proto in modified_protos:
        fields = parse_proto((tree / proto).read_text())
        patched.update(fields)
        base = parse_proto(base_text(proto))
        for message, names in sorted(fields.items()):
            for name, number in sorted(names.items()):
                if name not in base.get(message, {}) and number < FIRST_SERIES_FIELD_NUMBER:
                    problems.append(Problem(proto, f"{message}.{name} = {number} takes a number "
                                            f"upstream will reach; use one from "
                                            f"{FIRST_SERIES_FIELD_NUMBER} up"))
    for golden, descriptor in _goldens(tree):
        top = descriptor.get("name")
        if not isinstance(top, str) or top not in patched:
            continue
        problems += _compare(golden, top, descriptor, patched)
    return problems


def parse_proto(text: str) -> Fields:
    """Field names and numbers of every message (nested ones by dotted path) in a .proto."""
    text = _COMMENT.sub("", text)
    fields: Fields = {}
    scope: list[tuple[str, str]] = []  # (kind, name) of open blocks
    for statement in re.split(r"(?<=[;{}])", text):
        statement = statement.strip()
        if not statement:
            continue
        opening = re.match(r"^(message|enum|oneof|service|extend)\s+([\w.]+)\s*\{$", statement)
        if opening:
            scope.append((opening.group(1), opening.group(2)))
            if opening.group(1) == "message":
                fields.setdefault(_path(scope), {})
            continue
        if statement.endswith("}"):
            if scope:
                scope.pop()
            continue
        if not scope or scope[-1][0] not in ("message", "oneof"):
            continue
        field = _FIELD.match(statement)
        if field and not statement.startswith(("option", "reserved", "extensions")):
            fields[_path(scope)][field.group(1)] = int(field.group(2))
    return fields


def _path(scope: list[tuple[str, str]]) -> str:
    return ".".join(name for kind, name in scope if kind == "message")


def _goldens(tree: Path) -> Iterator[tuple[str, dict]]:
    for folder in GOLDEN_DIRS:
        for golden in sorted((tree / folder).glob("*.pbtxt")):
            text = golden.read_text(errors="replace")
            if "tf_proto" not in text:
                continue
            parsed = parse_text_format(text)
            for proto in _all(parsed, "tf_proto"):
                for descriptor in _all(proto, "descriptor"):
                    yield str(golden.relative_to(tree)), descriptor


def _compare(golden: str, path: str, descriptor: dict, patched: Fields) -> list[Problem]:
    listed = {f.get("name"): int(f.get("number", -1)) for f in _all(descriptor, "field")}
    expected = patched.get(path, {})
    problems = []
    if listed != expected:
        lacking = sorted(f"{n} = {v}" for n, v in expected.items() if listed.get(n) != v)
        extra = sorted(f"{n} = {v}" for n, v in listed.items() if expected.get(n) != v)
        what = "; ".join(part for part in (
            f"lacks {', '.join(lacking)}" if lacking else "",
            f"has {', '.join(extra)} that the proto does not" if extra else "") if part)
        problems.append(Problem(golden, f"the descriptor of {path} {what}; update the golden"))
    for nested in _all(descriptor, "nested_type"):
        name = nested.get("name")
        if isinstance(name, str) and f"{path}.{name}" in patched:
            problems += _compare(golden, f"{path}.{name}", nested, patched)
    return problems


def _all(node: dict, key: str) -> list:
    value = node.get(key, [])
    return value if isinstance(value, list) else [value]


def parse_text_format(text: str) -> dict:
    """Protobuf text format into nested dicts; repeated keys become lists."""
    tokens = _TOKEN.findall(text)
    node, _ = _parse_block(tokens, 0)
    return node


def _parse_block(tokens: list[str], i: int) -> tuple[dict, int]:
    node: dict = {}
    while i < len(tokens) and tokens[i] != "}":
        key = tokens[i]
        i += 1
        if i < len(tokens) and tokens[i] == ":":
            i += 1
        if i < len(tokens) and tokens[i] == "{":
            value, i = _parse_block(tokens, i + 1)
            i += 1  # the closing brace
        else:
            value = _scalar(tokens[i])
            i += 1
        _add(node, key, value)
    return node, i


def _scalar(token: str) -> object:
    if token.startswith('"'):
        return bytes(token[1:-1], "utf-8").decode("unicode_escape")
    return token


def _add(node: dict, key: str, value: object) -> None:
    if key not in node:
        node[key] = value
    elif isinstance(node[key], list):
        node[key].append(value)
    else:
        node[key] = [node[key], value]
