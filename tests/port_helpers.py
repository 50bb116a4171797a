"""Helpers shared by the port tests: the stop line, and running a printed command as pasted."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from click.testing import Result

from fixtures import ALLOCATOR_V1, ENV, STORAGE_V1, git, lmsforge


def stop_line(result: Result) -> str:
    """The single `lmsforge: port stopped at` line of a port that stopped for the user (exit 3)."""
    assert result.exit_code == 3, result.output
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("lmsforge: ")]
    assert len(lines) == 1 and lines[0].startswith("lmsforge: port stopped at "), result.stderr
    return lines[0]


def printed_commands(text: str) -> list[str]:
    """Every `lmsforge …` command quoted in backticks in TEXT."""
    return re.findall(r"`(lmsforge [^`]+)`", text)


def run_pasted(command: str, env: dict[str, str] | None = None) -> Result:
    """Run a printed command exactly as a user pasting it into a shell would."""
    words = shlex.split(command)
    assert words[0] == "lmsforge", command
    return lmsforge(*words[1:], env=env)


# --- a long series over an upstream with every porting situation ---------------------------------

STORAGE_RESOLVED = "struct storage {\n  void *data;\n  size_t n;\n  void *lms;\n};\n"


def part_text(number: int) -> str:
    return f"int lms_part_{number}(void) {{ return {number}; }}\n"


def make_long_upstream(root: Path) -> Path:
    """Tags v1.0.0 and v2.0.0; between them upstream renames the allocator (and moves its
    code down), changes the storage line the series hooks, and adopts one LMS file."""
    repo = root / "long-upstream"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "src").mkdir()
    (repo / "src" / "alloc.c").write_text(ALLOCATOR_V1)
    (repo / "src" / "storage.h").write_text(STORAGE_V1)
    _rich_files_v1(repo)
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "toy 1.0.0")
    git(repo, "tag", "v1.0.0")
    git(repo, "mv", "src/alloc.c", "src/allocator.c")
    (repo / "src" / "allocator.c").write_text("/* the allocator */\n" + ALLOCATOR_V1)
    git(repo, "commit", "-q", "-am", "rename the allocator")
    (repo / "src" / "storage.h").write_text(STORAGE_V1.replace("unsigned long size", "size_t n"))
    git(repo, "commit", "-q", "-am", "storage: rename size")
    (repo / "src" / "lms").mkdir()
    (repo / "src" / "lms" / "part005.c").write_text(part_text(5))
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "adopt an LMS helper")
    _rich_upstream_changes(repo)
    git(repo, "tag", "v2.0.0")
    return repo


# The long toy's hazards besides the allocator rename and the storage conflict: a binary file
# both sides change, a file upstream deletes and a patch changes, a file only a patch's mode
# change touches, a CRLF file, and a file upstream renames *and* modifies.
ENGINE_V1 = "".join(f"int engine_{i}(void) {{ return {i}; }}\n" for i in range(12))
CRLF_V1 = b"".join(b"key%d=%d\r\n" % (i, i) for i in range(12))
BLOB_RESOLVED = b"\x89BLOB\x00resolved by hand\x00\n"


def _rich_files_v1(repo: Path) -> None:
    for folder in ("assets", "tools", "win"):
        (repo / folder).mkdir(exist_ok=True)
    (repo / ".gitattributes").write_text("*.ini -text\n")  # keep CRs as they are
    (repo / "assets" / "blob.bin").write_bytes(BLOB_V1)
    (repo / "src" / "legacy.c").write_text(LEGACY_V1)
    (repo / "tools" / "gen.py").write_text("print('gen')\n")
    (repo / "win" / "config.ini").write_bytes(CRLF_V1)
    (repo / "src" / "engine.c").write_text(ENGINE_V1)


def _rich_upstream_changes(repo: Path) -> None:
    (repo / "assets" / "blob.bin").write_bytes(BLOB_UPSTREAM)
    git(repo, "rm", "-q", "src/legacy.c")
    (repo / "win" / "config.ini").write_bytes(CRLF_V1.replace(b"key0=0", b"key0=upstream"))
    (repo / "src" / "core").mkdir()
    git(repo, "mv", "src/engine.c", "src/core/engine.c")
    (repo / "src" / "core" / "engine.c").write_text(
        "/* the engine */\n" + ENGINE_V1.replace("return 1;", "return -1;"))
    git(repo, "commit", "-q", "-am", "new blob, legacy gone, config key0, engine moved+changed")


Content = str | bytes | tuple[int, str | bytes]  # text, bytes, or (mode, text or bytes)


def long_series_patches(count: int) -> list[tuple[str, str, str, dict[str, Content]]]:
    """(slug, class, subject, {path: new content}) for COUNT patches, hooks in the middle."""
    patches = []
    step_20 = "int step_20(void) { return 20; }\n"
    alloc_hooked = ALLOCATOR_V1.replace(step_20, step_20 + "int lms_reclaim(void);\n")
    storage_hooked = STORAGE_V1.replace("  unsigned long size;\n",
                                        "  unsigned long size;\n  void *lms;\n")
    # At fifths of the series (count >= 10): a mode-only patch (picked), a binary conflict and
    # a delete/modify conflict (stops the scripted user resolves), a CRLF edit and an edit of
    # the file upstream renamed and modified (both picked cleanly).
    rich = {
        count // 5: ("gen-mode", "build-fix", "Make the generator executable",
                     {"tools/gen.py": (0o100755, "print('gen')\n")}),
        count * 2 // 5: ("blob-hook", "hook", "LMS blob", {"assets/blob.bin": BLOB_PATCH}),
        count * 3 // 5: ("legacy-hook", "hook", "Hook the legacy code",
                         {"src/legacy.c": LEGACY_V1 + "int lms_legacy;\n"}),
        count * 4 // 5: ("crlf-tweak", "build-fix", "LMS settings",
                         {"win/config.ini": CRLF_V1.replace(b"key9=9", b"key9=9\r\nlms=on")}),
        count - 2: ("engine-hook", "hook", "Hook the engine",
                    {"src/engine.c": ENGINE_V1 + "int lms_engine;\n"}),
    } if count >= 10 else {}
    for number in range(1, count + 1):
        if number == count // 3:
            patches.append(("allocator-hook", "hook", "Reclaim in the allocator",
                            {"src/alloc.c": alloc_hooked}))
        elif number == count // 2:
            patches.append(("storage-hook", "hook", "Track LMS state per storage",
                            {"src/storage.h": storage_hooked}))
        elif number in rich:
            patches.append(rich[number])
        else:
            patches.append((f"part-{number:03d}", "new-files", f"Add LMS part {number}",
                            {f"src/lms/part{number:03d}.c": part_text(number)}))
    return patches


def commit_many(tree: Path, patches: list[tuple[str, str, str, dict[str, Content]]]) -> None:
    """Commit PATCHES on the tree's branch in one `git fast-import` (a maintainer's commits)."""
    branch = git(tree, "symbolic-ref", "HEAD")
    stream = []
    for number, (slug, klass, subject, files) in enumerate(patches, 1):
        message = (f"{subject}\n\nWhy: tests need a long series.\n\nLms-Patch-Id: {slug}\n"
                   f"Lms-Class: {klass}\n").encode()
        stream.append(f"commit {branch}\n".encode())
        stream.append(b"author lmsforge <lmsforge@lmsforge.invalid> 1700000000 +0000\n")
        stream.append(b"committer lmsforge <lmsforge@lmsforge.invalid> 1700000000 +0000\n")
        stream.append(f"data {len(message)}\n".encode() + message)
        if number == 1:
            stream.append(f"from {git(tree, 'rev-parse', 'HEAD')}\n".encode())
        for path, content in files.items():
            mode, data = content if isinstance(content, tuple) else (0o100644, content)
            data = data.encode() if isinstance(data, str) else data
            stream.append(f"M {mode:06o} inline {path}\ndata {len(data)}\n".encode() + data)
        stream.append(b"\n")
    subprocess.run(["git", "fast-import", "--quiet"], cwd=tree, input=b"".join(stream),
                   check=True, env={**os.environ, **ENV})
    git(tree, "reset", "-q", "--hard", "HEAD")


def declare_toy(root: Path, upstream: Path, tags: tuple[str, ...]) -> Path:
    """A patches folder under ROOT declaring framework `toy` from the git repository UPSTREAM,
    each of TAGS pinned to its commit; returns the patches folder."""
    patches = root / "patches"
    folder = patches / "toy"
    folder.mkdir(parents=True)
    lines = ["framework: toy", "git:", f"  url: {upstream}", "tags:"]
    for tag in tags:
        lines += [f"  {tag}:", f"    commit: {git(upstream, 'rev-parse', tag + '^{commit}')}"]
    (folder / "upstream.yaml").write_text("\n".join(lines) + "\n")
    return patches


def make_long_toy(root: Path, count: int) -> dict[str, Path]:
    """A patches folder declaring the long upstream, with a COUNT-patch series on v1.0.0."""
    upstream = make_long_upstream(root)
    patches = declare_toy(root, upstream, ("v1.0.0", "v2.0.0"))
    tree = root / "work" / "series-tree"
    result = lmsforge("--patches-dir", str(patches), "apply", "-f", "toy", "-t", "v1.0.0",
                      "--new", "--source", "git", "--into", str(tree))
    assert result.exit_code == 0, result.output
    commit_many(tree, long_series_patches(count))
    result = lmsforge("--patches-dir", str(patches), "export", "-f", "toy", "-t", "v1.0.0",
                      "--tree", str(tree))
    assert result.exit_code == 0, result.output
    return {"upstream": upstream, "patches": patches, "tree": tree, "root": root}


# --- killing lmsforge at a chosen git call ------------------------------------------------------

_KILLING_GIT = """#!/bin/bash
# Test stand-in for git: runs the real git, and SIGKILLs the lmsforge process that called it
# (alone, or with its whole process group) before or after the Nth call matching a pattern.
fire() {
  echo >> "$LMSFORGE_TEST_KILL_COUNT"
  [ "$(wc -l < "$LMSFORGE_TEST_KILL_COUNT")" = "${LMSFORGE_TEST_KILL_NTH:-1}" ] || return 0
  if [ "$LMSFORGE_TEST_KILL_GROUP" = 1 ]; then kill -KILL -- "-$PPID"; sleep 5; fi
  kill -KILL "$PPID"  # alone: this git call goes on as an orphan, as git does
}
matching=0
case " $* " in *"$LMSFORGE_TEST_KILL_MATCH"*) matching=1 ;; esac
[ "$matching" = 1 ] && [ "$LMSFORGE_TEST_KILL_WHEN" = before ] && fire
"$LMSFORGE_TEST_REAL_GIT" "$@"
rc=$?
if [ "$matching" = 1 ] && [ "$LMSFORGE_TEST_KILL_WHEN" = after ] && \\
   { [ -z "$LMSFORGE_TEST_KILL_RC" ] || [ "$LMSFORGE_TEST_KILL_RC" = "$rc" ]; }; then
  fire
