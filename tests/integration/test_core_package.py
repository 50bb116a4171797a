"""The real PyTorch `core` packages, through the CLI as users run it, all into one channel:

1. a build with no CUDA toolkit at all (``/usr/local/cuda`` hidden under a tmpfs in a private
   mount namespace, ``CUDA_HOME`` unset): the CPU package, with one notice;
2. the README's build command exactly as written: adds the variant of the host CUDA toolkit;
3. the linux-ppc64le cross build (Debian's cross compiler, a private ppc64el sysroot).

Then the packages are installed from the channel with py-rattler and their LMS tests run (the
ppc64le ones under qemu-user), and the CPU package goes through an authenticated HTTP channel.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lmsforge.packaging import emulation, plan as build_plan, rattler as build, recipes, toolchain
from lmsforge.channel import publisher
from lmsforge.upstream import debian
from lmsforge.commands import build as build_command
from lmsforge.errors import UsageError
from conftest import REPO_ROOT, real_test_cache
from test_channel import TOKEN, ChannelServer, write_auth_file
from test_hostile_inputs import descendants, still_running
import wheel_site

SERIES = recipes.SeriesIdentity(
    "pytorch", "v2.6.0", "a" * 64,
    {"kind": "archive", "archive": "pytorch_2.6.0+dfsg.orig.tar.xz",
     "sha256": "099a9601bc40d67656e75735c44abedb0fbe92d08817852ab7472eebb7e6ddff"})


def readme_command(program: str) -> list[str]:
    """The `lmsforge PROGRAM …` step of the README's main command, exactly as written there."""
    text = (REPO_ROOT / "README.md").read_text()
    found = re.search(rf"lmsforge {program} [^&\n`]*", text)
    assert found, f"the README has no `lmsforge {program}` command"
    return shlex.split(found.group(0).strip())


def lmsforge(args: list[str], cwd: Path, *, env: dict[str, str] | None = None,
             wrap: list[str] | None = None, site: Path | None = None) -> subprocess.CompletedProcess:
    """Run the real CLI (ARGS begins with "lmsforge") in a subprocess on the shared test cache;
    with SITE, the lmsforge installed there from its wheel (the result's `lmsforge_site` says
    so), else this checkout's."""
    command = [*(wrap or []), sys.executable, "-m", "lmsforge", *args[1:]]
    base = wheel_site.environment(site) if site else dict(os.environ)
    environment = {**base, "LMSFORGE_CACHE_DIR": str(real_test_cache()), **(env or {})}
    start = time.monotonic()
    proc = subprocess.run(command, cwd=cwd, env=environment, capture_output=True, text=True)
    proc.lmsforge_site = site
    print(f"\n$ {' '.join(args)}  [{time.monotonic() - start:.0f} s, exit {proc.returncode}]"
          f"{f'  (lmsforge installed in {site})' if site else ''}\n{proc.stdout}{proc.stderr}")
    return proc


def without_cuda() -> tuple[list[str], dict[str, str], str]:
    """How to run with no CUDA toolkit at all: a tmpfs over /usr/local/cuda in a private mount
    namespace where that works (root), else CUDA_HOME naming an empty folder."""
    env = {"CUDA_HOME": "", "CUDA_PATH": "",
           "PATH": os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                   if "cuda" not in p)}
    probe = subprocess.run(["unshare", "-m", "sh", "-c", "mount -t tmpfs tmpfs /usr/local/cuda"],
                           capture_output=True) if shutil.which("unshare") else None
    if probe is not None and probe.returncode == 0:
        wrap = ["unshare", "-m", "sh", "-c", 'mount -t tmpfs tmpfs /usr/local/cuda && exec "$@"',
                "sh"]
        return wrap, env, "/usr/local/cuda hidden by a tmpfs (unshare -m)"
    empty = Path(os.environ.get("TMPDIR", "/tmp")) / "lmsforge-no-cuda"
    empty.mkdir(exist_ok=True)
    return [], {**env, "CUDA_HOME": str(empty)}, f"CUDA_HOME={empty} (no mount namespace here)"


def run_builds(work: Path, wheel_site_dir: Path) -> dict[str, subprocess.CompletedProcess]:
    """Every build of this module, in order, into WORK/lms-channel (once per session: the
    ``core_package_builds`` fixture of conftest.py, which the quetz test reuses). The first runs
    the lmsforge installed from its wheel in WHEEL_SITE_DIR (test_wheel_install checks it)."""
    readme = readme_command("build")
    wrap, env, how = without_cuda()
    print(f"\nno CUDA toolkit: {how}")
    results = {"no-cuda": lmsforge(readme, work, env=env, wrap=wrap, site=wheel_site_dir)}
    results["readme"] = lmsforge(readme, work)
    results["ppc64le"] = lmsforge([*readme, "--platform", "linux-ppc64le"], work)
    results["again"] = lmsforge(readme, work)
    return results


