"""The codegen part of PyTorch's `compile` level, run after c10 + c10_cuda were built."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from lmsforge.verify.pytorch_codegen import guards, inputs, torchgen, units

GENERATED_SUBDIR = "codegen"
MAX_NAMED = 5


@dataclass
class CodegenResult:
    guard_report: guards.GuardReport | None = None  # None: the series does not touch torchgen
    compiled: list[units.Compiled] = field(default_factory=list)
    python_files: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # one line each
    torchgen_seconds: float = 0.0
    not_run: str = ""  # why nothing past the c10 build was checked

    def summary(self) -> str:
        if self.not_run:
            return f"codegen checks not run: {self.not_run}"
        parts = []
        if self.guard_report is not None:
            parts.append(f"pin guard: {self.guard_report.summary()}")
        ok = sum(1 for c in self.compiled if c.ok)
        parts.append(f"{ok} of {len(self.compiled)} touched TUs syntax-compiled")
        parts.append(f"{len(self.python_files)} Python files byte-compiled")
        return "; ".join(parts)

    def facts(self) -> dict[str, object]:
        facts: dict[str, object] = {
            "syntax_tus": {c.unit.name: {"ok": c.ok, "seconds": round(c.seconds, 1)}
                           for c in self.compiled},
            "python_files": len(self.python_files),
            "torchgen_seconds": round(self.torchgen_seconds, 1),
        }
        report = self.guard_report
        if report is not None:
            facts.update({"guarded_unstructured": report.unstructured_guarded,
                          "guarded_structured": report.structured_guarded,
                          "unguarded": len(report.missing),
                          "wrappers_without_tensors": report.without_tensors})
        return facts


def run(tree: Path, base: str, work_dir: Path, c10_generated: Path, cache_root: Path,
        jobs: int, log: Path, say: Callable[[str], None] = print) -> CodegenResult:
    result = CodegenResult()
    touched = units.touched_files(tree, base)
    if touched is None:
        result.not_run = f"no git history from {base[:12]} in the tree, so no series to read"
        say(f"compile: codegen checks not run: {result.not_run}")
        return result
    generated: list[Path] = []
    out = work_dir / GENERATED_SUBDIR
    if any(path.startswith("torchgen/") for path in touched):
        say(f"compile: running the tree's torchgen into {out}")
        gen = torchgen.generate(tree, out, log)
        result.torchgen_seconds = gen.seconds
        register_cuda = out / torchgen.REGISTER_CUDA
        report = guards.check(register_cuda.read_text())
        result.guard_report = report
        say(f"compile: pin guard: {report.summary()}")
        for line in report.missing[:MAX_NAMED]:
            result.failures.append(f"unguarded {line}")
        if len(report.missing) > MAX_NAMED:
            result.failures.append(f"... and {len(report.missing) - MAX_NAMED} more unguarded "
                                   "wrappers")
        if not report.ok and not report.missing:
            result.failures.append("no CUDA wrapper declares the pin guard")
        if result.failures:
            return result  # compiling would take a minute to add nothing to the verdict
        generated.append(register_cuda)
    else:
        say("compile: the series does not touch torchgen; no pin guard to check")

    plan = units.plan(tree, touched, generated)
    if plan:
        if not generated:
            torchgen.generate(tree, out, log)  # the touched TUs include generated headers
        headers = inputs.header_dirs(cache_root, inputs.wheels_for(tree))
        cxx_flags = units.flags(tree, out, c10_generated, headers, inputs.python_include_dir())
        say(f"compile: syntax-compiling {len(plan)} translation units")
        result.compiled = units.compile_units(plan, cxx_flags, log, jobs)
        for compiled in result.compiled:
            say(f"compile:   {'ok    ' if compiled.ok else 'FAILED'} {compiled.seconds:5.1f} s  "
                f"{compiled.unit.name}")
            if not compiled.ok:
                result.failures.append(f"{compiled.unit.name}: {compiled.first_error}")
    result.python_files, python_failures = units.byte_compile(tree, touched)
    result.failures += python_failures
    return result