fi
exit $rc
"""


def killing_env(root: Path, kill: dict[str, str] | None) -> dict[str, str]:
    """The environment for lmsforge with $TMPDIR at ROOT/tmp and, with KILL (match,
    when=before|after, rc, nth, group=1|0), the git stand-in that SIGKILLs it at one git call."""
    env = {**os.environ, "TMPDIR": str(root / "tmp")}
    (root / "tmp").mkdir(exist_ok=True)
    if kill is not None:
        wrapper = root / "killing-git"
        wrapper.mkdir(exist_ok=True)
        (wrapper / "git").write_text(_KILLING_GIT)
        (wrapper / "git").chmod(0o755)
        counter = root / "kill-count"
        counter.write_text("")
        env.update(PATH=f"{wrapper}{os.pathsep}{env['PATH']}",
                   LMSFORGE_TEST_REAL_GIT=shutil.which("git") or "git",
                   LMSFORGE_TEST_KILL_COUNT=str(counter),
                   LMSFORGE_TEST_KILL_MATCH=kill["match"],
                   LMSFORGE_TEST_KILL_WHEN=kill.get("when", "before"),
                   LMSFORGE_TEST_KILL_RC=kill.get("rc", ""),
                   LMSFORGE_TEST_KILL_NTH=kill.get("nth", "1"),
                   LMSFORGE_TEST_KILL_GROUP=kill.get("group", "1"))
    return env


def lmsforge_process(args: list[str], root: Path, *, kill: dict[str, str] | None = None,
                     timeout: float = 120) -> subprocess.CompletedProcess[str]:
    """Run `python -m lmsforge ARGS` in its own process group, with $TMPDIR at ROOT/tmp.

    KILL (match, when=before|after, rc, nth, group=1|0) SIGKILLs it at one git call; a process
    killed alone may leave git children running, so this waits until its group is gone.
    """
    env = killing_env(root, kill)
    proc = subprocess.Popen([sys.executable, "-m", "lmsforge", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            start_new_session=True)
    stdout, stderr = proc.communicate(timeout=timeout)
    wait_for_group(proc.pid)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def wait_for_group(pgid: int, timeout: float = 30) -> None:
    """Orphaned children of a killed process finish what they were doing; wait for them."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.02)
    raise AssertionError(f"process group {pgid} still runs after {timeout} s")