@pytest.fixture(scope="module")
def work(core_package_builds: tuple[Path, dict]) -> Path:
    """The folder the README's commands run in; its lms-channel collects every build."""
    return core_package_builds[0]


@pytest.fixture(scope="module")
def builds(core_package_builds: tuple[Path, dict]) -> dict[str, subprocess.CompletedProcess]:
    return core_package_builds[1]


def _packages(work: Path, subdir: str) -> list[Path]:
    return sorted((work / "lms-channel" / subdir).glob("pytorch-lms-core-*.conda"))


def test_building_a_series_that_failed_verify_is_refused():
    with pytest.raises(UsageError, match="did not pass verify level apply"):
        build.check_verified("pytorch", "v2.6.0", "fail", "0020-hooks.patch does not apply")


def test_unsupported_variant_is_refused_before_anything_is_built(tmp_path):
    with pytest.raises(UsageError, match="CUDA 12.6 is not a valid variant"):
        recipes.render("pytorch", "v2.6.0", "core", "linux-ppc64le", tmp_path / "r",
                       series=SERIES, variants={"cuda_version": ["12.6"]})
    assert not (tmp_path / "r").exists()


def test_a_cuda_variant_the_host_cannot_build_is_refused_before_anything_starts(tmp_path):
    cuda = toolchain.host_cuda("linux-64")
    other = "12.4" if cuda is None or not cuda.matches("12.4") else "12.6"
    result = lmsforge(["lmsforge", "build", "--framework", "pytorch", "--tag", "v2.6.0",
                       "--variant", f"cuda={other}", "--channel", "ch"], tmp_path)
    assert result.returncode == 2
    [line] = [l for l in result.stderr.splitlines() if "error" in l]
    assert f"CUDA {other} variant builds with the host CUDA toolkit" in line
    assert not (tmp_path / "ch").exists()  # nothing fetched, built or published


@pytest.mark.slow
def test_with_no_cuda_toolkit_build_makes_the_cpu_package_with_one_notice(builds, work):
    result = builds["no-cuda"]
    assert result.returncode == 0, result.stderr
    [notice] = [l for l in result.stdout.splitlines() if l.startswith("notice:")]
    assert "no CUDA toolkit here" in notice and "building the CPU core package" in notice
    assert "Traceback" not in result.stdout + result.stderr
    built = [l for l in result.stdout.splitlines() if l.startswith("built ")]
    assert len(built) == 1 and "linux-64/pytorch-lms-core-2.6.0-cpu_lms_h" in built[0]


@pytest.mark.slow
def test_readme_build_command_adds_the_host_cuda_variant(builds, work):
    result = builds["readme"]
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    cuda = toolchain.host_cuda("linux-64")
    core_cudas = recipes.load_variants("pytorch", "v2.6.0").allowed("cuda_version", "linux-64",
                                                                    "core")
    expected = next((v for v in core_cudas if v != "None" and cuda and cuda.matches(v)), None)
    names = [p.name for p in _packages(work, "linux-64")]
    assert sum(n.startswith("pytorch-lms-core-2.6.0-cpu_lms_h") for n in names) == 1
    if expected is None:
        pytest.skip(f"host CUDA toolkit {cuda} is not a core variant: nothing more to build")
    tag = "cuda" + expected.replace(".", "")
    [package] = [p for p in _packages(work, "linux-64") if p.name.split("-")[-1].startswith(tag)]
    extra = build.package_identity(package)
    assert extra["cuda_version"] == expected and extra["platform"] == "linux-64"
    assert extra["toolchain"].endswith("(native)")
    contents = build.PackageContents.open(package)
    assert "lib/libc10_cuda.so" in contents.payload
    shipped = json.loads(contents.payload["share/lmsforge/pytorch-lms-core.json"])
    assert shipped["cuda_version"] == expected and shipped["series_hash"] == extra["series_hash"]
    assert any("__cuda" in dep for dep in contents.index["depends"])
    assert "already in the channel" in result.stdout  # the CPU package of the run before


