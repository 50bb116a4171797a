"""The plan trace file (docs/plan-trace-format.md): JSON lines, a header then one operator per
line. Writing and reading only; what the numbers mean is the tracer's and the replay's business."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lmsforge.errors import UsageError

FORMAT = "lmsforge-plan-trace"
VERSION = 1

HEADER_FIELDS = {"format": str, "version": int, "model": str, "input": str, "batch": int,
                 "dtype": str, "torch": str, "stream_note": str, "initial": list, "profiles": list}
OP_FIELDS = {"id": int, "name": str, "reads": list, "writes": list, "allocs": list, "frees": list,
             "stream": int, "flops": int, "bytes_read": int, "bytes_written": int,
             "duration_us": dict}


@dataclass
class Storage:
    """A storage live before the step starts (parameters, buffers, the batch)."""
    id: int
    bytes: int
    kind: str  # "param", "buffer", "input"


@dataclass
class Op:
    id: int
    name: str
    reads: list[int]
    writes: list[int]
    allocs: list[list[int]]  # [storage id, bytes], in the order the operator made them
    frees: list[int]  # storages whose last reference died after this operator, before the next
    stream: int = 0  # 0: the default stream
    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    duration_us: dict[str, float] = field(default_factory=dict)


@dataclass
class Trace:
    model: str
    input: str
    batch: int
    dtype: str
    torch: str
    initial: list[Storage]
    ops: list[Op]
    profiles: list[str] = field(default_factory=list)
    stream_note: str = "every operator runs on the default stream (stream 0)"

    def peak_live_bytes(self) -> int:
        """The most bytes of storage alive at once without LMS: before each operator everything
        live, plus what it allocates; its frees come after it."""
        return self._peak({})

    def steady_peak_bytes(self) -> int:
        """The same for a step after the first: what the step allocates and never frees
        (optimizer state) is alive from its start, and the operators that made it make nothing
        new then."""
        kept: dict[int, int] = {}
        for op in self.ops:
            kept.update(op.allocs)
            for sid in op.frees:
                kept.pop(sid, None)
        return self._peak(kept)

    def _peak(self, kept: dict[int, int]) -> int:
        sizes: dict[int, int] = {s.id: s.bytes for s in self.initial}
        live = sum(sizes.values()) + sum(kept.values())
        peak = live
        for op in self.ops:
            for sid, nbytes in op.allocs:
                if sid not in kept:
                    sizes[sid] = nbytes
                    live += nbytes
            peak = max(peak, live)
            for sid in op.frees:
                live -= sizes.pop(sid)
        return peak


def write(trace: Trace, path: Path) -> None:
    header = {"format": FORMAT, "version": VERSION, "model": trace.model, "input": trace.input,
              "batch": trace.batch, "dtype": trace.dtype, "torch": trace.torch,
              "stream_note": trace.stream_note, "profiles": trace.profiles,
              "initial": [asdict(s) for s in trace.initial]}
    tmp = path.with_name(path.name + ".part")
    with tmp.open("w") as out:
        out.write(json.dumps(header) + "\n")
        for op in trace.ops:
            out.write(json.dumps(asdict(op)) + "\n")
    tmp.replace(path)  # a reader never sees half a trace


def _checked(record: object, fields: dict[str, type], where: str) -> dict:
    if not isinstance(record, dict):
        raise UsageError(f"{where}: expected a JSON object")
    for name, kind in fields.items():
        if name not in record:
            raise UsageError(f"{where}: missing field '{name}'")
        value = record[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise UsageError(f"{where}: field '{name}' must be {kind.__name__}, "
                             f"not {type(value).__name__}")
    return record


def read(path: Path) -> Trace:
    """The trace in PATH; a file of another format or version, or a record missing a field, is
    refused with one line naming the file, the line and the field."""
    try:
        lines = path.read_text().splitlines()
    except OSError as err:
        raise UsageError(f"cannot read plan trace {path}: {err.strerror}") from None
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as err:
            raise UsageError(f"{path}:{number}: not JSON ({err.msg})") from None
    if not records:
        raise UsageError(f"{path}: empty, not a plan trace")
    head = records[0]
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise UsageError(f"{path}:1: not an {FORMAT} file")
    if head.get("version") != VERSION:
        raise UsageError(f"{path}:1: {FORMAT} version {head.get('version')!r}; this lmsforge "
                         f"reads version {VERSION} only")
    _checked(head, HEADER_FIELDS, f"{path}:1")
    initial = [Storage(**{k: _checked(s, {"id": int, "bytes": int, "kind": str},
                                      f"{path}:1: initial storage")[k]
                          for k in ("id", "bytes", "kind")}) for s in head["initial"]]
    ops = []
    for number, record in enumerate(records[1:], 2):
        _checked(record, OP_FIELDS, f"{path}:{number}")
        ops.append(Op(**{name: record[name] for name in OP_FIELDS}))
    return Trace(model=head["model"], input=head["input"], batch=head["batch"],
                 dtype=head["dtype"], torch=head["torch"], initial=initial, ops=ops,
                 profiles=head["profiles"], stream_note=head["stream_note"])