def kill_count(root: Path) -> int:
    """How many git calls matched the last KILL pattern (with nth=0 nothing is killed)."""
    return len((root / "kill-count").read_text().splitlines())


# --- the toy series of tests/fixtures.py, driven through the CLI --------------------------------


def cli(toy: dict[str, Path], *args: str, env: dict[str, str] | None = None) -> Result:
    return lmsforge("--patches-dir", str(toy["patches"]), *args, env=env)


def port(toy: dict[str, Path], into: Path, *args: str) -> Result:
    return cli(toy, "port", "--into", str(into), *args)


def start(toy: dict[str, Path], to: str, into: Path, *extra: str) -> Result:
    return port(toy, into, "-f", "toy", "--from", "v1.0.0", "--to", to, "--source", "git",
                *extra)


def start_args(toy: dict[str, Path], to: str, into: Path) -> list[str]:
    """The same start as `start`, as arguments for `lmsforge_process`."""
    return ["--patches-dir", str(toy["patches"]), "port", "--into", str(into), "-f", "toy",
            "--from", "v1.0.0", "--to", to, "--source", "git"]


def reexport_on_git(toy: dict[str, Path]) -> dict[str, Path]:
    """The toy series re-exported on the git source, so A and B share upstream history."""
    tree = toy["work"] / "git-tree"
    result = cli(toy, "apply", "-f", "toy", "-t", "v1.0.0", "--source", "git", "--into",
                 str(tree))
    assert result.exit_code == 0, result.output
    assert cli(toy, "export", "-f", "toy", "-t", "v1.0.0", "--tree", str(tree)).exit_code == 0
    return toy