def test_core_builds_compile_through_the_object_cache(builds, work):
    """build.sh compiles through lmsforge's object cache, so the c10 units verify compiled, and
    the CPU variant's c10 for a CUDA variant, are not compiled again. Its prefix map names the
    sources by role: no package carries the work folder rattler-build made (the packages built
    without the cache carried `…/rattler-out/<key>/bld/rattler-build_…/work/c10/…`)."""
    assert builds["readme"].returncode == 0 and builds["ppc64le"].returncode == 0
    packages = _packages(work, "linux-64") + _packages(work, "linux-ppc64le")
    assert len(packages) >= 2
    for package in packages:
        library = build.PackageContents.open(package).payload["lib/libc10.so"]
        assert b"/lmsforge/tree/c10/core/CPUAllocator.cpp" in library, package.name
        assert b"rattler-build_" not in library and b"/work/c10/" not in library, package.name


def _read_independently(package: Path) -> tuple[dict[str, bytes], set[str]]:
    """A package's info files (name -> bytes) and payload names, read with conda's own
    conda-package-streaming, not with lmsforge's reader."""
    from conda_package_streaming import package_streaming

    info = {}
    for tar, member in package_streaming.stream_conda_component(str(package), component="info"):
        if member.isfile():
            info[member.name] = tar.extractfile(member).read()
    payload = {member.name for _, member in
               package_streaming.stream_conda_component(str(package), component="pkg")}
    return info, payload


def test_every_package_declares_what_it_needs_and_carries_its_licences(builds, work):
    """Read with an independent tool, every core package: declares the glibc it needs and (CUDA)
    the driver; carries each library it loads that no system has (libcpuinfo; libcudart for
    CUDA) with the licence of each; names its homepage; has a test section that runs the LMS
    core tests (issue 27 item 1)."""
    assert builds["readme"].returncode == 0 and builds["ppc64le"].returncode == 0
    packages = _packages(work, "linux-64") + _packages(work, "linux-ppc64le")
    assert len(packages) >= 2
    for package in packages:
        info, payload = _read_independently(package)
        index = json.loads(info["info/index.json"])
        about = json.loads(info["info/about.json"])
        cuda = index["build"].startswith("cuda")
        depends = {d.split()[0]: d for d in index["depends"]}
        assert re.fullmatch(r"__glibc >=2\.\d+", depends.get("__glibc", "")), index["depends"]
        assert ("__cuda" in depends) == cuda, index["depends"]
        assert about.get("home", "").rstrip("/") == "https://pytorch.org", about
        licences = {Path(n).name for n in info if n.startswith("info/licenses/")}
        assert {"LICENSE", "NOTICE", "cpuinfo.txt", "fmt.txt", "googletest.txt"} <= licences, licences
        assert any(n.startswith("lib/libcpuinfo.so") for n in payload), sorted(payload)
        if cuda:
            assert "cuda-runtime.txt" in licences, licences
            assert any(n.startswith("lib/libcudart.so.") for n in payload), sorted(payload)
        else:
            assert "cuda-runtime.txt" not in licences
        tests = [v for n, v in info.items() if n.startswith("info/tests/")]
        assert any(b"lms_core_tests" in v for v in tests), sorted(info)


def test_a_build_shows_its_own_lines_as_it_runs(builds, work):
    """On a log (not a terminal), every line of rattler-build's output and the build script's
    comes out while the build runs, and lands in the build log: the README build used to say
    nothing for six minutes (issue 27 item 7, hostile-inputs row 10)."""
    result = builds["ppc64le"]  # the session's last build that compiled: the log is its own
    assert result.returncode == 0, result.stderr
    lines = result.stderr.splitlines()
    step = next(i for i, line in enumerate(lines) if "· rattler-build pytorch v2.6.0" in line)
    done = next(i for i, line in enumerate(lines) if i > step and ": done in " in line)
    shown = [line.strip() for line in lines[step + 1:done] if line.startswith("  ")]
    assert any(re.match(r"\[\d+/\d+\] Building CXX object", line) for line in shown), shown[:40]
    log = real_test_cache() / "builds" / "pytorch" / "v2.6.0" / "logs" / "rattler-build.log"
    assert any(line.strip() in log.read_text() for line in shown[-5:])


