"""Hostile but fair input, one table row per case of
``shared/evidence/hostile-inputs-and-ibm-api.md`` part A (row numbers kept as ids), and of
``shared/evidence/hostile-inputs-2026-11-26.md`` (its case ids: K channel, S signals, P paths,
E environment, D disks, O output; F27 for its finding 27, which has no case id).

A row is a `Case`: what to set up (and the command line it returns), the exit code, a fragment
of the one `lmsforge: error:` line (of the output when the code is 0), what must be left exactly
as it was, and an optional check of what must not be left behind. Rows run in-process, as a
separate process, as root without capabilities (so permissions bite as for any user), or on a
small tmpfs (a full disk). Cases that need several processes at once (races, kills) are `Case`s
with their own `run`. Other tracks add their rows to `CASES` (build, channel, port rows).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Sequence

import pytest
import yaml

from conftest import real_test_cache
from fixtures import git, lmsforge, snapshot
from lmsforge.series import manifest as series_mod

REPO = Path(__file__).resolve().parents[2]
NO_CAPS = ["setpriv", "--inh-caps=-all", "--bounding-set=-all",
           "--securebits=+noroot,+noroot_locked,+no_setuid_fixup,+no_setuid_fixup_locked"]


@dataclass
class Env:
    """A toy upstream with an exported three-patch series, a cache and a scratch folder."""

    root: Path
    patches: Path
    series: Path
    tree: Path  # the work tree the series was exported from
    cache: Path
    upstream: Path
    archive: Path

    def base_args(self) -> list[str]:
        return ["--patches-dir", str(self.patches), "--cache-dir", str(self.cache)]


@dataclass
class Outcome:
    code: int
    stdout: str
    stderr: str


Setup = Callable[[Env], Sequence[str]]


@dataclass(frozen=True)
class Case:
    row: str  # the evidence row, e.g. "A20"; a letter suffix for variants
    setup: Setup  # prepares the input; returns the command line after the global options
    code: int
    says: str  # in the one error line (code != 0) or in the output (code 0)
    unchanged: Callable[[Env], Iterable[Path]] = lambda env: ()
    check: Callable[[Env], None] | None = None  # what must (not) be left behind
    how: str = "in-process"  # or "process", "no-caps", "tmpfs:<MB>"
    run: Callable[[Env], None] | None = None  # a case of its own (races, kills)
    slow: bool = False  # downloads (a real apt) or builds
    environ: dict[str, str] | None = None  # extra environment variables for the command


def run_cli(env: Env, args: Sequence[str], how: str,
            environ: dict[str, str] | None = None) -> Outcome:
    if how == "in-process":
        result = lmsforge(*env.base_args(), *args, env=environ)
        return Outcome(result.exit_code, result.stdout, result.stderr)
    command = [sys.executable, "-m", "lmsforge", *env.base_args(), *args]
    if how == "no-caps":
        command = [*NO_CAPS, *command]
    elif how.startswith("tmpfs:"):
        size = how.split(":", 1)[1]
        env.cache.mkdir(parents=True, exist_ok=True)
        script = (f"mount -t tmpfs -o size={size}m none {env.cache} && "
                  f"{' '.join(map(_quote, command))}; code=$?; "
                  f"echo \"LEFT: $(ls -A {env.cache}/partial 2>/dev/null | grep -v '.lock$')\"; "
                  "exit $code")
        command = ["unshare", "-m", "sh", "-c", script]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(environ or {})})
    return Outcome(proc.returncode, proc.stdout, proc.stderr)


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def error_lines(outcome: Outcome) -> list[str]:
    return [ln for ln in outcome.stderr.splitlines() if ln.startswith(("lmsforge: error:",
                                                                          "Error: "))]


# --- set-ups -----------------------------------------------------------------------------------


def verify(*extra: str) -> Setup:
    return lambda env: ["verify", "-f", "toy", "-t", "v1.0.0", *extra]


def verify_tag(tag: str, *extra: str) -> Setup:
    return lambda env: ["verify", "-f", "toy", "-t", tag, *extra]


def patch_file(env: Env, name: str = "0020-allocator-hook.patch") -> Path:
    return env.series / name


def then(action: Callable[[Env], object], args: Setup) -> Setup:
    def setup(env: Env) -> Sequence[str]:
        action(env)
        return args(env)
    return setup


def rewrite(name: str, change: Callable[[bytes], bytes]) -> Callable[[Env], None]:
    def action(env: Env) -> None:
        path = patch_file(env, name)
        path.write_bytes(change(path.read_bytes()))
    return action


def edit_manifest(change: Callable[[dict], object]) -> Callable[[Env], None]:
    def action(env: Env) -> None:
        path = env.series / "series.yaml"
        data = yaml.safe_load(path.read_text())
        result = change(data)
        path.write_text(yaml.safe_dump(data if result is None else result, sort_keys=False))
    return action


def recompute_ids(env: Env) -> None:
    """What a careful hand-editor does: fix patch_id and series_hash after editing a patch."""
    path = env.series / "series.yaml"
    data = yaml.safe_load(path.read_text())
    for entry in data["patches"]:
        entry["patch_id"] = series_mod.patch_id(env.series / entry["file"])
    data["series_hash"] = series_mod.series_hash([env.series / e["file"]
                                                  for e in data["patches"]])
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def edit_added_line(data: bytes) -> bytes:
    return data.replace(b"+int lms_reclaim(void);", b"+int lms_reclaim(int);", 1)


def fetched(env: Env) -> None:
    assert lmsforge(*env.base_args(), "fetch", "-f", "toy", "-t", "v1.0.0").exit_code == 0


def verified(env: Env) -> None:
    result = lmsforge(*env.base_args(), "verify", "-f", "toy", "-t", "v1.0.0")
    assert result.exit_code == 0, result.output


def make_dir(*parts: str, mode: int | None = None, files: dict[str, str] | None = None):
    def action(env: Env) -> Path:
        path = env.root.joinpath(*parts)
        path.mkdir(parents=True, exist_ok=True)
        for name, text in (files or {}).items():
            (path / name).write_text(text)
        if mode is not None:
            path.chmod(mode)
        return path
    return action


def unrelated_repo(env: Env) -> None:
    repo = make_dir("someone-else")(env)
    (repo / "thesis.tex").write_text("\\documentclass{article}\n")
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", ".")
    git(repo, "commit", "-q", "-m", "my thesis")


def apply_into(*parts: str) -> Setup:
    return lambda env: ["apply", "-f", "toy", "-t", "v1.0.0", "--into",
                        str(env.root.joinpath(*parts))]


def read_only_cache(env: Env) -> None:
    env.cache.mkdir(parents=True, exist_ok=True)
    for path in [env.cache, *env.cache.rglob("*")]:
        if not path.is_symlink():
            path.chmod(path.stat().st_mode & ~0o222)


def big_archive(env: Env, megabytes: int = 3) -> Path:
    """The toy tree plus MEGABYTES that do not compress, declared as the v1.0.0 archive."""
    top = env.root / "big" / "toy-1.0.0"
    top.mkdir(parents=True)
    git(env.upstream, "archive", "--format=tar", "-o", str(env.root / "big" / "t.tar"), "v1.0.0")
    with tarfile.open(env.root / "big" / "t.tar") as raw:
        raw.extractall(top, filter="data")
    for part in range(megabytes):  # many files: tar and git take a while over them
        (top / f"blob-{part}.bin").write_bytes(os.urandom(1 << 20))
    archive = env.root / "big" / "toy_1.0.0.orig.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(top, arcname="toy-1.0.0")
    sha = hashlib.sha256(archive.read_bytes()).hexdigest()
    upstream_yaml = env.patches / "toy" / "upstream.yaml"
    text = upstream_yaml.read_text()
    text = re.sub(r"name: \S+", f"name: {archive.name}", text, count=1)
    text = re.sub(r"sha256: \S+", f"sha256: {sha}", text, count=1)
    upstream_yaml.write_text(text)
    return archive


def absent(*parts: str) -> Callable[[Env], None]:
    def check(env: Env) -> None:
        assert not env.root.joinpath(*parts).exists(), f"{env.root.joinpath(*parts)} was left"
    return check


def series_copied_to_v2(env: Env) -> None:
    """The v1.0.0 series put in the v2.0.0 folder, where upstream changed storage.h."""
    folder = env.patches / "toy" / "v2.0.0"
    shutil.copytree(env.series, folder)
    edit_manifest(lambda d: d.update(tag="v2.0.0"))(
        Env(env.root, env.patches, folder, env.tree, env.cache, env.upstream, env.archive))


def framework_renamed(name: str) -> Callable[[Env], None]:
    """The toy framework copied to patches/NAME, declared and exported as NAME (Q07)."""
    def action(env: Env) -> None:
        folder = env.patches / name
        shutil.copytree(env.patches / "toy", folder)
        upstream_yaml = folder / "upstream.yaml"
        data = yaml.safe_load(upstream_yaml.read_text())
        upstream_yaml.write_text(yaml.safe_dump({**data, "framework": name}, sort_keys=False))
        edit_manifest(lambda d: d.update(framework=name))(
            Env(env.root, env.patches, folder / "v1.0.0", env.tree, env.cache, env.upstream,
                env.archive))
    return action


def series_folder_named(tag: str) -> Callable[[Env], None]:
    """The v1.0.0 series copied to an undeclared tag folder TAG (Q07b)."""
    def action(env: Env) -> None:
        folder = env.patches / "toy" / tag
        shutil.copytree(env.series, folder)
        edit_manifest(lambda d: d.update(tag=tag))(
            Env(env.root, env.patches, folder, env.tree, env.cache, env.upstream, env.archive))
    return action


def declared_tag(tag: str) -> Callable[[Env], None]:
    def action(env: Env) -> None:
        path = env.patches / "toy" / "upstream.yaml"
        data = yaml.safe_load(path.read_text())
        data["tags"][tag] = {}
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return action


def nothing_recorded(env: Env) -> None:
    cache_has_no_trees(env)
    assert not (env.cache / "reports").exists(), "a result was recorded"


def new_file_rewritten(*pairs: tuple[bytes, bytes]) -> Callable[[Env], None]:
    """0010's new file src/lms.c rewritten by PAIRS (old, new), with patch_id and series_hash
    recomputed, so the series is "valid" as a careful hand-editor leaves it (Q04-Q06)."""
    def action(env: Env) -> None:
        def change(data: bytes) -> bytes:
            for old, new in pairs:
                assert old in data, old
                data = data.replace(old, new)
            return data
        rewrite("0010-lms-core.patch", change)(env)
        recompute_ids(env)
    return action


def nowhere_outside(env: Env) -> None:
    """Nothing was applied: no work tree, no result, no escaped file."""
    nothing_recorded(env)
    assert not (env.root.parent / "escape.txt").exists()


def verified_by_older_lmsforge(env: Env) -> None:
    """The report an lmsforge before 0.2.0 leaves: verify.json without a series hash, and no
    by-series/ copy (E03)."""
    verified(env)
    folder = env.cache / "reports" / "toy" / "v1.0.0"
    shutil.rmtree(folder / "by-series")
    report = json.loads((folder / "verify.json").read_text())
    del report["series_hash"]
    (folder / "verify.json").write_text(json.dumps(report))


def misplaced_in_noarch(env: Env) -> None:
    """A linux-64 package copied into the channel's noarch/ by hand (K10)."""
    shutil.copy2(make_conda(env.root / "by-hand", name="stray"), channel(env) / "noarch")


