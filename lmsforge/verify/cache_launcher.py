"""A compiler launcher for CMake (``CMAKE_CXX_COMPILER_LAUNCHER``) that runs each compile through
the object cache (object_cache.py), so that the PyTorch c10 builds of verification share
objects between build folders and trees of the same content: the bundled series' build, each
harness's copy, each mutant's worktree, a build with and without another root.

    python -m lmsforge.verify.cache_launcher --cache DIR --root tree=SRC --root build=BUILD \
        -- g++ ... -MD -MT OBJ -MF OBJ.d -o OBJ -c SRC/x.cpp

The roots are the folders a build names by their path (the source tree, the build folder); they
are named by role in the key and mapped by ``-ffile-prefix-map``. Ninja's dependency file comes
from the preprocessing run that makes the key (``-MD -MF`` stay in its command), so a hit
leaves the same ``.d`` a compile would. A command the cache cannot key runs as it is.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Sequence

from lmsforge.verify import object_cache


def launcher_words(cache_root: Path, roots: dict[str, Path]) -> list[str]:
    """The words that go before the compiler in CMAKE_CXX_COMPILER_LAUNCHER."""
    words = launcher_prefix(cache_root)
    for name, root in roots.items():
        words += ["--root", f"{name}={root.resolve()}"]
    return [*words, "--"]


def launcher_prefix(cache_root: Path) -> list[str]:
    """The launcher's words up to its roots: a build script that knows its folders only when it
    runs (a package's build.sh) adds ``--root NAME=PATH`` words and ``--`` itself."""
    # Ninja runs it in the build folder: the folder lmsforge is imported from goes first on
    # PYTHONPATH, so that a source checkout that was never installed works too.
    package_root = Path(__file__).resolve().parents[2]
    return ["env", f"PYTHONPATH={package_root}", sys.executable, "-m", __name__,
            "--cache", str(cache_root)]


def parse(argv: Sequence[str]) -> tuple[Path, dict[Path, str], list[str]]:
    """(cache folder, roots by path, compiler command) from ARGV; raises ValueError."""
    if "--" not in argv:
        raise ValueError("no `--` before the compiler command")
    split = list(argv).index("--")
    options, command = list(argv[:split]), list(argv[split + 1:])
    if not command:
        raise ValueError("no compiler command after `--`")
    cache, roots = None, {}
    while options:
        flag = options.pop(0)
        if not options:
            raise ValueError(f"{flag} needs a value")
        value = options.pop(0)
        if flag == "--cache":
            cache = Path(value)
        elif flag == "--root" and "=" in value:
            name, path = value.split("=", 1)
            roots[Path(path)] = name
        else:
            raise ValueError(f"unknown option {flag} {value}")
    if cache is None:
        raise ValueError("--cache DIR is required")
    return cache, roots, command


def main(argv: Sequence[str]) -> int:
    try:
        cache, roots, command = parse(argv)
    except ValueError as error:
        print(f"lmsforge cache launcher: {error}; usage: python -m {__name__} --cache DIR "
              f"[--root NAME=PATH ...] -- COMPILER ARGS...", file=sys.stderr)
        return 2
    proc = object_cache.compile_unit(command, roots, cache)
    sys.stdout.write(proc.stdout or "")
    sys.stderr.write(proc.stderr or "")
    return proc.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
