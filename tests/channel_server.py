"""A private conda channel over HTTP for the tests: the Artifactory protocol on a loopback address.

It serves the folder channel ROOT under ``/<NAME>/`` with a bearer token or basic auth (or none,
as a public mirror), and ``PUT /<NAME>/<subdir>/<file>`` adds a package with ``publisher.publish``
(lock and atomic re-index on the server side), as an Artifactory conda repository does. Every
request is appended to a JSON-lines log (method, path, status, Authorization header), so a test
can prove which credentials a server did or did not see.

With ``private_host`` it also stands in for hosts it does not own: a client sends it requests for
``http://<any host>/<NAME>/...`` as to an HTTP proxy (``HTTP_PROXY``), the log records the host
asked for and any conda token in the path (``/t/<token>/``), and only requests for PRIVATE_HOST
need credentials (a bearer token, basic auth, or ``conda_token`` in the path). So one loopback
server can play both the download host of a hosted service and a host next to it.

It runs as a process of its own: py-rattler-build's uploaders hold the GIL while they wait for
the server, so a server thread in the test process would never answer.

    python tests/channel_server.py ROOT --name lms --host 127.0.0.2 --log LOG --ready FILE
        [--token T] [--basic USER:PASSWORD] [--conda-token T] [--private-host HOST]
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import json
import re
import subprocess
import sys
import tempfile
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

REPO_ROOT = Path(__file__).resolve().parents[1]


class ChannelServer:
    """Run the server below as a subprocess: ``with ChannelServer(root, token=T) as server``.

    ``server.url`` is the channel's URL (``http://HOST:PORT/NAME``); ``server.requests`` lists
    ``(method, path, status)``; ``server.authorizations`` every Authorization header it got.
    """

    def __init__(self, root: Path, *, token: str | None = None,
                 basic: tuple[str, str] | None = None, host: str = "127.0.0.1",
                 name: str = "lms", conda_token: str | None = None,
                 private_host: str | None = None) -> None:
        self.root, self.host, self.name = root, host, name
        self.workdir = Path(tempfile.mkdtemp(prefix="lmsforge-server-"))
        self.log = self.workdir / "requests.jsonl"
        self.args = [str(root), "--name", name, "--host", host, "--log", str(self.log),
                     "--ready", str(self.workdir / "url")]
        if token:
            self.args += ["--token", token]
        if basic:
            self.args += ["--basic", ":".join(basic)]
        if conda_token:
            self.args += ["--conda-token", conda_token]
        if private_host:
            self.args += ["--private-host", private_host]
        self.process: subprocess.Popen | None = None
        self.url = ""

    def __enter__(self) -> "ChannelServer":
        self.process = subprocess.Popen([sys.executable, __file__, *self.args], cwd=REPO_ROOT)
        ready = self.workdir / "url"
        deadline = time.monotonic() + 60
        while not ready.is_file():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the test channel server did not start")
            time.sleep(0.05)
        self.url = ready.read_text().strip()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.process is not None
        self.process.terminate()
        self.process.wait(timeout=30)

    def _entries(self) -> list[dict]:
        if not self.log.is_file():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line]

    @property
    def requests(self) -> list[tuple[str, str, int]]:
        return [(e["method"], e["path"], e["status"]) for e in self._entries()]

    @property
    def authorizations(self) -> list[str]:
        return [e["authorization"] for e in self._entries() if e["authorization"]]

    @property
    def entries(self) -> list[dict]:
        """Every request: method, path, status, authorization, host, conda_token."""
        return self._entries()

    @property
    def proxy(self) -> str:
        """``http://HOST:PORT``: this server as an HTTP proxy."""
        return self.url.rsplit("/", 1)[0]

    @property
    def raw_log(self) -> str:
        return self.log.read_text() if self.log.is_file() else ""


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        body = bytearray()
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip(), 16)
            if size == 0:
                handler.rfile.readline()
                return bytes(body)
            body += handler.rfile.read(size)
            handler.rfile.readline()
    return handler.rfile.read(int(handler.headers.get("Content-Length", "0")))


