"""A real quetz server (the mamba-org conda server) on a loopback address, for the tests.

quetz lives in a venv of its own, made once per machine from ``tests/data/quetz-requirements.txt``
(its dependencies would clash with lmsforge's) in the shared test cache. Each server is a fresh
deployment (SQLite) with one user and an API key the test chooses, added with quetz's own data
access layer; channels are made through quetz's REST API with that key, as an admin would.
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from tool_venv import cached_venv

REQUIREMENTS = Path(__file__).parent / "data" / "quetz-requirements.txt"
START_TIMEOUT_S = 180

ADD_USER = """\
import sys
from quetz.config import Config
from quetz.dao import Dao
from quetz.database import get_session
from quetz.db_models import ApiKey
config = Config(sys.argv[1])
db = get_session(config.sqlalchemy_database_url)
user = Dao(db).create_user_with_role(sys.argv[2], role="owner")
db.add(ApiKey(key=sys.argv[3], description="lmsforge tests", user=user, owner=user))
db.commit()
"""


def quetz_venv(cache: Path) -> Path:
    """The venv with quetz installed (made on first use; about 90 s, from PyPI)."""
    return cached_venv(cache, "quetz", REQUIREMENTS)


def _free_port(host: str) -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


class QuetzServer:
    """``with QuetzServer(venv, workdir, api_key) as quetz``: ``quetz.base`` is its URL."""

    def __init__(self, venv: Path, workdir: Path, api_key: str, host: str = "127.0.0.1") -> None:
        self.venv, self.workdir, self.api_key, self.host = venv, workdir, api_key, host
        self.deployment = workdir / "deployment"
        self.log = workdir / "quetz.log"
        self.port = 0
        self.process: subprocess.Popen | None = None
        self._output = None

    @property
    def base(self) -> str:
        return f"http://{self.host}:{self.port}"

    def _env(self) -> dict[str, str]:
        return {**os.environ, "QUETZ_CONFIG_FILE": str(self.deployment / "config.toml")}

    def __enter__(self) -> "QuetzServer":
        self.deployment.mkdir(parents=True)
        (self.deployment / "config.toml").write_text(
            '[github]\nclient_id = ""\nclient_secret = ""\n\n'
            f'[sqlalchemy]\ndatabase_url = "sqlite:///{self.deployment / "quetz.sqlite"}"\n\n'
            f'[session]\nsecret = "{secrets.token_hex(32)}"\nhttps_only = false\n')
        quetz = str(self.venv / "bin" / "quetz")
        with open(self.log, "w") as log:
            # quetz writes quetz.log into its working folder, which must not be the deployment
            subprocess.run([quetz, "create", str(self.deployment)], cwd=self.workdir,
                           env=self._env(), stdout=log, stderr=subprocess.STDOUT, check=True)
            subprocess.run([str(self.venv / "bin" / "python"), "-c", ADD_USER,
                            str(self.deployment / "config.toml"), "lmsforge-ci", self.api_key],
                           cwd=self.deployment, env=self._env(), stdout=log,
                           stderr=subprocess.STDOUT, check=True)
        self.port = _free_port(self.host)
        self._output = open(self.log, "a")
        self.process = subprocess.Popen(
            [quetz, "start", str(self.deployment), "--host", self.host, "--port", str(self.port)],
            cwd=self.workdir, env=self._env(), stdout=self._output, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._ready():
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"quetz did not start; see {self.log}")
            time.sleep(0.5)
        return self

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.base}/health/ready", timeout=5) as response:
                return response.status == 200
        except OSError:
            return False

    def create_channel(self, name: str, *, private: bool = True) -> None:
        request = urllib.request.Request(
            f"{self.base}/api/channels", method="POST",
            data=json.dumps({"name": name, "private": private}).encode(),
            headers={"X-API-Key": self.api_key, "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as response:
            assert response.status == 201

    def __exit__(self, *exc: object) -> None:
        assert self.process is not None
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self._output:
            self._output.close()