def resolve_storage(into: Path) -> None:
    """The hand resolution of the toy's storage-hook conflict on v2.0.0."""
    (into / "src" / "storage.h").write_text(STORAGE_RESOLVED)


def record_storage_resolution(toy: dict[str, Path], work: Path) -> None:
    """Put the resolution of the long series' storage conflict in the shared rerere cache.

    Made the way git makes it: a cherry-pick of the storage hook onto v2.0.0 in a scratch
    repository with rerere on, the resolution written, `git rerere` recording it.
    """
    scratch = work / "rerere-scratch"
    git(work, "init", "-q", str(scratch))
    git(scratch, "config", "rerere.enabled", "true")
    git(scratch, "fetch", "-q", str(toy["upstream"]), "refs/tags/v2.0.0:refs/tags/v2.0.0")
    git(scratch, "fetch", "-q", str(toy["tree"]), "HEAD:refs/heads/series")
    git(scratch, "checkout", "-q", "v2.0.0")
    hook = git(scratch, "log", "--format=%H", "--grep=Lms-Patch-Id: storage-hook", "series")
    pick = subprocess.run(["git", "cherry-pick", hook], cwd=scratch, capture_output=True,
                          env={**os.environ, **ENV})
    assert pick.returncode == 1, pick.stderr  # the conflict the port meets
    (scratch / "src" / "storage.h").write_text(STORAGE_RESOLVED)
    git(scratch, "rerere")
    shutil.copytree(scratch / ".git" / "rr-cache", toy["patches"] / "toy" / "rr-cache")
    shutil.rmtree(scratch)


# --- a toy whose patches meet a binary conflict, a file upstream deleted and a mode change -----

