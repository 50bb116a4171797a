"""Check the LMS pin guard in the wrappers of a generated ``RegisterCUDA.cpp``.

A wrapper is a function ``wrapper_CUDA_<op>(...)`` (``wrapper_<overload>_<op>`` in 1.13). It
takes tensors when one of its parameters is tensor-like (``at::Tensor``, an optional or a list of
them). Such a wrapper must declare ``at::LmsPinGuard`` naming every tensor-like parameter; a
structured wrapper (one that calls ``op.meta(...)``) must declare it before that call, an
unstructured one anywhere before it returns.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

GUARD_CLASS = "at::LmsPinGuard"
# 2.x names them wrapper_CUDA_<op>, 1.13 wrapper_<overload>_<op>; RegisterCUDA.cpp holds only
# CUDA wrappers either way.
_WRAPPER = re.compile(r"^(?P<ret>[^\s(][^(]*?)\s(?P<name>wrapper_\w+)\((?P<params>.*)\) \{$")
_TENSOR_LIKE = re.compile(r"\bat::(Tensor|TensorList|ITensorListRef|IOptTensorListRef)\b")
_GUARD = re.compile(re.escape(GUARD_CLASS) + r"\s+\w+\((?P<args>[^)]*)\);")
_META_CALL = "op.meta("


@dataclass(frozen=True)
class Wrapper:
    name: str
    structured: bool
    tensor_params: tuple[str, ...]
    guard_args: tuple[str, ...] | None  # None: no guard declared
    guard_before_meta: bool


@dataclass
class GuardReport:
    wrappers: int = 0
    without_tensors: int = 0
    unstructured_guarded: int = 0
    structured_guarded: int = 0
    missing: list[str] = field(default_factory=list)  # "name: why"

    @property
    def ok(self) -> bool:
        return not self.missing and self.unstructured_guarded + self.structured_guarded > 0

    def summary(self) -> str:
        return (f"{self.unstructured_guarded} unstructured + {self.structured_guarded} structured "
                f"CUDA wrappers guarded, {len(self.missing)} missing "
                f"({self.without_tensors} of {self.wrappers} take no tensors)")


def split_params(params: str) -> list[str]:
    """Split a C++ parameter list at top-level commas (templates may hold commas)."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(params):
        if char in "<([":
            depth += 1
        elif char in ">)]":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(params[start:i].strip())
            start = i + 1
    if params[start:].strip():
        parts.append(params[start:].strip())
    return parts


def _param_name(param: str) -> str:
    return re.split(r"[\s&*]+", param.split("=")[0].strip())[-1]


def parse_wrappers(source: str) -> list[Wrapper]:
    wrappers = []
    lines = source.splitlines()
    i = 0
    while i < len(lines):
        match = _WRAPPER.match(lines[i])
        i += 1
        if not match:
            continue
        body = []
        while i < len(lines) and lines[i] != "}":
            body.append(lines[i])
            i += 1
        text = "\n".join(body)
        tensor_params = tuple(_param_name(p) for p in split_params(match["params"])
                              if _TENSOR_LIKE.search(p.split("=")[0]))
        guard = _GUARD.search(text)
        meta_at = text.find(_META_CALL)
        wrappers.append(Wrapper(
            name=match["name"],
            structured=meta_at >= 0,
            tensor_params=tensor_params,
            guard_args=(tuple(a.strip() for a in guard["args"].split(",") if a.strip())
                        if guard else None),
            guard_before_meta=guard is not None and meta_at >= 0 and guard.start() < meta_at,
        ))
    return wrappers


def check(source: str) -> GuardReport:
    report = GuardReport()
    for wrapper in parse_wrappers(source):
        report.wrappers += 1
        if not wrapper.tensor_params:
            report.without_tensors += 1
            continue
        kind = "structured" if wrapper.structured else "unstructured"
        if wrapper.guard_args is None:
            report.missing.append(f"{wrapper.name}: {kind} wrapper without {GUARD_CLASS}")
        elif set(wrapper.guard_args) != set(wrapper.tensor_params):
            unpinned = sorted(set(wrapper.tensor_params) - set(wrapper.guard_args))
            report.missing.append(f"{wrapper.name}: guard does not pin {', '.join(unpinned)}"
                                  if unpinned else f"{wrapper.name}: guard names unknown arguments")
        elif wrapper.structured and not wrapper.guard_before_meta:
            report.missing.append(f"{wrapper.name}: guard declared after op.meta(...)")
        elif wrapper.structured:
            report.structured_guarded += 1
        else:
            report.unstructured_guarded += 1
    return report
