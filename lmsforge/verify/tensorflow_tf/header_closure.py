"""The files a compile reads, from the compiler's own dependency output (``-M``).

The TensorFlow GPU bundle carries exactly the headers its program's translation units include,
not the wheel's 229 MB of ``tensorflow/include``: each unit's compile command is run once more
with ``-M`` in place of ``-c SOURCE -o OBJECT``, and every file it names is assigned to the
include root it was found under, so the bundle can rebuild the same search path from copies.
Files under none of the roots must come from the compiler's own search path (the C and C++
standard libraries, which every GPU host has); anything else is an error, because the host would
not have it.
"""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import NamedTuple, Sequence

from lmsforge.errors import LmsforgeError


class Root(NamedTuple):
    name: str  # the folder under the bundle's src/ that mirrors it
    path: Path


class Closure(NamedTuple):
    files: dict[str, set[str]]  # root name -> paths relative to the root
    system: set[str]  # files from the compiler's own search path (not carried)


def dependency_command(command: Sequence[str]) -> list[str]:
    """COMMAND (``... -c SOURCE -o OBJECT``) turned into one that prints its dependencies."""
    words = list(command)
    if "-c" not in words:
        raise ValueError(f"not a compile command: {' '.join(words)}")
    at = words.index("-c")
    source = words[at + 1]
    rest = words[at + 2:]
    if rest[:1] == ["-o"]:
        rest = rest[2:]
    return [*words[:at], *rest, "-M", source]


def parse_make_rule(text: str) -> list[str]:
    """The prerequisites of the make rule(s) ``-M`` prints (continuations and escaped spaces)."""
    joined = text.replace("\\\n", " ")
    files: list[str] = []
    for line in joined.splitlines():
        if ":" not in line:
            continue
        prerequisites = line.split(": ", 1)[1] if ": " in line else line.split(":", 1)[1]
        words = re.findall(r"(?:\\ |[^\s])+", prerequisites)
        files += [word.replace("\\ ", " ") for word in words]
    return list(dict.fromkeys(files))


def compiler_search_dirs(cxx: str) -> list[Path]:
    """The compiler's own #include <...> search path (libstdc++, glibc, its builtins)."""
    proc = subprocess.run([cxx, "-E", "-x", "c++", "-", "-v"], input="", capture_output=True,
                          text=True)
    lines = proc.stderr.splitlines()
    try:
        start = lines.index("#include <...> search starts here:") + 1
        end = lines.index("End of search list.")
    except ValueError:
        raise LmsforgeError(f"{cxx} -v printed no include search list") from None
    return [Path(line.strip()).resolve() for line in lines[start:end]]


def closure(commands: Sequence[Sequence[str]], roots: Sequence[Root], cxx: str,
            jobs: int) -> Closure:
    """Every file the COMMANDS read, by root; raises LmsforgeError for one under no root and
    outside the compiler's search path."""
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        procs = list(pool.map(lambda cmd: subprocess.run(dependency_command(cmd),
                                                         capture_output=True, text=True),
                              commands))
    for cmd, proc in zip(commands, procs):
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["no output"])[0]
            raise LmsforgeError(f"listing the headers of {cmd[cmd.index('-c') + 1]} failed: "
                                f"{first}")
    resolved_roots = [(root.name, root.path.resolve()) for root in roots]
    system_dirs = compiler_search_dirs(cxx)
    found: dict[str, set[str]] = {root.name: set() for root in roots}
    system: set[str] = set()
    for proc in procs:
        for word in parse_make_rule(proc.stdout):
            path = Path(word).resolve()
            owner = _owner(path, resolved_roots)
            if owner is not None:
                name, root = owner
                found[name].add(path.relative_to(root).as_posix())
            elif any(path.is_relative_to(d) for d in system_dirs):
                system.add(str(path))
            else:
                raise LmsforgeError(f"{path} is read by the build but lies under no bundled "
                                    "folder and outside the compiler's own search path")
    return Closure(found, system)


def _owner(path: Path, roots: Sequence[tuple[str, Path]]) -> tuple[str, Path] | None:
    """The innermost root that holds PATH (roots may nest)."""
    holding = [(name, root) for name, root in roots if path.is_relative_to(root)]
    return max(holding, key=lambda item: len(item[1].parts)) if holding else None