def _build_process_started(proc: subprocess.Popen) -> bool:
    """Whether PROC's build child is compiling (has a descendant of its own)."""
    for pid in descendants(proc.pid) if proc.poll() is None else {}:
        try:
            command = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if b"lmsforge.packaging.build_child" in command:
            return bool(descendants(pid))
    return False


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_during_rattler_build_ends_the_build_within_seconds(tmp_path, signum):
    """Ctrl-C (to the whole process group, as a terminal sends it) or SIGTERM while
    rattler-build compiles: the command ends within seconds with one line, leaves no process
    behind and adds nothing to the channel. It used to wait for the build's end, six minutes
    later (hostile-inputs row 4)."""
    # rattler-build skips an output already in its folder: the CPU package an earlier build of
    # this session made is put aside meanwhile, so that there is a build to interrupt.
    built = real_test_cache() / "builds" / "pytorch" / "v2.6.0" / "rattler-out"
    aside = []
    for package in built.glob("*/linux-64/pytorch-lms-core-2.6.0-cpu_lms_*.conda"):
        kept = tmp_path / "aside" / package.relative_to(built)
        kept.parent.mkdir(parents=True, exist_ok=True)
        package.rename(kept)
        aside.append((kept, package))
    try:
        _interrupt_a_build(tmp_path, signum)
    finally:
        for kept, package in aside:
            kept.replace(package)


def _interrupt_a_build(tmp_path: Path, signum: int) -> None:
    command = [sys.executable, "-m", "lmsforge", *readme_command("build")[1:]]
    command[command.index("--channel") + 1] = str(tmp_path / "ch")
    command += ["--variant", "cuda=None"]  # one variant is enough to be inside a build
    proc = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_signals_as_on_a_terminal,
                            env={**os.environ, "LMSFORGE_CACHE_DIR": str(real_test_cache())})
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None and \
            not _build_process_started(proc):
        time.sleep(0.2)
    assert proc.poll() is None, f"ended before its build started: {proc.communicate()}"
    started = descendants(proc.pid)
    signalled = time.monotonic()
    if signum == signal.SIGINT:
        os.killpg(proc.pid, signum)
    else:
        proc.send_signal(signum)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        os.killpg(proc.pid, signal.SIGKILL)
        raise AssertionError(f"still building a minute after {signum.name}: "
                             f"{proc.communicate()[1][-2000:]}") from None
    took = time.monotonic() - signalled
    assert proc.returncode == (130 if signum == signal.SIGINT else 143), err[-2000:]
    errors = [line for line in err.splitlines() if "error" in line]
    assert len(errors) == 1 and "nothing half-done was kept" in errors[0], err[-2000:]
    assert took < 30, f"{took:.0f} s after the signal"
    time.sleep(1)
    assert still_running(started) == [], f"left running: {still_running(started)}"
    assert list(tmp_path.glob("ch/**/*.conda")) == []


