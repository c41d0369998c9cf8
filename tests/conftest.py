"""Shared fixtures: a real ``redis-server`` (Debian package) on a free loopback port.

* ``redis_server`` (session): one server for the whole run, without persistence, stopped at the end.
* ``redis_url`` (function): its URL, with the database flushed before the test.
* ``redis_server_factory`` (function): more servers with their own options (persistence, a
  password), which a test may stop and restart on the same port and directory; stopped at teardown.

Without the ``redis-server`` binary these fixtures skip the test with the command that installs it,
except when the environment variable ``CI`` is set: there a missing server fails the test.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Haystack reports telemetry over the network unless told not to; tests send nothing off this machine.
os.environ.setdefault("HAYSTACK_TELEMETRY_ENABLED", "False")

_START_TIMEOUT = 10.0


def _require_redis_server() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        message = "redis-server is not installed; install it with: apt-get install redis-server"
        if os.environ.get("CI"):
            pytest.fail(f"{message} (CI is set, so the Redis tests may not be skipped)")
        pytest.skip(message)
    pytest.importorskip("redis", reason="redis-py is not installed: pip install -e '.[test]'")
    return binary


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1 with its own data directory.

    Args:
        binary: Path of ``redis-server``.
        directory: Its ``--dir`` (RDB/AOF files and the log live there).
        appendonly: Start with the append-only file on, fsynced at every write (so a restart, even
            after ``kill``, keeps every acknowledged write).
        password: ``--requirepass``, or None for no password.
        tls: Serve TLS only (``rediss://``), with a self-signed certificate made by ``openssl``.
    """

    def __init__(
        self, binary: str, directory: Path, *, appendonly: bool = False, password: str | None = None, tls: bool = False
    ) -> None:
        self.binary = binary
        self.directory = directory
        self.appendonly = appendonly
        self.password = password
        self.tls = tls
        self.port = _free_port()
        self.process: subprocess.Popen[bytes] | None = None
        if tls:
            self._make_certificate()

    @property
    def certificate(self) -> Path:
        return self.directory / "cert.pem"

    @property
    def url(self) -> str:
        """The URL to reach it (for TLS, with the self-signed certificate as the CA to trust)."""
        auth = f":{self.password}@" if self.password else ""
        if self.tls:
            return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.certificate}"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def _make_certificate(self) -> None:
        openssl = shutil.which("openssl")
        if openssl is None:
            pytest.skip("openssl is not installed (apt-get install openssl); it makes the TLS test certificate")
        self.directory.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                "-addext", "subjectAltName=IP:127.0.0.1",
                "-keyout", str(self.directory / "key.pem"), "-out", str(self.certificate),
            ],
            check=True,
            capture_output=True,
        )  # fmt: skip

    def start(self) -> None:
        """Start the server (same port and directory as before) and wait until it answers PING."""
        import redis

        if self.process is not None and self.process.poll() is None:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        port = ["--port", "0", "--tls-port", str(self.port)] if self.tls else ["--port", str(self.port)]
        args = [
            self.binary,
            *port,
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "yes" if self.appendonly else "no",
            "--dir", str(self.directory),
            "--logfile", str(self.directory / "redis.log"),
        ]  # fmt: skip
        if self.appendonly:
            args += ["--appendfsync", "always"]  # every acknowledged write survives a kill -9
        if self.password:
            args += ["--requirepass", self.password]
        if self.tls:
            args += [
                "--tls-cert-file", str(self.certificate), "--tls-key-file", str(self.directory / "key.pem"),
                "--tls-ca-cert-file", str(self.certificate), "--tls-auth-clients", "no",
            ]  # fmt: skip
        self.process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)
        deadline = time.monotonic() + _START_TIMEOUT
        try:
            while True:
                if self.process.poll() is not None:
                    err = self.process.stderr.read().decode(errors="replace") if self.process.stderr else ""
                    log = (self.directory / "redis.log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"redis-server exited with {self.process.returncode}: {err}{log}")
                try:
                    client.ping()
                    return
                except redis.exceptions.BusyLoadingError:
                    pass
                except redis.exceptions.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                time.sleep(0.02)
        finally:
            client.close()

    def stop(self, *, save: bool = False) -> None:
        """Stop the server: ``SHUTDOWN SAVE`` (write the data, for persistence tests) or ``NOSAVE``."""
        import redis

        if self.process is None or self.process.poll() is not None:
            return
        client = redis.Redis.from_url(self.url, socket_connect_timeout=1)
        try:
            client.shutdown(save=save, nosave=not save)
        except redis.exceptions.ConnectionError:
            pass  # the server closes the connection as it exits
        finally:
            client.close()
        try:
            self.process.wait(timeout=_START_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.kill()

    def kill(self) -> None:
        """Kill the process at once (SIGKILL), as a crash or a lost machine would."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def restart(self) -> None:
        self.stop(save=self.appendonly)
        self.start()


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServer]:
    """A real redis-server for the whole test session (no persistence); stopped at the end."""
    server = RedisServer(_require_redis_server(), tmp_path_factory.mktemp("redis-session"))
    server.start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """The session server's URL, with its database flushed before the test (restarted if it was down)."""
    import redis

    redis_server.start()
    client = redis.Redis.from_url(redis_server.url)
    try:
        client.flushdb()
    finally:
        client.close()
    return redis_server.url


@pytest.fixture
def redis_server_factory(tmp_path: Path) -> Iterator[Callable[..., RedisServer]]:
    """Start extra servers: ``redis_server_factory(appendonly=True, password="s3cret", tls=True)``."""
    binary = _require_redis_server()
    servers: list[RedisServer] = []

    def make(*, appendonly: bool = False, password: str | None = None, tls: bool = False) -> RedisServer:
        server = RedisServer(
            binary, tmp_path / f"redis-{len(servers)}", appendonly=appendonly, password=password, tls=tls
        )
        servers.append(server)
        server.start()
        return server

    yield make
    for server in servers:
        server.kill()


@pytest.fixture
def reference_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    """Run the test on the numpy reference path (``rag_dedup.compiled.COMPILED = False``)."""
    from rag_dedup import compiled

    monkeypatch.setattr(compiled, "COMPILED", False)