def misplaced_left_unlisted(env: Env) -> None:
    noarch = channel(env) / "noarch"
    assert (noarch / "stray-1.0-h0_0.conda").is_file(), "the user's file was removed"
    for index in ("repodata.json", "current_repodata.json"):
        assert "stray-1.0-h0_0.conda" not in (noarch / index).read_text(), index


def nothing_left_in_partial(env: Env) -> None:
    partial = env.cache / "partial"
    left = sorted(p.name for p in partial.iterdir()) if partial.is_dir() else []
    assert left == [], left


def cache_has_no_trees(env: Env) -> None:
    assert not (env.cache / "trees").exists() and not (env.cache / "archives").exists()


# --- channel set-ups ---------------------------------------------------------------------------


def _tar_zst(files: dict[str, bytes]) -> bytes:
    import zstandard

    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return zstandard.ZstdCompressor(level=1).compress(raw.getvalue())


def make_conda(folder: Path, *, name: str = "hello", version: str = "1.0", build: str = "h0_0",
               subdir: str = "linux-64", payload: bytes = b"hello\n") -> Path:
    """A `.conda` file made by hand, with an info/index.json we control (what a hostile or
    careless package producer hands to `publish`)."""
    folder.mkdir(parents=True, exist_ok=True)
    index = {"name": name, "version": version, "build": build, "build_number": 0,
             "subdir": subdir, "depends": [], "license": "MIT"}
    paths = {"paths": [{"_path": "share/hello.txt", "path_type": "hardlink",
                        "sha256": hashlib.sha256(payload).hexdigest(),
                        "size_in_bytes": len(payload)}], "paths_version": 1}
    stem = f"{name}-{version}-{build}"
    path = folder / f"{stem}.conda"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("metadata.json", json.dumps({"conda_pkg_format_version": 2}))
        archive.writestr(f"pkg-{stem}.tar.zst", _tar_zst({"share/hello.txt": payload}))
        archive.writestr(f"info-{stem}.tar.zst", _tar_zst({
            "info/index.json": json.dumps(index).encode(),
            "info/about.json": json.dumps({"license": "MIT"}).encode(),
            "info/paths.json": json.dumps(paths).encode()}))
    return path


def channel(env: Env) -> Path:
    """A folder channel under the scratch folder that already holds one package."""
    folder = env.root / "ch" / "inner"
    if not folder.is_dir():
        good = make_conda(env.root / "good", name="good")
        result = lmsforge(*env.base_args(), "publish", "--channel", str(folder), str(good))
        assert result.exit_code == 0, result.output
    return folder


def publish_package(subdir: str, *, to: Callable[[Env], str] = lambda env: str(channel(env)),
                    **fields: str) -> Setup:
    def setup(env: Env) -> Sequence[str]:
        target = to(env)
        return ["publish", "--channel", target,
                str(make_conda(env.root / "pkgs", subdir=subdir, **fields))]
    return setup


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def channel_with_core(env: Env, subdir: str) -> Path:
    """A folder channel holding a CPU pytorch-lms-core 2.6.0 for SUBDIR only (made by hand)."""
    folder = env.root / f"core-{subdir}"
    package = make_conda(env.root / "core", name="pytorch-lms-core", version="2.6.0",
                         build="cpu_h0_1000", subdir=subdir)
    result = lmsforge(*env.base_args(), "publish", "--channel", str(folder), str(package))
    assert result.exit_code == 0, result.output
    return folder


def channel_unchanged(env: Env) -> Iterable[Path]:
    return [channel(env)]


class SilentServer:
    """A server on 127.0.0.1 that takes connections and never answers: its listening socket's
    backlog completes every TCP handshake and nothing reads what is sent. Closed on exit."""

    def __enter__(self) -> "SilentServer":
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()


def silent_channel_fails_in_time(command: Callable[[Env, str], list[str]],
                                 scheme: str = "http") -> Callable[[Env], None]:
    """COMMAND against a channel that never answers, with a 2 s channel timeout: one line that
    names the channel, exit 1, well before a minute."""
    def run(env: Env) -> None:
        with SilentServer() as server:
            url = f"{scheme}://127.0.0.1:{server.port}/lms"
            start = time.monotonic()
            proc = subprocess.run([sys.executable, "-m", "lmsforge", *command(env, url)],
                                  capture_output=True, text=True, timeout=90,
                                  env={**os.environ, "LMSFORGE_CHANNEL_TIMEOUT": "2"})
            took = time.monotonic() - start
        outcome = Outcome(proc.returncode, proc.stdout, proc.stderr)
        shown = f"exit {proc.returncode} after {took:.0f} s\nstderr: {proc.stderr}"
        assert proc.returncode == 1 and len(error_lines(outcome)) == 1, shown
        assert f"127.0.0.1:{server.port}" in error_lines(outcome)[0], shown
        assert "did not answer in 2 s" in error_lines(outcome)[0], shown
        assert took < 45, shown
    return run


def command_test_against(env: Env, url: str) -> list[str]:
    return ["--patches-dir", str(REPO / "patches"), "--cache-dir", str(env.cache), "test",
            "-f", "pytorch", "-t", "v2.6.0", "--channel", url]


def publish_to_silent_channel(env: Env, url: str) -> list[str]:
    return [*env.base_args(), "publish", "--channel", url,
            str(make_conda(env.root / "pkgs"))]