def _signals_as_on_a_terminal() -> None:
    """SIGINT, SIGTERM and SIGHUP at their defaults, as a shell in a terminal starts a command:
    a test run started in the background of a script inherits SIGINT ignored, and lmsforge
    rightly keeps a signal its caller ignores."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


@pytest.mark.slow
def test_packages_are_world_readable_and_one_channel_indexes_both_platforms(builds, work):
    assert builds["ppc64le"].returncode == 0, builds["ppc64le"].stderr
    channel_dir = work / "lms-channel"
    for subdir in ("linux-64", "linux-ppc64le"):
        packages = _packages(work, subdir)
        assert packages, f"nothing in {subdir}"
        listed = json.loads((channel_dir / subdir / "repodata.json").read_text())
        assert sorted(listed["packages.conda"]) == [p.name for p in packages]
        for package in packages:
            assert stat.S_IMODE(package.stat().st_mode) == 0o644, package
    assert (channel_dir / "noarch" / "repodata.json").is_file()
    assert not (channel_dir / "bld").exists() and not (channel_dir / "src_cache").exists()


@pytest.mark.slow
def test_ppc64le_package_records_platform_and_cross_toolchain(builds, work):
    result = builds["ppc64le"]
    assert "PowerPC64" in result.stdout  # the audit: every ELF file is for the target
    [package] = _packages(work, "linux-ppc64le")
    assert "-cpu_lms_h" in package.name
    extra = build.package_identity(package)
    assert extra["platform"] == "linux-ppc64le" and extra["cuda_version"] == "none (CPU)"
    assert extra["toolchain"].startswith("powerpc64le-linux-gnu-g++")
    assert extra["toolchain"].endswith("(cross from linux-64)")
    assert "ppc64el" in extra["sysroot"] and "libcpuinfo0" in extra["sysroot"]
    contents = build.PackageContents.open(package)
    assert contents.index["subdir"] == "linux-ppc64le"
    assert "lib/libcpuinfo.so.0" in contents.payload and "bin/lms_core_tests" in contents.payload


@pytest.mark.slow
def test_rebuilding_into_the_same_channel_rebuilds_nothing(builds):
    result = builds["again"]
    assert result.returncode == 0, result.stderr
    assert "already in the channel" in result.stdout
    assert not [l for l in result.stdout.splitlines() if l.startswith("built ")]


@pytest.mark.slow
def test_a_channel_package_from_another_series_is_refused_before_building(builds, work,
                                                                          tmp_path):
    rendered = recipes.render("pytorch", "v2.6.0", "core", "linux-64", tmp_path / "r",
                              series=SERIES, variants={"cuda_version": ["None"]},
                              build_facts={"glibc": toolchain.glibc_for("linux-64")})
    plan = build_plan.plan("core", "linux-64", rendered.matrix, None)
    with pytest.raises(UsageError, match="already has pytorch-lms-core-2.6.0-cpu_lms_h.*"
                                         "raise lms_build_number"):
        build_command._not_yet_in_channel(rendered, plan, work / "lms-channel", SERIES)


@pytest.mark.slow
def test_readme_test_command_passes_from_the_channel(builds, work):
    result = lmsforge(readme_command("test"), work)
    assert result.returncode == 0, result.stderr
    assert re.search(r"lms_core_tests: [1-9]\d* passed, 0 failed", result.stdout)


@pytest.fixture(scope="module")
def qemu() -> None:
    """qemu-user and the ppc64el runtime: declared inputs of the emulated tests, installed here
    (as root, with one line naming them) because `lmsforge test` never installs anything."""
    packages = emulation.TARGETS["linux-ppc64le"].debian_packages
    if os.geteuid() != 0 and debian.missing_packages(packages):
        pytest.skip(f"not root: cannot install {' '.join(packages)} for the emulated tests")
    debian.ensure_packages(packages, "the linux-ppc64le LMS tests under emulation")


@pytest.mark.slow
def test_ppc64le_package_installs_from_the_channel_and_its_lms_tests_pass_under_qemu(builds,
                                                                                     work, qemu):
    result = lmsforge([*readme_command("test"), "--platform", "linux-ppc64le"], work)
    assert result.returncode == 0, result.stderr
    assert "pytorch-lms-core=2.6.0=cpu_lms_" in result.stdout and "qemu-ppc64le" in result.stdout
    assert re.search(r"lms_core_tests: [1-9]\d* passed, 0 failed", result.stdout)
    # A channel with the POWER build only (a cluster's ppc64le channel): `test` looked for the
    # package in the host's subdir and refused it (hostile-inputs row 8).
    power_only = work / "power-only"
    published = lmsforge(["lmsforge", "publish", "--channel", str(power_only),
                          *map(str, _packages(work, "linux-ppc64le"))], work)
    assert published.returncode == 0, published.stderr
    assert not list((power_only / "linux-64").glob("*.conda"))
    alone = lmsforge(["lmsforge", "test", "--framework", "pytorch", "--tag", "v2.6.0",
                      "--channel", str(power_only), "--platform", "linux-ppc64le"], work)
    assert alone.returncode == 0, alone.stderr
    assert re.search(r"lms_core_tests: [1-9]\d* passed, 0 failed", alone.stdout)


@pytest.mark.slow
def test_ppc64le_tests_without_qemu_are_a_one_line_skip_never_a_pass(builds, work):
    venv_bin = str(Path(sys.executable).parent)
    result = lmsforge([*readme_command("test"), "--platform", "linux-ppc64le"], work,
                      env={"PATH": venv_bin})
    assert result.returncode == 1
    [line] = [l for l in result.stderr.splitlines() if l.startswith("lmsforge: error")]
    assert "skipped: linux-ppc64le LMS tests not run" in line and "qemu-user" in line
    assert "passed" not in result.stdout


@pytest.mark.slow
def test_cpu_package_through_an_authenticated_http_channel(builds, work, tmp_path, monkeypatch,
                                                           capfd):
    [package] = [p for p in _packages(work, "linux-64") if "-cpu_lms_h" in p.name]
    served = tmp_path / "served"
    with ChannelServer(served, token=TOKEN) as server:
        monkeypatch.setenv("RATTLER_AUTH_FILE", str(write_auth_file(
            tmp_path / "auth.json", server.url, {"BearerToken": TOKEN})))
        publisher.publish([package], server.url)
        tested = build.test_installed_core([server.url], tmp_path / "prefix-http", gpu=False,
                                           cache_dir=tmp_path / "cache-http")
    assert tested.mode == "cpu" and tested.package.startswith("pytorch-lms-core=2.6.0=cpu_lms_")
    [core] = tested.programs
    assert core.passed > 0 and core.failed == 0, core.failures
    assert (tested.prefix / "lib" / "libc10.so").is_file()
    out, err = capfd.readouterr()
    assert TOKEN not in out + err
