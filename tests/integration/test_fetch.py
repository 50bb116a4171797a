"""`lmsforge fetch` with real git remotes and real archives, and every bad input around them."""

from __future__ import annotations

import hashlib
import http.server
import json
import threading

from fixtures import git, lmsforge, one_line_error, snapshot, write_upstream_yaml


def fetch(toy, *args: str):
    return lmsforge("--patches-dir", str(toy["patches"]), "fetch", "-f", "toy", *args)


def test_archive_fetch_reports_verified_identity(toy, isolated_env):
    result = fetch(toy, "-t", "v1.0.0", "--json")
    assert result.exit_code == 0, result.output
    identity = json.loads(result.stdout)
    sha = hashlib.sha256(toy["archive"].read_bytes()).hexdigest()
    assert identity["kind"] == "archive" and identity["sha256"] == sha
    assert identity["lacks"] == ["vendored/ (removed by the packager)"]
    assert identity["complete"] is False
    # The imported tree is exactly the upstream tree of the tag (archives carry the same files).
    assert identity["tree"] == git(toy["upstream"], "rev-parse", "v1.0.0^{tree}")
    assert (isolated_env / "archives" / toy["archive"].name).read_bytes() == \
        toy["archive"].read_bytes()


def test_archive_import_is_reproducible_across_caches(toy, tmp_path):
    first = fetch(toy, "-t", "v1.0.0", "--json")
    second = lmsforge("--patches-dir", str(toy["patches"]), "--cache-dir", str(tmp_path / "c2"),
                      "fetch", "-f", "toy", "-t", "v1.0.0", "--json")
    assert json.loads(first.stdout)["commit"] == json.loads(second.stdout)["commit"]


def test_git_fetch_checks_the_pinned_commit(toy):
    result = fetch(toy, "-t", "v1.1.0")
    assert result.exit_code == 0, result.output
    commit = git(toy["upstream"], "rev-parse", "v1.1.0^{commit}")
    assert f"commit {commit}" in result.stdout


def test_moved_tag_is_refused_and_cache_keeps_old_commit(toy, isolated_env):
    assert fetch(toy, "-t", "v1.1.0").exit_code == 0
    repo = isolated_env / "repos" / "toy-git.git"
    before = git(repo, "rev-parse", "refs/tags/v1.1.0")
    git(toy["upstream"], "tag", "-f", "v1.1.0", "v2.0.0")  # someone moved the tag upstream
    result = fetch(toy, "-t", "v1.1.0")
    assert result.exit_code == 2
    assert "the tag moved" in one_line_error(result)
    assert git(repo, "rev-parse", "refs/tags/v1.1.0") == before


def test_unpinned_tag_is_pinned_by_its_first_fetch(toy):
    git(toy["upstream"], "tag", "v0.9.0", "v1.0.0")
    assert fetch(toy, "-t", "v0.9.0", "--source", "git").exit_code == 0
    git(toy["upstream"], "tag", "-f", "v0.9.0", "v2.0.0")
    result = fetch(toy, "-t", "v0.9.0", "--source", "git")
    assert result.exit_code == 2 and "moved" in result.stderr


def test_mirror_overrides_the_remote(toy, tmp_path):
    mirror = tmp_path / "mirror.git"
    git(tmp_path, "clone", "-q", "--mirror", str(toy["upstream"]), str(mirror))
    write_upstream_yaml(toy["patches"], toy["upstream"], url=str(tmp_path / "unreachable"))
    assert fetch(toy, "-t", "v1.1.0").exit_code == 1  # the declared remote is gone
    result = fetch(toy, "-t", "v1.1.0", "--mirror", str(mirror))
    assert result.exit_code == 0, result.output


def test_unreachable_remote_says_what_to_do(toy, tmp_path, isolated_env):
    write_upstream_yaml(toy["patches"], toy["upstream"], url=str(tmp_path / "nowhere"))
    result = fetch(toy, "-t", "v1.1.0")
    assert result.exit_code == 1  # not the user's input: the network or the remote failed
    assert "--mirror" in one_line_error(result)


def test_wrong_local_archive_is_refused_and_cache_unchanged(toy, tmp_path, isolated_env):
    bogus = tmp_path / "bogus.tar.gz"
    bogus.write_bytes(b"not the archive")
    before = snapshot(isolated_env)
    result = fetch(toy, "-t", "v1.0.0", "--archive", str(bogus))
    assert result.exit_code == 2
    assert "sha256" in result.stderr and "pass the right file" in result.stderr
    after = snapshot(isolated_env)
    assert {k: v for k, v in after.items() if not k.startswith("locks")} == \
        {k: v for k, v in before.items() if not k.startswith("locks")}


def test_right_local_archive_is_adopted(toy, tmp_path):
    copy = tmp_path / "elsewhere.tar.gz"
    copy.write_bytes(toy["archive"].read_bytes())
    result = fetch(toy, "-t", "v1.0.0", "--archive", str(copy))
    assert result.exit_code == 0, result.output
    assert "(verified)" in result.stdout


def test_cached_archive_is_rechecked_on_every_use(toy, isolated_env):
    assert fetch(toy, "-t", "v1.0.0").exit_code == 0
    cached = isolated_env / "archives" / toy["archive"].name
    cached.write_bytes(cached.read_bytes()[:-10])  # bit rot / tampering after the download
    result = fetch(toy, "-t", "v1.0.0")
    assert result.exit_code == 2 and "delete it" in result.stderr


class _TruncatingHandler(http.server.BaseHTTPRequestHandler):
    payload = b""

    def do_GET(self):  # noqa: N802 - http.server's naming
        self.send_response(200)
        self.send_header("Content-Length", str(len(self.payload)))
        self.end_headers()
        self.wfile.write(self.payload[: len(self.payload) // 2])  # then the connection drops

    def log_message(self, *args):
        pass


def test_interrupted_download_leaves_no_cache_entry(toy, isolated_env):
    _TruncatingHandler.payload = toy["archive"].read_bytes()
    server = http.server.HTTPServer(("127.0.0.1", 0), _TruncatingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yaml_path = toy["patches"] / "toy" / "upstream.yaml"
        yaml_path.write_text(yaml_path.read_text().replace(
            toy["archive"].as_uri(), f"http://127.0.0.1:{server.server_port}/toy.tar.gz"))
        result = fetch(toy, "-t", "v1.0.0")
    finally:
        server.shutdown()
    assert result.exit_code != 0
    assert not (isolated_env / "archives" / toy["archive"].name).exists()
    assert not any((isolated_env / "partial").iterdir())
    # The next attempt, from a good source, works and is verified.
    assert fetch(toy, "-t", "v1.0.0", "--archive", str(toy["archive"])).exit_code == 0


def test_concurrent_fetches_share_one_cache_entry(toy, isolated_env):
    """Separate processes (as on a shared build host) import the archive once, under the lock."""
    import os
    import subprocess
    import sys

    command = [sys.executable, "-m", "lmsforge", "--patches-dir", str(toy["patches"]), "fetch",
               "-f", "toy", "-t", "v1.0.0", "--json"]
    env = {**os.environ, "LMSFORGE_CACHE_DIR": str(isolated_env)}
    procs = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
             for _ in range(3)]
    outputs = [p.communicate() for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    commits = {json.loads(out)["commit"] for out, _ in outputs}
    assert len(commits) == 1
    repo = isolated_env / "repos" / "toy-archive.git"
    assert git(repo, "for-each-ref", "--format=%(refname)") == "refs/tags/v1.0.0"
