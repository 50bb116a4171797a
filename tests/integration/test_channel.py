"""Publishing to and installing from real channels: folder channels and authenticated HTTP
channels served on loopback addresses (``tests/channel_server.py``, the Artifactory protocol),
with packages built by rattler-build from a tiny real recipe.

``ChannelServer`` and the tiny packages are also used by ``test_core_package.py`` and the
credential and quetz tests.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import filelock
import pytest

from channel_server import ChannelServer
from lmsforge.channel import credentials, installer, publisher
from lmsforge.errors import LmsforgeError, UsageError

TOKEN = "tok-5f1e9a7c2b"  # a test credential; it must never show up in any output
USER, PASSWORD = "forge", "pw-8d3c61e0"

TINY_RECIPE = """\
schema_version: 1
package:
  name: lmsforge-tiny
  version: "{version}"
source:
  path: {src}
build:
  number: 0
  script:
    - mkdir -p $PREFIX/bin
    - cc -o $PREFIX/bin/lmsforge-tiny hello.c
about:
  license: MIT
  license_file: LICENSE
"""


def write_auth_file(path: Path, url: str, entry: dict) -> Path:
    """rattler's auth file: keys are host names without the port."""
    host = url.split("://", 1)[1].split("/", 1)[0].split(":")[0]
    path.write_text(json.dumps({host: entry}))
    path.chmod(0o600)
    return path


# --- tiny real packages -------------------------------------------------------------------------


def build_tiny(out: Path, version: str) -> Path:
    import rattler_build as rb

    src = out / f"src-{version}"
    src.mkdir(parents=True)
    (src / "hello.c").write_text(
        '#include <stdio.h>\nint main(void){puts("lmsforge-tiny %s");return 0;}\n' % version)
    (src / "LICENSE").write_text("MIT\n")
    recipe = out / f"recipe-{version}" / "recipe.yaml"
    recipe.parent.mkdir()
    recipe.write_text(TINY_RECIPE.format(version=version, src=src))
    [variant] = rb.Stage0Recipe.from_file(recipe).render()
    result = variant.run_build(output_dir=out / "build", channels=[(out / "build").as_uri()],
                               env_isolation=rb.EnvironmentIsolation.NONE)
    return Path(result.packages[0])