def serve(root: Path, name: str, host: str, log: Path, ready: Path, accepted: set[str],
          conda_token: str | None = None, private_host: str | None = None) -> None:
    from lmsforge.channel import publisher
    from lmsforge.errors import UsageError

    prefix = f"/{name}/"

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

        def _target(self) -> tuple[str, str, str | None]:
            """(host asked for, path without any /t/<token>, that token)."""
            parts = urlsplit(self.path)
            asked = parts.hostname or (self.headers.get("Host") or "").rsplit(":", 1)[0]
            found = re.fullmatch(r"/t/([^/]+)(/.*)", parts.path)
            return (asked, found.group(2), found.group(1)) if found else (asked, parts.path,
                                                                          None)

        def _reply(self, code: int, body: bytes = b"", headers: dict | None = None) -> None:
            asked, _, token_in_path = self._target()
            with open(log, "a") as stream:
                stream.write(json.dumps({"method": self.command, "path": self.path,
                                         "status": code,
                                         "authorization": self.headers.get("Authorization"),
                                         "host": asked, "conda_token": token_in_path})
                             + "\n")
            self.send_response(code)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _authorized(self) -> bool:
            asked, _, token_in_path = self._target()
            if private_host and asked != private_host:
                return True
            if not accepted and not conda_token:
                return True
            if self.headers.get("Authorization") in accepted or \
                    (conda_token and token_in_path == conda_token):
                return True
            self._reply(401, b"unauthorized", {"WWW-Authenticate": 'Basic realm="lms"'})
            return False

        def do_GET(self) -> None:  # noqa: N802 (http.server's names)
            if not self._authorized():
                return
            path = self._target()[1]
            target = (root / path[len(prefix):]).resolve() if path.startswith(prefix) else None
            if target is None or root.resolve() not in target.parents or not target.is_file():
                self._reply(404, b"not found")
                return
            self._reply(200, target.read_bytes(), {"Content-Type": "application/octet-stream"})

        do_HEAD = do_GET

        def do_PUT(self) -> None:  # noqa: N802
            body = _read_body(self)
            if not self._authorized():
                return
            checksum = self.headers.get("X-Checksum-Sha256")
            if checksum and hashlib.sha256(body).hexdigest() != checksum:
                self._reply(400, b"checksum mismatch")
                return
            with tempfile.TemporaryDirectory() as folder:
                upload = Path(folder) / Path(self.path).name
                upload.write_bytes(body)
                try:
                    publisher.publish([upload], root)
                except UsageError as exc:
                    self._reply(409 if "different contents" in str(exc) else 400,
                                str(exc).encode())
                    return
            self._reply(201)

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: object, client_address: object) -> None:
            pass  # clients that hang up after a 401 are expected; the tests check results

    httpd = Server((host, 0), Handler)
    partial = ready.with_name(ready.name + ".partial")  # the waiting test sees all or nothing
    partial.write_text(f"http://{host}:{httpd.server_address[1]}/{name}\n")
    partial.rename(ready)
    httpd.serve_forever()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root", type=Path)
    parser.add_argument("--name", default="lms")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--log", type=Path, required=True)
    parser.add_argument("--ready", type=Path, required=True)
    parser.add_argument("--token")
    parser.add_argument("--basic")
    parser.add_argument("--conda-token")
    parser.add_argument("--private-host")
    args = parser.parse_args()
    accepted = set()
    if args.token:
        accepted.add(f"Bearer {args.token}")
    if args.basic:
        accepted.add("Basic " + base64.b64encode(args.basic.encode()).decode())
    sys.path.insert(0, str(REPO_ROOT))
    serve(args.root, args.name, args.host, args.log, args.ready, accepted, args.conda_token,
          args.private_host)


if __name__ == "__main__":
    main()