# --- cases that need several processes --------------------------------------------------------


def default_signals() -> None:
    """In a child before it runs lmsforge: SIGTERM and SIGHUP as a terminal gives them. Whatever
    started the test run (nohup, a CI runner) may ignore SIGHUP, and lmsforge rightly keeps an
    ignored signal ignored (S12), which a test of its SIGHUP handling must not inherit."""
    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


def lmsforge_process(env: Env, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "lmsforge", *env.base_args(), *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=default_signals)


def two_applies_into_one_folder(env: Env) -> None:
    for attempt in range(3):
        target = env.root / f"race-{attempt}"
        procs = [lmsforge_process(env, "apply", "-f", "toy", "-t", "v1.0.0", "--into",
                                  str(target)) for _ in range(2)]
        outs = [p.communicate(timeout=300) for p in procs]
        codes = sorted(p.returncode for p in procs)
        assert codes == [0, 2], outs
        loser = outs[[p.returncode for p in procs].index(2)][1]
        assert re.search(r"another lmsforge is making a work tree|already exists", loser), loser
        assert git(target, "rev-parse", "--abbrev-ref", "HEAD") == "lms/toy/v1.0.0"
        assert git(target, "status", "--porcelain") == ""


def wait_until_nobody_holds(locks: Iterable[Path], timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    for lock in locks:
        fd = os.open(lock, os.O_RDWR)
        try:
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    fcntl.flock(fd, fcntl.LOCK_UN)
                    break
                except BlockingIOError:
                    assert time.monotonic() < deadline, f"{lock.name} is still held"
                    time.sleep(0.01)
        finally:
            os.close(fd)


def killed_import_is_swept(env: Env) -> None:
    archive = big_archive(env)
    proc = lmsforge_process(env, "fetch", "-f", "toy", "-t", "v1.0.0", "--archive", str(archive))
    partial = env.cache / "partial"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if partial.is_dir() and any(p.name.startswith("import-") and p.is_dir()
                                    for p in partial.iterdir()):
            proc.send_signal(signal.SIGKILL)
            break
        time.sleep(0.005)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, "the import finished before it could be killed"
    assert any(p.name.startswith("import-") for p in partial.iterdir())  # the leftover
    # The killed fetch's tar or git holds the folder's lock until the kernel has killed it too
    # (lmsforge.children): only then is the folder a leftover that the next run may sweep.
    wait_until_nobody_holds(partial.glob("import-*.lock"))
    result = lmsforge(*env.base_args(), "fetch", "-f", "toy", "-t", "v1.0.0")
    assert result.exit_code == 0, result.output
    nothing_left_in_partial(env)


def corrupt_records_self_heal(env: Env) -> None:
    verified(env)
    identity = env.cache / "identities" / "toy" / "v1.0.0.json"
    identity.write_text("{ not json")
    report = env.cache / "reports" / "toy" / "v1.0.0" / "verify.json"
    for broken in ("[1, 2]", '{"results": [{"level": 3}]}', "\x00\xff"):
        report.write_text(broken)
        listed = lmsforge(*env.base_args(), "list", "--json")
        assert listed.exit_code == 0, listed.output
    fetched_again = lmsforge(*env.base_args(), "fetch", "-f", "toy", "-t", "v1.0.0")
    assert fetched_again.exit_code == 0 and "replacing the damaged" in fetched_again.stderr
    assert json.loads(identity.read_text())["archive"]["tag"] == "v1.0.0"


def edited_copy_does_not_change_the_pristine_result(env: Env) -> None:
    verified(env)
    copy = env.root / "patches-copy"
    shutil.copytree(env.patches, copy)
    path = copy / "toy" / "v1.0.0" / "0020-allocator-hook.patch"
    path.write_bytes(edit_added_line(path.read_bytes()))
    recompute_ids(Env(env.root, copy, copy / "toy" / "v1.0.0", env.tree, env.cache,
                      env.upstream, env.archive))
    edited = lmsforge("--patches-dir", str(copy), "--cache-dir", str(env.cache), "verify",
                      "-f", "toy", "-t", "v1.0.0")
    assert edited.exit_code == 1
    for patches, expected in ((env.patches, "pass"), (copy, "fail")):
        listed = lmsforge("--patches-dir", str(patches), "--cache-dir", str(env.cache), "list",
                          "--json")
        rows = {r["tag"]: r for r in json.loads(listed.stdout)["series"]
                if r["framework"] == "toy"}
        assert rows["v1.0.0"]["last_verify"]["apply"] == expected
    status = lmsforge(*env.base_args(), "status", "--tree", str(env.tree), "--json")
    assert json.loads(status.stdout)["last_verify"] == {"apply": "pass", "compile": "skipped",
                                                          "core-cpu": "skipped"} or \
        json.loads(status.stdout)["last_verify"]["apply"] == "pass"


DEBIAN_TOYS = {  # two tiny real Debian source packages stand in for two tags' archives
    "v1.1.0": ("sl_5.02.orig.tar.gz",
               "1e5996757f879c81f202a18ad8e982195cf51c41727d3fea4af01fdcbbb5563a",
               "sl-5.02", "sl", "5.02-1"),
    "v2.0.0": ("cowsay_3.03+dfsg2.orig.tar.gz",
               "3b89965c7d6b19f321867e59d14d4aec820d36068f56d2b1e783498beeb4183e",
               "cowsay-3.03+dfsg2", "cowsay", "3.03+dfsg2-8"),
}


def debian_sources(env: Env) -> None:
    """Declare v1.1.0 and v2.0.0 as served by Debian source packages, fetched with apt into the
    cache; apt's lists are seeded from the shared test cache when it has them (speed only)."""
    path = env.patches / "toy" / "upstream.yaml"
    data = yaml.safe_load(path.read_text())
    for tag, (name, sha, top, package, version) in DEBIAN_TOYS.items():
        data["tags"][tag]["archive"] = {"name": name, "sha256": sha, "top": top,
                                        "debian": {"package": package, "version": version}}
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    seed = real_test_cache() / "apt" / "lists"
    if seed.is_dir():
        shutil.copytree(seed, env.cache / "apt" / "lists",
                        ignore=shutil.ignore_patterns("lock", "partial"))


def apt_processes(env: Env) -> list[int]:
    """apt-get processes working on this cache's apt state."""
    found = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            words = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if words and words[0].endswith(b"apt-get") and str(env.cache).encode() in \
                b" ".join(words):
            found.append(int(proc.name))
    return found


def descendants(pid: int) -> dict[int, str]:
    """Live descendants of PID: pid -> start time (so a reused pid is not mistaken for one)."""
    table = {}
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                stat = (proc / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2:].split()
            table[int(proc.name)] = (int(fields[1]), fields[0], fields[19])
    found: dict[int, str] = {}
    parents = {pid}
    while True:
        new = {p for p, (ppid, state, _) in table.items()
               if ppid in parents and p not in parents and state not in "ZX"}
        if not new:
            return found
        found.update({p: table[p][2] for p in new})
        parents |= new


def still_running(procs: dict[int, str]) -> list[int]:
    alive = []
    for pid, started in procs.items():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if fields[19] == started and fields[0] not in "ZX":
            alive.append(pid)
    return alive


def signal_when(proc: subprocess.Popen, ready: Callable[[], bool], signum: int,
                timeout: float = 120) -> dict[int, str]:
    """Send SIGNUM to PROC once READY() holds; returns the processes it had started then."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and not ready():
        time.sleep(0.002)
    assert proc.poll() is None, f"the command ended before it could be signalled: " \
                                f"{proc.communicate()}"
    children = descendants(proc.pid)
    proc.send_signal(signum)
    return children


def ended_cleanly(proc: subprocess.Popen, signum: int, children: dict[int, str]) -> str:
    """PROC ended with 128+SIGNUM, one error line naming the signal, and no process it started
    outlives it, within a minute; returns the error line."""
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        raise AssertionError(f"still running a minute after the signal: {proc.communicate()}")
    shown = f"exit {proc.returncode}\nstdout: {out}\nstderr: {err}"
    assert proc.returncode == 128 + signum, shown
    errors = error_lines(Outcome(proc.returncode, out, err))
    assert len(errors) == 1 and signal.Signals(signum).name in errors[0], shown
    assert "Traceback" not in err, shown
    deadline = time.monotonic() + 5  # SIGKILLed children may take a moment to be reaped
    while still_running(children) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert still_running(children) == [], f"orphaned: {still_running(children)}\n{shown}"
    return errors[0]


def terminated_import(signum: int) -> Callable[[Env], None]:
    """SIGTERM/SIGHUP while `fetch` unpacks and imports an archive: its tar and git end with it,
    and its work folder is removed (S02)."""
    def run(env: Env) -> None:
        archive = big_archive(env, megabytes=40)
        proc = lmsforge_process(env, "fetch", "-f", "toy", "-t", "v1.0.0", "--archive",
                                str(archive))
        partial = env.cache / "partial"
        children = signal_when(proc, lambda: partial.is_dir() and any(
            p.name.startswith("import-") and p.is_dir() for p in partial.iterdir())
            and descendants(proc.pid) != {}, signum)
        ended_cleanly(proc, signum, children)
        nothing_left_in_partial(env)
    return run


def terminated_folder_publish(env: Env) -> None:
    """SIGTERM while a large package is staged into a folder channel: no staging folder is left
    in the channel and what was there is intact (S09)."""
    chan = channel(env)
    before = {k: v for k, v in snapshot(chan).items() if k.endswith(".conda")}
    big = make_conda(env.root / "big", name="big", payload=os.urandom(120 << 20))
    proc = lmsforge_process(env, "publish", "--channel", str(chan), str(big))
    children = signal_when(proc, lambda: any(chan.glob(".lmsforge-staging-*")), signal.SIGTERM)
    ended_cleanly(proc, signal.SIGTERM, children)
    assert sorted(p.name for p in chan.iterdir() if p.name.startswith(".lmsforge-")) == \
        [".lmsforge-publish.lock"]
    after = snapshot(chan)
    assert all(after.get(name) == data for name, data in before.items())
    for index in chan.glob("*/repodata.json"):
        json.loads(index.read_text())


def token_holding_process(args: list[str], tmp: Path, preexec: Callable[[], object],
                          **extra_env: str) -> subprocess.Popen:
    """lmsforge ARGS with a channel token set and TMPDIR=TMP, where its private auth file goes."""
    return subprocess.Popen([sys.executable, "-m", "lmsforge", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=preexec,
                            env={**os.environ, "TMPDIR": str(tmp),
                                 "LMSFORGE_CHANNEL_TOKEN": "tok-3e8a1f0c99", **extra_env})


def terminated_server_publish(signum: int, command: Callable[[Env, str], list[str]] = (
        publish_to_silent_channel)) -> Callable[[Env], None]:
    """SIGTERM/SIGHUP while publish (or test) waits on a server with a token: the private auth
    file that holds the token is removed (S11, S10)."""
    def run(env: Env) -> None:
        tmp = env.root / "tmp"
        tmp.mkdir()
        with SilentServer() as server:
            proc = token_holding_process(command(env, f"http://127.0.0.1:{server.port}/lms"),
                                         tmp, default_signals, LMSFORGE_CHANNEL_TIMEOUT="120",
                                         LMSFORGE_CHANNEL_HOST="127.0.0.1")
            children = signal_when(proc, lambda: any(tmp.glob("lmsforge-auth-*/auth.json")),
                                   signum)
            line = ended_cleanly(proc, signum, children)
        assert "tok-3e8a1f0c99" not in line
        assert list(tmp.glob("lmsforge-auth-*")) == [], "the auth file holding the token was left"
    return run


def tilde_in_environment(env: Env) -> None:
    """LMSFORGE_CACHE_DIR and LMSFORGE_PATCHES_DIR as CI YAML and systemd pass them, with a
    literal ~: the home folder, not a folder named ~ in the current one (E11)."""
    home = env.root / "home"
    shutil.copytree(env.patches, home / "my-patches")
    proc = subprocess.run([sys.executable, "-m", "lmsforge", "fetch", "-f", "toy", "-t", "v1.0.0"],
                          capture_output=True, text=True, timeout=300, cwd=env.root,
                          env={**os.environ, "HOME": str(home),
                               "LMSFORGE_CACHE_DIR": "~/tilde-cache",
                               "LMSFORGE_PATCHES_DIR": "~/my-patches"})
    assert proc.returncode == 0, proc.stderr
    assert not (env.root / "~").exists(), "a folder named ~ was made in the current folder"
    assert (home / "tilde-cache" / "archives").is_dir()


def relative_cache_in_environment(env: Env) -> None:
    """A relative LMSFORGE_CACHE_DIR is another cache in each working folder (`list` from another
    folder showed nothing): one warning line naming where it points; none for --cache-dir or an
    absolute path (finding 9)."""
    def run(cwd: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "lmsforge", "--patches-dir",
                               str(env.patches), *args, "list"], capture_output=True, text=True,
                              timeout=300, cwd=cwd, env={**os.environ, **extra})
    relative = run(env.root, LMSFORGE_CACHE_DIR="rel-cache")
    assert relative.returncode == 0, relative.stderr
    [line] = [ln for ln in relative.stderr.splitlines() if ln.strip()]
    assert line.startswith("warning: LMSFORGE_CACHE_DIR=rel-cache is relative") and \
        str(env.root / "rel-cache") in line, line
    for quiet in (run(env.root, LMSFORGE_CACHE_DIR=str(env.root / "abs-cache")),
                  run(env.root, "--cache-dir", "rel-cache")):
        assert quiet.returncode == 0 and quiet.stderr.strip() == "", quiet.stderr


def from_an_empty_folder(code: int, says: str,
                         args: Callable[[Env], list[str]]) -> Callable[[Env], None]:
    """A command run as a separate process from an empty current folder: exit CODE with SAYS in
    its one error line, and the folder still empty (K25: `file://lms-channel` named the current
    folder, and publish wrote the channel there)."""
    def run(env: Env) -> None:
        cwd = make_dir("emptycwd")(env)
        proc = subprocess.run([sys.executable, "-m", "lmsforge", *env.base_args(), *args(env)],
                              capture_output=True, text=True, timeout=300, cwd=cwd,
                              check=False)
        shown = f"exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
        assert proc.returncode == code, shown
        errors = error_lines(Outcome(proc.returncode, proc.stdout, proc.stderr))
        assert len(errors) == 1 and says in errors[0], shown
        assert sorted(p.name for p in cwd.iterdir()) == [], shown
    return run


def archive_sha(env: Env) -> str:
    return hashlib.sha256(env.archive.read_bytes()).hexdigest()


def on_a_terminal(columns: int, args: Callable[[Env], list[str]],
                  expected: Callable[[Env], list[str]]) -> Callable[[Env], None]:
    """A command on a pseudo-terminal COLUMNS wide (O01-O02): every EXPECTED line is in its
    output whole, none cut or drawn in a column of no width."""
    def run(env: Env) -> None:
        main, side = os.openpty()
        proc = subprocess.Popen([sys.executable, "-m", "lmsforge", *env.base_args(), *args(env)],
                                stdin=side, stdout=side, stderr=side, close_fds=True,
                                env={**os.environ, "COLUMNS": str(columns), "TERM": "xterm"})
        os.close(side)
        chunks = []
        while True:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # EIO: the terminal's other side closed
                break
            if not chunk:
                break
            chunks.append(chunk)
        os.close(main)
        proc.wait(timeout=300)
        text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", b"".join(chunks).decode(errors="replace"))
        lines = [line.rstrip() for line in text.replace("\r", "").splitlines()]
        assert proc.returncode == 0, text
        for line in expected(env):
            assert line in lines, f"{line!r} not in the output:\n{text}"
    return run


def stdout_that_fails(how: str, code: int, says: str | None,
                      args: Callable[[Env], list[str]]) -> Callable[[Env], None]:
    """A command whose standard output is a full device, a reader that went away, or closed
    (D07, O05, O06): one line about standard output (or, for a reader that went away, none),
    never an internal error or a message about the cache."""
    def run(env: Env) -> None:
        command = [sys.executable, "-m", "lmsforge", *env.base_args(), *args(env)]
        if how == "full":
            with open("/dev/full", "w") as full:
                proc = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True,
                                      timeout=300)
        elif how == "gone":
            reader = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                      text=True)
            reader.stdout.close()  # as `| head -0` does before the command writes
            proc = subprocess.CompletedProcess(command, reader.wait(timeout=300), "",
                                               reader.stderr.read())
            reader.stderr.close()
        else:  # closed
            proc = subprocess.run(command, stderr=subprocess.PIPE, text=True, timeout=300,
                                  preexec_fn=lambda: os.close(1))
        shown = f"exit {proc.returncode}\nstderr: {proc.stderr}"
        assert proc.returncode == code, shown
        assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, shown
        errors = error_lines(Outcome(proc.returncode, "", proc.stderr))
        if says is None:
            assert errors == [], shown
        else:
            assert len(errors) == 1 and says in errors[0], shown
    return run


def no_credentials_for_a_private_channel(command: Callable[[Env, str], list[str]]
                                         ) -> Callable[[Env], None]:
    """COMMAND against a channel that answers 401, with no credentials set at all: the line says
    none are set, not that they were refused (K19)."""
    def run(env: Env) -> None:
        from channel_server import ChannelServer

        environ = {k: v for k, v in os.environ.items()
                   if k not in ("RATTLER_AUTH_FILE", "LMSFORGE_CHANNEL_TOKEN",
                                "LMSFORGE_CHANNEL_USER", "LMSFORGE_CHANNEL_PASSWORD",
                                "LMSFORGE_CHANNEL_HOST")}
        with ChannelServer(channel(env), token="tok-9d1c2e7f44") as server:
            proc = subprocess.run([sys.executable, "-m", "lmsforge", *command(env, server.url)],
                                  capture_output=True, text=True, timeout=300, env=environ)
        shown = f"exit {proc.returncode}\nstderr: {proc.stderr}"
        errors = error_lines(Outcome(proc.returncode, proc.stdout, proc.stderr))
        assert proc.returncode == 2 and len(errors) == 1, shown
        assert "needs credentials and lmsforge has none for 127.0.0.1" in errors[0], shown
    return run


class StallingUploadServer:
    """A channel on 127.0.0.1 that serves FOLDER's index files and takes an upload (PUT) but never
    answers it; `put_seen` is set once the upload arrived. Stopped on exit."""

    def __init__(self, folder: Path) -> None:
        import threading
        from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

        self.put_seen, release = threading.Event(), threading.Event()
        self.release = release
        put_seen = self.put_seen

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:
                pass

            def do_GET(self) -> None:
                path = folder / self.path.split("?")[0].removeprefix("/lms/")
                body = path.read_bytes() if path.is_file() else None
                self.send_response(200 if body is not None else 404)
                self.send_header("Content-Length", str(len(body or b"")))
                self.end_headers()
                self.wfile.write(body or b"")

            def do_PUT(self) -> None:
                put_seen.set()
                release.wait(120)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/lms"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "StallingUploadServer":
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def nohup_outlives_its_terminal(env: Env) -> None:
    """Under nohup (SIGHUP ignored), a hang-up does not end the command (S12)."""
    tmp = env.root / "tmp"
    tmp.mkdir()
    with SilentServer() as server:
        proc = token_holding_process(
            publish_to_silent_channel(env, f"http://127.0.0.1:{server.port}/lms"), tmp,
            lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN), LMSFORGE_CHANNEL_TIMEOUT="4")
        signal_when(proc, lambda: any(tmp.glob("lmsforge-auth-*/auth.json")), signal.SIGHUP)
        out, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "did not answer in 4 s" in err, (proc.returncode, err)


def terminated_upload(env: Env) -> None:
    """SIGTERM while the upload to a server waits for its answer: the uploader process ends with
    lmsforge, and the private auth file holding the token is removed (S11c)."""
    tmp = env.root / "tmp"
    tmp.mkdir()
    with StallingUploadServer(channel(env)) as server:
        proc = subprocess.Popen(
            [sys.executable, "-m", "lmsforge", *env.base_args(), "publish", "--channel",
             server.url, str(make_conda(env.root / "pkgs"))],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=default_signals,
            env={**os.environ, "TMPDIR": str(tmp), "LMSFORGE_CHANNEL_TOKEN": "tok-3e8a1f0c99"})
        children = signal_when(proc, server.put_seen.is_set, signal.SIGTERM)
        ended_cleanly(proc, signal.SIGTERM, children)
    assert list(tmp.glob("lmsforge-auth-*")) == [], "the auth file holding the token was left"


def two_fetches_of_different_tags(env: Env) -> None:
    debian_sources(env)
    procs = [lmsforge_process(env, "fetch", "-f", "toy", "-t", tag) for tag in DEBIAN_TOYS]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    nothing_left_in_partial(env)


def killed_fetch_leaves_no_apt_behind(env: Env) -> None:
    debian_sources(env)
    proc = lmsforge_process(env, "fetch", "-f", "toy", "-t", "v1.1.0")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None and not apt_processes(env):
        time.sleep(0.01)
    assert proc.poll() is None, "the fetch finished before apt-get could be seen"
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 10
    while apt_processes(env) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert apt_processes(env) == [], "apt-get outlived the killed lmsforge"
    result = lmsforge(*env.base_args(), "fetch", "-f", "toy", "-t", "v1.1.0")
    assert result.exit_code == 0, result.output
    nothing_left_in_partial(env)


def autocrlf_clone(with_attributes: bool) -> Setup:
    """The patches committed to a repository (with or without this repository's
    .gitattributes), cloned with core.autocrlf=true, used as --patches-dir."""
    def setup(env: Env) -> Sequence[str]:
        origin = env.root / "origin"
        shutil.copytree(env.patches, origin / "patches")
        if with_attributes:
            shutil.copy(REPO / ".gitattributes", origin / ".gitattributes")
        git(origin, "init", "-q", "-b", "main")
        git(origin, "add", ".")
        git(origin, "commit", "-q", "-m", "series")
        clone = env.root / "clone"
        subprocess.run(["git", "-c", "core.autocrlf=true", "clone", "-q", "-c",
                        "core.autocrlf=true", str(origin), str(clone)], check=True)
        return ["--patches-dir", str(clone / "patches"), "verify", "-f", "toy", "-t", "v1.0.0"]
    return setup


def four_fetches_of_one_tag(env: Env) -> None:
    procs = [lmsforge_process(env, "fetch", "-f", "toy", "-t", "v1.0.0", "--json")
             for _ in range(4)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], outs
    assert len({json.loads(out)["commit"] for out, _ in outs}) == 1
    assert git(env.cache / "repos" / "toy-archive.git", "fsck", "--no-progress") == ""
    nothing_left_in_partial(env)


# --- the table ---------------------------------------------------------------------------------

CASES: list[Case] = [
    Case("A01", then(rewrite("0020-allocator-hook.patch", lambda d: d.replace(b"\n", b"\r\n")),
                     verify()), 2, "0020-allocator-hook.patch has CRLF line endings"),
    Case("A01b", then(rewrite("0020-allocator-hook.patch", lambda d: d.replace(b"\n", b"\r\n")),
                      apply_into("crlf-tree")), 2, "has CRLF line endings",
         check=absent("crlf-tree")),
    Case("A02", autocrlf_clone(with_attributes=True), 0, "apply exactly and round-trip"),
    Case("A02b", autocrlf_clone(with_attributes=False), 2, "has CRLF line endings"),
    Case("A03", then(rewrite("0020-allocator-hook.patch", lambda d: os.urandom(4096)),
                     verify()), 2, "not UTF-8"),
    Case("A04", then(rewrite("0020-allocator-hook.patch", lambda d: b""), verify()), 2,
         "does not start with a `From <commit>` line"),
    Case("A05", then(rewrite("0020-allocator-hook.patch", lambda d: d[:d.index(b"@@") + 200]),
                     verify()), 2, "is truncated or edited"),
    Case("A06", then(rewrite("0030-storage-hook.patch", lambda d: d[:d.index(b"diff --git")]),
                     verify()), 2, "no `diff --git` section: the patch changes nothing"),
    Case("A07", then(rewrite("0020-allocator-hook.patch", edit_added_line), verify()), 2,
         "patch-id differs"),
    Case("A08", then(rewrite("0020-allocator-hook.patch",
                             lambda d: d.replace(b"Reclaim in the allocator", b"Reclaim more", 1)),
                     verify()), 2,
         "0020-allocator-hook.patch: its subject is not the one exported"),
    Case("A09", then(lambda env: (rewrite("0020-allocator-hook.patch", edit_added_line)(env),
                                  recompute_ids(env)), verify()), 1,
         "re-exporting the branch changes"),
    Case("A10", then(lambda env: patch_file(env).unlink(), verify()), 2,
         "listed in series.yaml but missing"),
    Case("A10b", then(lambda env: (env.series / "0120-extra.patch").write_bytes(
        patch_file(env).read_bytes()), verify()), 2, "0120-extra.patch is in the folder but not"),
    Case("A11", then(edit_manifest(lambda d: d["patches"][1].update(id="lms-core")), verify()),
         2, "appears twice"),
    Case("A12", then(lambda env: (env.series / "series.yaml").write_text("a: [\n"), verify()),
         2, "is not valid YAML at line"),
    Case("A12b", then(lambda env: (env.series / "series.yaml").write_text("- 1\n"), verify()),
         2, "must be a mapping"),
    Case("A12c", then(lambda env: (env.series / "series.yaml").write_text(""), verify()),
         2, "must be a mapping"),
    Case("A13", then(lambda env: (env.series / "series.yaml").unlink(), verify()), 2,
         "has 3 .patch files but no series.yaml; restore it"),
    Case("A14", then(edit_manifest(lambda d: d.update(tag="v1.1.0")), verify()), 2,
         "tag `v1.1.0` but the folder is v1.0.0/"),
    Case("A14b", then(lambda env: (env.series / "series").unlink(), verify()), 2,
         "the `series` order file is missing"),
    Case("A15", then(edit_manifest(lambda d: d.update(base="1" * 40)), verify()), 2,
         "`base` 111111111111 is not the commit the patch files were exported on"),
    Case("A16", then(series_copied_to_v2,
                     lambda env: ["apply", "-f", "toy", "-t", "v2.0.0", "--into",
                                  str(env.root / "v2-tree")]), 2,
         "0030-storage-hook.patch does not apply: src/storage.h hunk 1",
         check=absent("v2-tree")),
    Case("A17", lambda env: ["verify", "-f", "caffe"], 2, "unknown framework `caffe`"),
    Case("A17b", lambda env: ["verify", "-f", "toy", "-t", "banana"], 2,
         "unknown tag `banana` for toy"),
    Case("A18", lambda env: ["apply", "-f", "toy", "-t", "v1.1.0", "--into",
                             str(env.root / "x")], 2,
         "no LMS series for v1.1.0 yet; series exist for v1.0.0",
         check=absent("x")),
    Case("A18b", lambda env: ["verify", "-f", "toy", "-t", "v9.9.9"], 2,
         "upstream.yaml does not declare v9.9.9", check=cache_has_no_trees),
    Case("A20", lambda env: ["fetch", "-f", "toy", "-t", "v1.1.0", "--archive",
                             str(env.archive)], 2, "declares no source archive",
         check=cache_has_no_trees),
    Case("A21", lambda env: ["apply", "-f", "", "-t", "v1.0.0"], 2, "must not be empty"),
    Case("A21b", lambda env: ["apply", "-f", "toy", "-t", ""], 2, "must not be empty"),
    Case("A21c", lambda env: ["apply", "-f", "toy", "-t", "v1.0.0", "--into", ""], 2,
         "must not be empty"),
    Case("A22", lambda env: ["verify", "-t", "", "-f", "toy"], 2, "must not be empty",
         check=cache_has_no_trees),
    Case("A22b", lambda env: ["verify", "-f", ""], 2, "must not be empty",
         check=cache_has_no_trees),
    Case("A22c", lambda env: ["--cache-dir", "", "list"], 2, "must not be empty"),
    Case("A22d", lambda env: ["--patches-dir", "", "list"], 2, "must not be empty"),
    Case("A24", lambda env: ["verify", "-f", "toy", "-t", "v1.0.0", "--report", ""], 2,
         "must not be empty", check=cache_has_no_trees),
    Case("A24b", lambda env: ["verify", "-f", "toy", "-t", "v1.0.0", "--report",
                              str(env.root / "missing" / "r.json")], 2,
         "does not exist; create it first", check=cache_has_no_trees),
    Case("A24c", lambda env: ["verify", "-f", "toy", "-t", "v1.0.0", "--report",
                              str(env.root)], 2, "is a directory", check=cache_has_no_trees),
    Case("A25", then(make_dir("busy", files={"notes.txt": "mine\n"}), apply_into("busy")), 2,
         "not empty and not a git work tree", unchanged=lambda env: [env.root / "busy"]),
    Case("A25b", then(lambda env: (env.root / "afile").write_text("x"), apply_into("afile")), 2,
         "is a file, not a folder"),
    Case("A26", then(unrelated_repo, apply_into("someone-else")), 2,
         "holds neither toy v1.0.0 nor an lmsforge work tree",
         unchanged=lambda env: [env.root / "someone-else"]),
    # A fresh `git init` holds nobody's work: taken (port starts its work tree this way).
    Case("A26b", then(lambda env: git(make_dir("just-init")(env), "init", "-q"),
                      apply_into("just-init")), 0, "branch lms/toy/v1.0.0"),
    Case("A27", then(make_dir("ro-empty", mode=0o555), apply_into("ro-empty")), 2,
         "is not writable by this user", how="no-caps"),
    Case("A28", then(make_dir("ro-parent", mode=0o555), apply_into("ro-parent", "new")), 2,
         "is not writable by this user", how="no-caps",
         check=absent("ro-parent", "new")),
    Case("A29", lambda env: ["verify", "-f", "toy", "-t", "../toy/v1.0.0"], 2,
         "unknown tag `../toy/v1.0.0`"),
    Case("A30", then(lambda env: (env.root / "short.tar.gz").write_bytes(
        env.archive.read_bytes()[:-100]), lambda env: [
        "fetch", "-f", "toy", "-t", "v1.0.0", "--archive", str(env.root / "short.tar.gz")]), 2,
        "pass the right file", check=cache_has_no_trees),
    Case("A31", then(lambda env: (fetched(env), (env.cache / "archives" / env.archive.name)
                                  .write_bytes(b"rot")), lambda env: [
        "fetch", "-f", "toy", "-t", "v1.0.0"]), 2, "delete it and run `lmsforge fetch` again"),
    Case("A32", then(lambda env: (fetched(env), read_only_cache(env)),
                     lambda env: ["fetch", "-f", "toy", "-t", "v1.0.0"]), 0, "(verified)",
         unchanged=lambda env: [env.cache], how="no-caps"),
    Case("A32b", then(lambda env: (fetched(env), read_only_cache(env)),
                      apply_into("from-ro-cache")), 0, "branch lms/toy/v1.0.0",
         unchanged=lambda env: [env.cache], how="no-caps"),
    Case("A32c", then(lambda env: (fetched(env), read_only_cache(env)), verify()), 2,
         "is read-only and verify keeps its work trees", unchanged=lambda env: [env.cache],
         how="no-caps"),
    Case("A32d", then(lambda env: read_only_cache(env),
                      lambda env: ["fetch", "-f", "toy", "-t", "v1.0.0"]), 2,
         "is read-only and lacks toy_v1.0.0.orig.tar.gz", how="no-caps"),
    Case("A32e", then(lambda env: (fetched(env), read_only_cache(env)),
                      lambda env: ["list"]), 0, "toy", how="no-caps"),
    Case("A33", lambda env: ["fetch", "-f", "toy", "-t", "v1.0.0", "--archive",
                             str(big_archive(env))], 1, "no space left on the device",
         how="tmpfs:5"),
    Case("A34", lambda env: ["fetch", "-f", "toy", "-t", "v1.0.0", "--archive",
                             str(big_archive(env))], 1, "no space left on the device",
         how="tmpfs:2"),
    Case("A35", lambda env: [], 0, "", run=four_fetches_of_one_tag),
    Case("A36", lambda env: [], 0, "", run=two_fetches_of_different_tags, slow=True),
    Case("A37", lambda env: [], 0, "", run=killed_import_is_swept),
    Case("A38", lambda env: [], 0, "", run=killed_fetch_leaves_no_apt_behind, slow=True),
    Case("A39", lambda env: [], 0, "", run=two_applies_into_one_folder),
    Case("A40", lambda env: [], 0, "", run=corrupt_records_self_heal),
    Case("A51", lambda env: ["status", "--tree", str(env.root)], 2,
         "is not a work tree made by `lmsforge apply`"),
    Case("A51b", lambda env: ["status", "--tree", str(env.root / "nowhere")], 2,
         "is not a work tree made by `lmsforge apply`"),
    Case("A51c", then(unrelated_repo, lambda env: ["status", "--tree",
                                                   str(env.root / "someone-else")]), 2,
         "is not a work tree made by `lmsforge apply`"),
    Case("A52", then(lambda env: (env.tree / "README").write_text("local edit\n"),
                     lambda env: ["status", "--tree", str(env.tree)]), 0, "work tree dirty"),
    Case("A53", lambda env: [], 0, "", run=edited_copy_does_not_change_the_pristine_result),
    Case("A54", then(lambda env: ((env.tree / "README").write_text("local edit\n"),
                                  (env.tree / "new.c").write_text("int x;\n")),
                     lambda env: ["export", "-f", "toy", "-t", "v1.0.0", "--tree",
                                  str(env.tree)]), 2,
         "has uncommitted changes (1 changed file, 1 untracked file)",
         unchanged=lambda env: [env.series]),
    # K07-K09: a package's own subdir must be a platform name, not a path (finding 1)
    Case("K07", publish_package("../../escaped"), 2,
         "subdir '../../escaped', which is not a platform", unchanged=channel_unchanged,
         check=lambda env: (absent("escaped")(env), absent("ch", "escaped")(env))),
    Case("K07b", publish_package("linux 64"), 2, "subdir 'linux 64', which is not a platform",
         unchanged=channel_unchanged, check=absent("ch", "inner", "linux 64")),
    Case("K07c", publish_package("/tmp"), 2, "subdir '/tmp', which is not a platform",
         unchanged=channel_unchanged),
    Case("K09", publish_package("../../escaped",
                                to=lambda env: f"http://127.0.0.1:{free_port()}/lms"), 2,
         "hello-1.0-h0_0.conda: its info/index.json names subdir '../../escaped'"),
    # K16-K17: a channel that never answers is given up after LMSFORGE_CHANNEL_TIMEOUT (finding 2)
    Case("K16", lambda env: [], 0, "", run=silent_channel_fails_in_time(command_test_against)),
    Case("K17", lambda env: [], 0, "", run=silent_channel_fails_in_time(publish_to_silent_channel)),
    Case("K17b", lambda env: [], 0, "", run=silent_channel_fails_in_time(
        publish_to_silent_channel, scheme="quetz+http")),
    Case("K17c", lambda env: ["publish", "--channel", "http://127.0.0.1:1/lms",
                              str(make_conda(env.root / "pkgs"))], 2,
         "LMSFORGE_CHANNEL_TIMEOUT='abc' is not a number of seconds",
         environ={"LMSFORGE_CHANNEL_TIMEOUT": "abc"}),
    # S02, S09, S11: SIGTERM and SIGHUP clean up like Ctrl-C (finding 3)
    Case("S02", lambda env: [], 0, "", run=terminated_import(signal.SIGTERM)),
    Case("S02b", lambda env: [], 0, "", run=terminated_import(signal.SIGHUP)),
    Case("S09", lambda env: [], 0, "", run=terminated_folder_publish),
    Case("S11", lambda env: [], 0, "", run=terminated_server_publish(signal.SIGTERM)),
    Case("S11b", lambda env: [], 0, "", run=terminated_server_publish(signal.SIGHUP)),
    Case("S11c", lambda env: [], 0, "", run=terminated_upload),
    Case("S12", lambda env: [], 0, "", run=nohup_outlives_its_terminal),
    Case("S10", lambda env: [], 0, "", run=terminated_server_publish(signal.SIGTERM,
                                                                      command_test_against)),
    Case("S09b", then(lambda env: (channel(env) / ".lmsforge-staging-killed" / "linux-64").mkdir(
        parents=True), publish_package("linux-64")), 0, "1 added",
        check=absent("ch", "inner", ".lmsforge-staging-killed")),
    # P08-P11: --into inside the cache or the series folder would be reset or deleted (finding 5)
    Case("P08", apply_into("cache-under-test", "partial", "mine"), 2, "is inside the cache",
         check=absent("cache-under-test", "partial", "mine")),
    Case("P09", then(fetched, apply_into("cache-under-test", "trees", "toy", "v1.0.0")), 2,
         "is inside the cache"),
    Case("P11", lambda env: ["apply", "-f", "toy", "-t", "v1.0.0", "--into",
                             str(env.series / "tree")], 2, "is inside the patches folder",
         unchanged=lambda env: [env.patches]),
    # K11-K12: one file name, two files (finding 6)
    Case("K11", then(lambda env: (make_conda(env.root / "c", version="3.0"),
                                  make_conda(env.root / "d", version="3.0", payload=b"other\n")),
                     lambda env: ["publish", "--channel", str(channel(env)),
                                  str(env.root / "c" / "hello-3.0-h0_0.conda"),
                                  str(env.root / "d" / "hello-3.0-h0_0.conda")]), 2,
         "two different files are named hello-3.0-h0_0.conda", unchanged=channel_unchanged),
    Case("K12", lambda env: ["publish", "--channel", str(channel(env)),
                             str(make_conda(env.root / "c")), str(env.root / "c" /
                                                                   "hello-1.0-h0_0.conda")], 0,
         "1 added, 0 unchanged"),
    # K01-K03: a damaged index in the channel (finding 7)
    *[Case(row, then(lambda env, text=text: (channel(env) / "linux-64" / "repodata.json")
                     .write_bytes(text), publish_package("linux-64")), 2,
           "linux-64/repodata.json is not a valid index", unchanged=channel_unchanged)
      for row, text in (("K01", b'{"packages": {\n'), ("K02", b"B\x8c\xa1\x00\xff" * 200),
                        ("K03", b"[1,2]"))],
    # K23: test --platform looks for that platform's package, not the host's (finding 8)
    Case("K23", lambda env: ["--patches-dir", str(REPO / "patches"), "test", "-f", "pytorch",
                             "-t", "v2.6.0", "--platform", "linux-ppc64le", "--channel",
                             str(channel_with_core(env, "linux-64"))], 2,
         "no pytorch-lms-core for v2.6.0 (version 2.6.0) in"),
    # E11: ~ in the environment's folders (finding 9)
    Case("E11", lambda env: [], 0, "", run=tilde_in_environment),
    Case("E11b", lambda env: [], 0, "", run=relative_cache_in_environment),
    # D07, O05, O06: standard output that fails (findings 13, 20)
    Case("D07", lambda env: [], 0, "", run=stdout_that_fails(
        "full", 1, "cannot write to standard output (No space left on device)",
        lambda env: ["list"])),
    Case("D07b", lambda env: [], 0, "", run=stdout_that_fails(
        "full", 1, "cannot write to standard output", lambda env: ["list", "--json"])),
    Case("D07c", lambda env: [], 0, "", run=stdout_that_fails(
        "full", 1, "cannot write to standard output", lambda env: ["--version"])),
    Case("O05", lambda env: [], 0, "", run=stdout_that_fails(
        "gone", 0, None, lambda env: ["status", "--tree", str(env.tree)])),
    Case("O06", lambda env: [], 0, "", run=stdout_that_fails(
        "closed", 2, "standard output is closed", lambda env: ["list", "--json"])),
    # P04: --into a dangling symlink (finding 23)
    Case("P04", then(lambda env: (env.root / "into-dangling").symlink_to(env.root / "missing"),
                     apply_into("into-dangling")), 2, "is a symlink to a missing folder",
         check=absent("missing")),
    # E06-E07: garbage in LMSFORGE_SIM_SEEDS / LMSFORGE_JOBS (finding 18): named, and only
    # where used
    Case("E06", verify(), 0, "apply exactly and round-trip", environ={"LMSFORGE_SIM_SEEDS": "abc"}),
    Case("E06b", verify("--level", "core-sim"), 2,
         "LMSFORGE_SIM_SEEDS='abc' is not a number of seeds", environ={"LMSFORGE_SIM_SEEDS": "abc"},
         check=cache_has_no_trees),
    Case("E07", lambda env: ["list"], 0, "toy", environ={"LMSFORGE_JOBS": "abc"}),
    # F27 (help texts): publish says where credentials go, build --platform says what it is
    Case("F27", lambda env: ["publish", "--help"], 0, "LMSFORGE_CHANNEL_TOKEN"),
    Case("F27b", lambda env: ["build", "--help"], 0, "Target platform of the packages"),
    # P06: a name longer than the file system takes (finding 16)
    Case("P06", apply_into("e" * 300), 2, "the name is too long for the file system"),
    # P07: a cache path too deep for what lmsforge puts below it (finding 16): refused before
    # anything is made (apt failed deep inside with "File name too long" and network advice)
    Case("P07", lambda env: ["--cache-dir", str(env.root / "/".join(["d" * 200] * 16)), "fetch",
                             "-f", "toy", "-t", "v1.0.0"], 2, "choose a shorter --cache-dir",
         check=absent("d" * 200)),
    # E08: a patches folder that does not exist (finding 15)
    Case("E08", lambda env: ["--patches-dir", str(env.root / "nope"), "list"], 2,
         "nope does not exist; fix --patches-dir or LMSFORGE_PATCHES_DIR"),
    Case("E08b", lambda env: ["--patches-dir", str(env.root / "nope"), "status", "--series"], 2,
         "nope does not exist; fix --patches-dir or LMSFORGE_PATCHES_DIR"),
    # K19: a private channel and no credentials at all (finding 26)
    Case("K19", lambda env: [], 0, "", run=no_credentials_for_a_private_channel(
        publish_to_silent_channel)),
    Case("K19b", lambda env: [], 0, "", run=no_credentials_for_a_private_channel(
        command_test_against)),
    # E13: an ASCII-only output encoding (finding 14)
    Case("E13", lambda env: ["list"], 0, "toy", how="process",
         environ={"PYTHONIOENCODING": "ascii"}),
    # E13b: a strict C locale (no UTF-8 coercion) and a non-ASCII path in the arguments: one
    # error line, never an internal error about surrogates (finding 14)
    Case("E13b", lambda env: ["status", "--tree", str(make_dir("tree \u2713")(env))], 2,
         "is not a work tree made by `lmsforge apply`", how="process",
         environ={"LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONCOERCECLOCALE": "0"}),
    # K25: a file:// URL with a host part names no folder; every --channel refuses it (finding 11)
    *[Case(row, lambda env: [], 0, "", run=from_an_empty_folder(
        2, "a file:// URL with a host part (lms-channel); write file:///abs/path", args))
      for row, args in (
          ("K25", lambda env: ["publish", "--channel", "file://lms-channel",
                               str(make_conda(env.root / "pkgs"))]),
          ("K25b", lambda env: ["--patches-dir", str(REPO / "patches"), "test", "-f", "pytorch",
                                "-t", "v2.6.0", "--channel", "file://lms-channel"]),
          ("K25c", lambda env: ["--patches-dir", str(REPO / "patches"), "build", "-f",
                                "pytorch", "-t", "v2.6.0", "--channel", "file://lms-channel"]))],
    Case("K25d", lambda env: ["publish", "--channel", (env.root / "ch-uri").as_uri(),
                              str(make_conda(env.root / "pkgs"))], 0, "1 added",
         check=lambda env: (env.root / "ch-uri" / "linux-64" / "hello-1.0-h0_0.conda").stat()),
    # Q07: framework and tag names that a git branch (lms/<framework>/<tag>) cannot hold are
    # refused where they are declared, before any work or recorded result (finding 17)
    Case("Q07", then(framework_renamed("t y"), lambda env: ["verify", "-f", "t y", "-t",
                                                            "v1.0.0"]), 2,
         "framework 't y' cannot be part of a git branch name (it contains ' ')",
         check=nothing_recorded),
    Case("Q07b", then(series_folder_named("v1 0"), verify_tag("v1 0")), 2,
         "tag 'v1 0' cannot be part of a git branch name", check=nothing_recorded),
    Case("Q07c", then(declared_tag("v1..0"), verify()), 2,
         "tag 'v1..0' cannot be part of a git branch name (it contains '..')",
         check=nothing_recorded),
    # Q04-Q06: a patch that writes outside the tree, or adds a symlink out of it, is refused
    # when the series is validated, before anything is applied (finding 25)
    Case("Q04", then(new_file_rewritten((b"src/lms.c", b"../../escape.txt")), verify()), 2,
         "0010-lms-core.patch: patch writes outside the tree: ../../escape.txt",
         check=nowhere_outside),
    Case("Q05", then(new_file_rewritten((b"a/src/lms.c", b"a//tmp/escape.txt"),
                                        (b"b/src/lms.c", b"b//tmp/escape.txt")), verify()), 2,
         "0010-lms-core.patch: patch writes outside the tree: /tmp/escape.txt",
         check=nowhere_outside),
    Case("Q06", then(new_file_rewritten((b"new file mode 100644", b"new file mode 120000"),
                                        (b"+int lms_reclaim(void) { return 0; }",
                                         b"+../../outside")), verify()), 2,
         "patch adds a symlink pointing outside the tree: src/lms.c -> ../../outside",
         check=nowhere_outside),
    Case("Q06b", then(new_file_rewritten((b"new file mode 100644", b"new file mode 120000"),
                                         (b"+int lms_reclaim(void) { return 0; }",
                                          b"+/etc/passwd")), verify()), 2,
         "patch adds a symlink pointing outside the tree: src/lms.c -> /etc/passwd",
         check=nowhere_outside),
    # E03: a report from an lmsforge that recorded no series hash is not "other content"
    # (finding 21)
    Case("E03", then(verified_by_older_lmsforge, lambda env: ["list"]), 0,
         "verified by an older lmsforge (no series hash recorded)",
         environ={"COLUMNS": "300"}),
    Case("E03b", then(verified_by_older_lmsforge, lambda env: ["status", "--tree",
                                                               str(env.tree)]), 0,
         "verify    verified by an older lmsforge (no series hash recorded)"),
    # K10: a package whose own subdir is not the folder it sits in stays out of that folder's
    # index, with a warning (finding 22)
    Case("K10", then(misplaced_in_noarch, publish_package("linux-64")), 0,
         "warning: noarch/stray-1.0-h0_0.conda declares subdir 'linux-64' in its "
         "info/index.json, so it was left out of noarch's index", check=misplaced_left_unlisted),
    # O01-O02: a terminal too narrow for the table gets one record per row (finding 19)
    *[Case(row, lambda env: [], 0, "", run=on_a_terminal(columns, lambda env: ["list"],
                                                         lambda env: [
        "framework: toy", "tag: v1.0.0", "series: 3 patches",
        f"sources: archive {env.archive.name} ({archive_sha(env)[:12]}…)"]))
      for row, columns in (("O01", 20), ("O02", 60))],
    Case("F14", lambda env: ["fetch", "-f", "toy", "-t", "v1.1.0", "--mirror",
                             str(env.root / "gone.git")], 1, "check the network"),
]


@pytest.fixture
def env(toy_series, tmp_path) -> Env:
    return Env(tmp_path, toy_series["patches"], toy_series["series"], toy_series["tree"],
               tmp_path / "cache-under-test", toy_series["upstream"], toy_series["archive"])


def _available(how: str) -> str | None:
    """Why this way of running cannot work here, or None."""
    if how == "no-caps" and (os.geteuid() != 0 or shutil.which("setpriv") is None):
        return "needs root and setpriv to drop capabilities"
    if how.startswith("tmpfs:"):
        probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
        if os.geteuid() != 0 or probe.returncode != 0:
            return "needs root and a mount namespace (unshare -m) for a small tmpfs"
    return None


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.slow] if c.slow else [],
                                               id=c.row) for c in CASES])
def test_hostile_input(case: Case, env: Env) -> None:
    reason = _available(case.how)
    if reason:
        pytest.skip(reason)
    if case.run is not None:
        case.run(env)
        return
    args = case.setup(env)
    before = {path: snapshot(path) for path in case.unchanged(env)}
    outcome = run_cli(env, args, case.how, case.environ)
    shown = f"exit {outcome.code}\nstdout: {outcome.stdout}\nstderr: {outcome.stderr}"
    assert "Traceback" not in outcome.stderr + outcome.stdout, shown
    assert outcome.code == case.code, shown
    if case.code == 0:
        assert case.says in outcome.stdout + outcome.stderr, shown
    elif case.code == 1 and not error_lines(outcome):
        assert case.says in outcome.stdout, shown  # a verification level failed: its table row
    else:
        errors = error_lines(outcome)
        assert len(errors) == 1, shown
        assert case.says in errors[0], shown
    for path, snap in before.items():
        after = snapshot(path)
        assert after == snap, f"{path} changed"
    if case.how.startswith("tmpfs:"):
        assert "LEFT: \n" in outcome.stdout + "\n", shown  # nothing left in partial/
    if case.check is not None:
        case.check(env)