@pytest.fixture(scope="session")
def tiny_packages(tmp_path_factory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("tiny")
    return {v: build_tiny(out, v) for v in ("1.0.0", "1.1.0")}


@pytest.fixture
def published(tmp_path, tiny_packages) -> Path:
    chan = tmp_path / "chan"
    publisher.publish([tiny_packages["1.0.0"]], chan)
    return chan


def _repodata_names(chan: Path) -> set[str]:
    data = json.loads((chan / "linux-64" / "repodata.json").read_text())
    return set(data.get("packages.conda", {})) | set(data.get("packages", {}))


# --- folder channels ----------------------------------------------------------------------------


def test_publish_then_install_into_fresh_prefix_and_run(published, tiny_packages, tmp_path):
    first = publisher.snapshot(published)
    result = publisher.publish([tiny_packages["1.1.0"]], published)
    assert result.added == (f"linux-64/{tiny_packages['1.1.0'].name}",)
    after = publisher.snapshot(published)
    old_package = f"linux-64/{tiny_packages['1.0.0'].name}"
    assert after[old_package] == first[old_package]  # the existing package is untouched
    assert _repodata_names(published) == {tiny_packages["1.0.0"].name, tiny_packages["1.1.0"].name}
    assert not [p for p in published.iterdir() if p.name.startswith(publisher.STAGING_PREFIX)]

    installed = installer.install(["lmsforge-tiny"], [published], tmp_path / "prefix",
                                cache_dir=tmp_path / "cache")
    assert any(p.startswith("lmsforge-tiny=1.1.0=") for p in installed.packages)
    run = subprocess.run([tmp_path / "prefix" / "bin" / "lmsforge-tiny"], capture_output=True,
                         text=True, check=True)
    assert run.stdout.strip() == "lmsforge-tiny 1.1.0"


def test_republishing_identical_package_is_a_no_op(published, tiny_packages):
    before = publisher.snapshot(published)
    result = publisher.publish([tiny_packages["1.0.0"]], published)
    assert result.added == () and len(result.unchanged) == 1
    assert publisher.snapshot(published)[result.unchanged[0]] == before[result.unchanged[0]]


def test_replacing_a_package_with_different_bytes_is_refused(published, tiny_packages, tmp_path):
    before = publisher.snapshot(published)
    impostor = tmp_path / tiny_packages["1.0.0"].name
    shutil.copy(tiny_packages["1.1.0"], impostor)  # same file name, other contents
    with pytest.raises(UsageError, match="different contents"):
        publisher.publish([impostor], published)
    assert publisher.snapshot(published) == before


def test_corrupt_package_is_refused_and_channel_unchanged(published, tiny_packages, tmp_path):
    before = publisher.snapshot(published)
    corrupt = tmp_path / tiny_packages["1.1.0"].name
    data = bytearray(tiny_packages["1.1.0"].read_bytes())
    data[len(data) // 2] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    with pytest.raises(UsageError, match="corrupt package file"):
        publisher.publish([corrupt], published)
    truncated = tmp_path / "t" / tiny_packages["1.1.0"].name
    truncated.parent.mkdir()
    truncated.write_bytes(tiny_packages["1.1.0"].read_bytes()[:1000])
    with pytest.raises(UsageError, match="corrupt package file"):
        publisher.publish([truncated], published)
    assert publisher.snapshot(published) == before


def test_foreign_folder_is_refused_and_left_alone(tmp_path, tiny_packages):
    foreign = tmp_path / "photos"
    foreign.mkdir()
    (foreign / "holiday.jpg").write_bytes(b"\xff\xd8 not a channel")
    before = publisher.snapshot(foreign)
    with pytest.raises(UsageError, match="not a conda channel"):
        publisher.publish([tiny_packages["1.0.0"]], foreign)
    assert publisher.snapshot(foreign) == before
    assert sorted(p.name for p in foreign.iterdir()) == ["holiday.jpg"]


def test_channel_that_is_a_file_is_refused(tmp_path, tiny_packages):
    target = tmp_path / "chan"
    target.write_text("x")
    with pytest.raises(UsageError, match="is a file"):
        publisher.publish([tiny_packages["1.0.0"]], target)


def _publish_as_nobody(packages: list[Path], chan: Path) -> str:
    """Publish in a forked child running as an unprivileged user; return its error line.

    Forked rather than spawned: the interpreter may live where that user cannot read, so every
    module the publisher needs is imported here first.
    """
    import rattler.index  # noqa: F401
    import rattler.package  # noqa: F401

    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        status = 0
        try:
            os.setgid(65534)
            os.setuid(65534)
            publisher.publish(packages, chan)
            message = "published"
        except Exception as exc:  # noqa: BLE001 (report whatever happened to the parent)
            message, status = str(exc), 1
        os.write(write_end, message.encode())
        os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end) as stream:
        message = stream.read()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 1, message
    return message


def test_unwritable_channel_is_refused_and_unchanged(published, tiny_packages, tmp_path):
    before = publisher.snapshot(published)
    if os.geteuid() == 0:  # root writes anywhere: run the publisher as nobody instead
        public = Path(tempfile.mkdtemp(prefix="lmsforge-pkgs-"))
        try:
            shutil.copy(tiny_packages["1.1.0"], public)
            (public / tiny_packages["1.1.0"].name).chmod(0o644)
            for folder in [public, *published.parents]:
                if folder == Path("/") or folder.stat().st_mode & 0o005 == 0o005:
                    continue
                folder.chmod(folder.stat().st_mode | 0o005)
            for path in published.rglob("*"):
                path.chmod(path.stat().st_mode | 0o004 | (0o001 if path.is_dir() else 0))
            published.chmod(0o755)
            message = _publish_as_nobody([public / tiny_packages["1.1.0"].name], published)
        finally:
            shutil.rmtree(public)
    else:
        published.chmod(0o555)
        try:
            with pytest.raises(UsageError) as info:
                publisher.publish([tiny_packages["1.1.0"]], published)
            message = str(info.value)
        finally:
            published.chmod(0o755)
    assert "not writable" in message and "\n" not in message
    assert publisher.snapshot(published) == before


def test_two_publishers_at_once_both_land(published, tiny_packages, tmp_path):
    extra = build_tiny(tmp_path, "1.2.0")
    script = ("import sys; from pathlib import Path; from lmsforge.channel import publisher; "
              "publisher.publish([Path(sys.argv[2])], Path(sys.argv[1]))")
    procs = [subprocess.Popen([sys.executable, "-c", script, str(published), str(p)],
                              cwd=Path(publisher.__file__).parents[2])
             for p in (tiny_packages["1.1.0"], extra)]
    assert [p.wait(timeout=120) for p in procs] == [0, 0]
    assert _repodata_names(published) == {tiny_packages["1.0.0"].name,
                                          tiny_packages["1.1.0"].name, extra.name}
    installed = installer.install(["lmsforge-tiny==1.2.0"], [published], tmp_path / "prefix",
                                cache_dir=tmp_path / "cache")
    assert any(p.startswith("lmsforge-tiny=1.2.0=") for p in installed.packages)


def test_publisher_waiting_on_a_held_lock_gives_up_cleanly(published, tiny_packages):
    before = publisher.snapshot(published)
    with filelock.FileLock(str(published / publisher.LOCK_NAME)):
        code = ("import sys; from pathlib import Path; from lmsforge.channel import publisher\n"
                "try:\n    publisher.publish([Path(sys.argv[2])], Path(sys.argv[1]), "
                "lock_timeout_s=1)\n"
                "except Exception as exc:\n    print(exc); sys.exit(1)\n")
        proc = subprocess.run([sys.executable, "-c", code, str(published),
                               str(tiny_packages["1.1.0"])], capture_output=True, text=True,
                              cwd=Path(publisher.__file__).parents[2], timeout=60)
    assert proc.returncode == 1
    assert "another publisher holds the lock" in proc.stdout
    assert publisher.snapshot(published) == before


def test_install_from_a_folder_that_is_not_a_channel(tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(UsageError, match="not a conda channel"):
        installer.install(["lmsforge-tiny"], [tmp_path / "empty"], tmp_path / "prefix")


def test_install_refuses_a_used_prefix(published, tmp_path):
    prefix = tmp_path / "prefix"
    prefix.mkdir()
    (prefix / "keep").write_text("mine")
    with pytest.raises(UsageError, match="not empty"):
        installer.install(["lmsforge-tiny"], [published], prefix)
    assert (prefix / "keep").read_text() == "mine"


# --- HTTP channels ------------------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(autouse=True)
def no_inherited_credentials(monkeypatch):
    for name in (credentials.AUTH_FILE_ENV, credentials.ENV_TOKEN, credentials.ENV_USER,
                 credentials.ENV_PASSWORD, credentials.ENV_HOST):
        monkeypatch.delenv(name, raising=False)


def test_http_channel_with_token_from_auth_file(published, tiny_packages, tmp_path, monkeypatch,
                                                capfd):
    with ChannelServer(published, token=TOKEN) as server:
        monkeypatch.setenv("RATTLER_AUTH_FILE", str(write_auth_file(
            tmp_path / "auth.json", server.url, {"BearerToken": TOKEN})))
        result = publisher.publish([tiny_packages["1.1.0"]], server.url)
        assert result.added == (f"linux-64/{tiny_packages['1.1.0'].name}",) and result.indexed
        assert tiny_packages["1.1.0"].name in _repodata_names(published)
        again = publisher.publish([tiny_packages["1.1.0"]], server.url)
        assert again.added == () and again.unchanged == result.added
        installed = installer.install(["lmsforge-tiny==1.1.0"], [server.url], tmp_path / "prefix",
                                    cache_dir=tmp_path / "cache")
        assert any(p.startswith("lmsforge-tiny=1.1.0=") for p in installed.packages)
        assert any(code == 200 and path.endswith(".conda") for _, path, code in server.requests)
        assert sum(method == "PUT" for method, _, _ in server.requests) == 1
    run = subprocess.run([tmp_path / "prefix" / "bin" / "lmsforge-tiny"], capture_output=True,
                         text=True, check=True)
    assert run.stdout.strip() == "lmsforge-tiny 1.1.0"
    out, err = capfd.readouterr()
    assert TOKEN not in out + err + repr(result) + repr(installed)


def test_http_channel_with_basic_auth_from_environment(published, tiny_packages, tmp_path,
                                                       monkeypatch, capfd):
    monkeypatch.setenv(credentials.ENV_USER, USER)
    monkeypatch.setenv(credentials.ENV_PASSWORD, PASSWORD)
    with ChannelServer(published, basic=(USER, PASSWORD)) as server:
        publisher.publish([tiny_packages["1.1.0"]], server.url)  # publish binds env to its target
        monkeypatch.setenv(credentials.ENV_HOST, "127.0.0.1")  # reading needs the host named
        installed = installer.install(["lmsforge-tiny"], [server.url], tmp_path / "prefix",
                                    cache_dir=tmp_path / "cache")
    assert any(p.startswith("lmsforge-tiny=1.1.0=") for p in installed.packages)
    assert "RATTLER_AUTH_FILE" not in os.environ  # the private auth file was for that call only
    out, err = capfd.readouterr()
    assert PASSWORD not in out + err + repr(installed)


def test_wrong_credentials_are_a_clear_error_without_the_secret(published, tiny_packages, tmp_path,
                                                               monkeypatch, capfd):
    before = publisher.snapshot(published)
    wrong = "tok-wrong-0000"
    with ChannelServer(published, token=TOKEN) as server:
        monkeypatch.setenv("RATTLER_AUTH_FILE", str(write_auth_file(
            tmp_path / "auth.json", server.url, {"BearerToken": wrong})))
        with pytest.raises(UsageError, match="refused the credentials") as install_error:
            installer.install(["lmsforge-tiny"], [server.url], tmp_path / "prefix",
                            cache_dir=tmp_path / "cache")
        with pytest.raises(UsageError, match="refused the credentials") as publish_error:
            publisher.publish([tiny_packages["1.1.0"]], server.url)
        assert not any(method == "PUT" for method, _, _ in server.requests)
    for error in (install_error.value, publish_error.value):
        assert wrong not in str(error) and TOKEN not in str(error) and "\n" not in str(error)
    out, err = capfd.readouterr()
    assert wrong not in out + err and TOKEN not in out + err
    assert publisher.snapshot(published) == before


def test_unreachable_channel_is_a_clear_error(tiny_packages, tmp_path):
    url = f"http://127.0.0.1:{_free_port()}/chan"
    with pytest.raises(LmsforgeError, match="cannot reach channel"):
        installer.install(["lmsforge-tiny"], [url], tmp_path / "prefix", cache_dir=tmp_path / "c")
    with pytest.raises(LmsforgeError, match="cannot reach channel"):
        publisher.publish([tiny_packages["1.0.0"]], url)


def test_doctor_names_credential_sources_but_never_their_values(tmp_path, monkeypatch):
    from lmsforge.commands import doctor

    monkeypatch.setenv("RATTLER_AUTH_FILE", str(write_auth_file(
        tmp_path / "auth.json", "http://channel.example:8080", {"BearerToken": TOKEN})))
    monkeypatch.setenv(credentials.ENV_TOKEN, TOKEN)
    result = doctor.doctor(tmp_path)
    [creds] = [c for c in result.checks if c.name == "credentials"]
    assert creds.status == doctor.OK and "channel.example" in creds.detail
    assert TOKEN not in repr(result)
    assert {c.name for c in result.checks} >= {"git", "c++ compiler", "CUDA toolkit",
                                               "GPU/driver", "rattler-build", "disk"}


# --- a channel its keepers have hot-fixed -------------------------------------------------------


def test_publishing_keeps_hotfixes_and_removals_and_refreshes_other_indexes(tmp_path,
                                                                          tiny_packages):
    """Evidence row 44: a hot-fixed record and the ``removed`` list survive a publish, and the
    index files other tools write (current_repodata, .bz2, channeldata) list the new package."""
    import bz2

    import zstandard

    chan = tmp_path / "chan"
    extra = build_tiny(tmp_path, "1.2.0")
    publisher.publish([tiny_packages["1.0.0"], extra], chan)
    old, bad = tiny_packages["1.0.0"].name, extra.name
    repodata_file = chan / "linux-64" / "repodata.json"
    repodata = json.loads(repodata_file.read_text())
    repodata["packages.conda"][old]["depends"] = ["lmsforge-hotfix-only >=9"]  # the hot-fix
    hotfixed = dict(repodata["packages.conda"][old])
    del repodata["packages.conda"][bad]
    repodata["removed"] = [bad]  # 1.2.0 stays on disk, out of the index
    repodata_file.write_text(json.dumps(repodata))
    (chan / "linux-64" / "current_repodata.json").write_text(json.dumps(repodata))
    (chan / "linux-64" / "repodata.json.bz2").write_bytes(bz2.compress(b"{}"))
    (chan / "channeldata.json").write_text(json.dumps({
        "channeldata_version": 1, "subdirs": ["noarch"],
        "packages": {"lmsforge-tiny": {"subdirs": ["linux-64"], "version": "1.0.0",
                                       "summary": "kept as written"}}}))

    publisher.publish([tiny_packages["1.1.0"]], chan)

    new = tiny_packages["1.1.0"].name
    after = json.loads(repodata_file.read_text())
    assert after["packages.conda"][old] == hotfixed
    assert after["removed"] == [bad] and bad not in after["packages.conda"]
    assert (chan / "linux-64" / bad).is_file()
    assert new in after["packages.conda"]
    current = json.loads((chan / "linux-64" / "current_repodata.json").read_text())
    assert set(current["packages.conda"]) == {new} and current["removed"] == [bad]
    assert json.loads(bz2.decompress((chan / "linux-64" / "repodata.json.bz2").read_bytes())) \
        == after
    zst = (chan / "linux-64" / "repodata.json.zst").read_bytes()
    assert json.loads(zstandard.ZstdDecompressor().decompress(zst, max_output_size=1 << 24)) \
        == after
    channeldata = json.loads((chan / "channeldata.json").read_text())
    assert channeldata["packages"]["lmsforge-tiny"]["version"] == "1.1.0"
    assert channeldata["packages"]["lmsforge-tiny"]["summary"] == "kept as written"
    assert channeldata["subdirs"] == ["linux-64", "noarch"]  # kept, and the new one added

    # what a solver sees: the hot-fix holds and the removed build is gone
    latest = installer.install(["lmsforge-tiny"], [chan], tmp_path / "p1", cache_dir=tmp_path / "c")
    assert any(p.startswith("lmsforge-tiny=1.1.0=") for p in latest.packages)
    with pytest.raises(LmsforgeError, match="cannot install"):
        installer.install(["lmsforge-tiny==1.0.0"], [chan], tmp_path / "p2",
                        cache_dir=tmp_path / "c")
    with pytest.raises(LmsforgeError, match="cannot install"):
        installer.install(["lmsforge-tiny==1.2.0"], [chan], tmp_path / "p3",
                        cache_dir=tmp_path / "c")


def test_a_stale_sharded_index_is_removed_so_it_cannot_hide_new_packages(published, tmp_path,
                                                                         tiny_packages):
    shards = published / "linux-64" / "repodata_shards.msgpack.zst"
    shards.write_bytes(b"stale")
    publisher.publish([tiny_packages["1.1.0"]], published)
    assert not shards.exists()


# --- modes: a channel is served by another user ---------------------------------------------------


def test_published_files_are_world_readable_whatever_the_umask(tmp_path, tiny_packages):
    assert tiny_packages["1.0.0"].stat().st_mode & 0o777 == 0o600  # what rattler-build writes
    chan = tmp_path / "chan"
    old_umask = os.umask(0o077)
    try:
        publisher.publish([tiny_packages["1.0.0"]], chan)
    finally:
        os.umask(old_umask)
    for path in chan.rglob("*"):
        if path.name.startswith(".lmsforge-"):
            continue
        expected = publisher.CHANNEL_DIR_MODE if path.is_dir() else publisher.CHANNEL_FILE_MODE
        assert path.stat().st_mode & 0o777 == expected, path


def test_built_packages_are_made_servable(tmp_path):
    package = build_tiny(tmp_path, "2.0.0")
    assert package.stat().st_mode & 0o777 == 0o600
    publisher.make_servable([package])
    assert package.stat().st_mode & 0o777 == 0o644
    for index in package.parent.parent.glob("*/repodata.json"):
        assert index.stat().st_mode & 0o777 == 0o644


def test_a_platform_folder_owned_by_another_user_is_a_one_line_refusal(published, tiny_packages):
    """Evidence row 42: the channel root is writable, linux-64/ is not."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another user (runs as root in CI)")
    before = publisher.snapshot(published)
    public = Path(tempfile.mkdtemp(prefix="lmsforge-pkgs-"))
    try:
        shutil.copy(tiny_packages["1.1.0"], public)
        (public / tiny_packages["1.1.0"].name).chmod(0o644)
        for folder in [public, *published.parents]:
            if folder != Path("/") and folder.stat().st_mode & 0o005 != 0o005:
                folder.chmod(folder.stat().st_mode | 0o005)
        for path in published.rglob("*"):
            path.chmod(path.stat().st_mode | 0o004 | (0o001 if path.is_dir() else 0))
        published.chmod(0o777)  # anyone may write the root; linux-64/ stays root's 0755
        message = _publish_as_nobody([public / tiny_packages["1.1.0"].name], published)
    finally:
        shutil.rmtree(public)
        published.chmod(0o755)
    assert "linux-64/ is not writable" in message and "\n" not in message
    assert publisher.snapshot(published) == before


def test_a_lock_file_of_another_user_is_a_one_line_refusal(published, tiny_packages):
    """The lock file the first publisher made (as root here) must not crash the next one."""
    if os.geteuid() != 0:
        pytest.skip("needs root to act as another user (runs as root in CI)")
    before = publisher.snapshot(published)
    public = Path(tempfile.mkdtemp(prefix="lmsforge-pkgs-"))
    try:
        shutil.copy(tiny_packages["1.1.0"], public)
        (public / tiny_packages["1.1.0"].name).chmod(0o644)
        for folder in [public, *published.parents]:
            if folder != Path("/") and folder.stat().st_mode & 0o005 != 0o005:
                folder.chmod(folder.stat().st_mode | 0o005)
        for path in published.rglob("*"):
            path.chmod(0o777 if path.is_dir() else 0o666)
        published.chmod(0o777)
        (published / publisher.LOCK_NAME).chmod(0o644)  # as an older lmsforge left it
        message = _publish_as_nobody([public / tiny_packages["1.1.0"].name], published)
    finally:
        shutil.rmtree(public)
        published.chmod(0o755)
    assert "lock file" in message and "belongs to another user" in message
    assert "\n" not in message and publisher.snapshot(published) == before



# --- every index file and every compressed copy of it says the same -----------------------------

GPU_TINY_RECIPE = """\
schema_version: 1
package:
  name: lmsforge-gpu-tiny
  version: "1.0.0"
build:
  number: {number}
  string: {string}
  script:
    - mkdir -p $PREFIX/share/lmsforge-gpu-tiny
    - echo {string} > $PREFIX/share/lmsforge-gpu-tiny/flavour
requirements:
  run: {run}
about:
  license: MIT
"""


def build_gpu_tiny(out: Path, string: str, number: int, run: list[str]) -> Path:
    """One package, two builds: ``cpu_0`` and ``cuda130_200`` (needs ``__cuda``), as the core
    builds are (build number +200 for CUDA, so a GPU host prefers it)."""
    import rattler_build as rb

    recipe = out / f"recipe-{string}" / "recipe.yaml"
    recipe.parent.mkdir(parents=True)
    recipe.write_text(GPU_TINY_RECIPE.format(string=string, number=number, run=json.dumps(run)))
    [variant] = rb.Stage0Recipe.from_file(recipe).render()
    result = variant.run_build(output_dir=out / "build", channels=[(out / "build").as_uri()],
                               env_isolation=rb.EnvironmentIsolation.NONE)
    return Path(result.packages[0])


def _decoded_siblings(subdir: Path) -> dict[str, tuple[bytes, bytes]]:
    """Every compressed copy of an index file in SUBDIR -> (its decompressed bytes, the source's
    bytes), read with the reference decoders, not lmsforge's code. Unknown kinds fail."""
    import bz2

    import zstandard

    pairs = {}
    for sibling in sorted(subdir.iterdir()):
        source, dot, suffix = sibling.name.rpartition(".")
        if not source.endswith(".json") or not dot or suffix == "bak":
            continue
        if suffix == "zst":
            with zstandard.ZstdDecompressor().stream_reader(sibling.open("rb")) as reader:
                data = reader.read()
        elif suffix == "bz2":
            data = bz2.decompress(sibling.read_bytes())
        else:
            raise AssertionError(f"{sibling.name}: a copy of {source} that no reader here "
                                 "can check was left in the channel")
        pairs[sibling.name] = (data, (subdir / source).read_bytes()
                               if (subdir / source).is_file() else b"<no source>")
    return pairs


def test_every_compressed_index_matches_its_source_after_publish(tmp_path):
    """Issue 27 item 2 (ecosystem review §1.4): a channel another tool indexed (conda-index with
    --current-repodata --zst --bz2) holds the CPU build; ``publish`` adds the CUDA build. Every
    compressed copy of every index file must decode to its source, so conda (which reads
    ``current_repodata.json.zst`` first) sees the CUDA build; copies in a format lmsforge does
    not write must be gone; ``current_repodata.json`` is always written."""
    import bz2
    import gzip

    import zstandard

    cpu = build_gpu_tiny(tmp_path / "pkgs", "cpu_0", 0, [])
    cuda = build_gpu_tiny(tmp_path / "pkgs", "cuda130_200", 200, ["__cuda >=13.0"])
    chan = tmp_path / "chan"
    publisher.publish([cpu], chan)
    subdirs = sorted(p for p in chan.iterdir() if p.is_dir() and not p.name.startswith("."))
    for subdir in subdirs:  # a fresh channel gets current_repodata.json too
        assert (subdir / "current_repodata.json").is_file(), subdir.name

    # what the other tool (or an older lmsforge) left: every index and copy lists the CPU build
    platform = chan / cpu.parent.name
    repodata = (platform / "repodata.json").read_bytes()
    for name in ("current_repodata.json", "repodata_from_packages.json"):
        (platform / name).write_bytes(repodata)
    for name in ("repodata.json", "current_repodata.json", "repodata_from_packages.json"):
        (platform / f"{name}.zst").write_bytes(zstandard.ZstdCompressor().compress(repodata))
        (platform / f"{name}.bz2").write_bytes(bz2.compress(repodata))
    (platform / "current_repodata.json.gz").write_bytes(gzip.compress(repodata))
    (platform / "repodata.json.bak").write_bytes(repodata)  # a keeper's backup: not an index
    noarch = (chan / "noarch" / "repodata.json").read_bytes()  # a copy, but no source file
    (chan / "noarch" / "current_repodata.json.zst").write_bytes(
        zstandard.ZstdCompressor().compress(noarch))
    (chan / "noarch" / "current_repodata.json").unlink()

    publisher.publish([cuda], chan)

    checked = set()
    for subdir in subdirs:
        assert (subdir / "current_repodata.json").is_file(), subdir.name
        for name, (data, source) in _decoded_siblings(subdir).items():
            assert data == source, f"{subdir.name}/{name} differs from its source"
            checked.add(f"{subdir.name}/{name}")
        for index in subdir.glob("*.json"):
            if "repodata" in index.name and subdir == platform:
                listed = json.loads(index.read_text())["packages.conda"]
                assert cuda.name in listed, f"{index.name} does not list the CUDA build"
    assert checked >= {f"{platform.name}/{n}{s}" for n in ("repodata.json",
                                                           "current_repodata.json",
                                                           "repodata_from_packages.json")
                       for s in (".zst", ".bz2")} | {"noarch/current_repodata.json.zst"}
    assert not (platform / "current_repodata.json.gz").exists()
    assert (platform / "repodata.json.bak").read_bytes() == repodata  # nothing of theirs lost
    # what conda's first read finds on a GPU host: the CUDA build, newest of its version
    with zstandard.ZstdDecompressor().stream_reader(
            (platform / "current_repodata.json.zst").open("rb")) as reader:
        first_read = json.loads(reader.read())
    assert {r["build"] for r in first_read["packages.conda"].values()} == {"cpu_0",
                                                                          "cuda130_200"}