BLOB_V1 = b"\x89BLOB\x00\x01\x02" + bytes(range(256)) + b"\x00v1\n"
BLOB_UPSTREAM = BLOB_V1.replace(b"v1", b"upstream")
BLOB_PATCH = BLOB_V1.replace(b"v1", b"patched")
LEGACY_V1 = "".join(f"int legacy_{i}(void) {{ return {i}; }}\n" for i in range(10))


def make_hazard_upstream(root: Path) -> Path:
    """Tags v1.0.0; v1.1.0 (only the README changes); v2.0.0 (v1.1.0, then upstream changes
    the binary assets/blob.bin and deletes src/legacy.c). tools/gen.py is 100644 on every tag."""
    repo = root / "hazard-upstream"
    (repo / "src").mkdir(parents=True)
    (repo / "assets").mkdir()
    (repo / "tools").mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "src" / "a.c").write_text("int a(void) { return 1; }\n")
    (repo / "src" / "legacy.c").write_text(LEGACY_V1)
    (repo / "assets" / "blob.bin").write_bytes(BLOB_V1)
    (repo / "tools" / "gen.py").write_text("print('gen')\n")
    (repo / "README").write_text("hazard toy\n")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "toy 1.0.0")
    git(repo, "tag", "v1.0.0")
    (repo / "README").write_text("hazard toy, 1.1\n")
    git(repo, "commit", "-q", "-am", "toy 1.1.0: readme")
    git(repo, "tag", "v1.1.0")
    (repo / "assets" / "blob.bin").write_bytes(BLOB_UPSTREAM)
    git(repo, "rm", "-q", "src/legacy.c")
    git(repo, "commit", "-q", "-am", "toy 2.0.0: new blob, legacy gone")
    git(repo, "tag", "v2.0.0")
    return repo


def make_hazard_toy(root: Path) -> dict[str, Path]:
    """A patches folder with a series on v1.0.0 of the hazard upstream: `gen-mode` (only makes
    tools/gen.py 100755), `blob-mixed` (changes assets/blob.bin and src/a.c), `legacy-hook`
    (changes src/legacy.c). Ported to v1.1.0 every pick is clean; to v2.0.0 it stops at
    blob-mixed (binary conflict), then at legacy-hook (deleted upstream, changed by the patch)."""
    from fixtures import commit_patch

    upstream = make_hazard_upstream(root)
    patches = declare_toy(root, upstream, ("v1.0.0", "v1.1.0", "v2.0.0"))
    tree = root / "work" / "hazard-tree"
    result = lmsforge("--patches-dir", str(patches), "apply", "-f", "toy", "-t", "v1.0.0",
                      "--new", "--source", "git", "--into", str(tree))
    assert result.exit_code == 0, result.output

    def blob_mixed(t: Path) -> None:
        (t / "assets" / "blob.bin").write_bytes(BLOB_PATCH)
        (t / "src" / "a.c").write_text("int a(void) { return 1; }\nint lms_a(void);\n")

    commit_patch(tree, "gen-mode", "build-fix", "Make the generator executable",
                 lambda t: (t / "tools" / "gen.py").chmod(0o755))
    commit_patch(tree, "blob-mixed", "hook", "LMS blob and hook", blob_mixed)
    commit_patch(tree, "legacy-hook", "hook", "Hook the legacy code",
                 lambda t: (t / "src" / "legacy.c").write_text(LEGACY_V1 + "int lms_legacy;\n"))
    result = lmsforge("--patches-dir", str(patches), "export", "-f", "toy", "-t", "v1.0.0",
                      "--tree", str(tree))
    assert result.exit_code == 0, result.output
    return {"upstream": upstream, "patches": patches, "tree": tree, "root": root,
            "work": root / "work"}


_DURATION = re.compile(rb"^(- the port's own commands: |- by hand, [^:]*: |  - [^:]*: )"
                       rb"(\d+ min )?\d+ s", re.M)


def timeless(files: dict[str, bytes | str]) -> dict[str, bytes | str]:
    """FILES with the wall times of PORT-REPORT.md's Time section blanked: a killed port takes
    longer than an uninterrupted one, everything else must be byte-identical."""
    return {name: _DURATION.sub(rb"\1T", data)
            if name.endswith("PORT-REPORT.md") and isinstance(data, bytes) else data
            for name, data in files.items()}
