"""Server subprocesses for benchmarks: free ports, health-check readiness, /proc readings."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

REPO_ROOT = Path(__file__).resolve().parent.parent
READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0
_CLK_TCK = os.sysconf("SC_CLK_TCK")


class ServerDied(RuntimeError):
    """A server subprocess exited while the benchmark still needed it."""


@dataclass(frozen=True)
class ServerSpec:
    """How to launch one server: a label, argv built from the listen address, extra env."""

    label: str
    argv: Callable[[str], list[str]]
    env: Mapping[str, str] = field(default_factory=dict)


def baseline_spec(label: str = "baseline") -> ServerSpec:
    return ServerSpec(
        label, lambda listen: [sys.executable, "-m", "loadtest.baseline_server", "--listen", listen]
    )


def skeleton_spec() -> ServerSpec:
    """kinference with a constant Pick and bare reports (see loadtest.skeleton_server)."""
    return ServerSpec(
        "skeleton",
        lambda listen: [sys.executable, "-m", "loadtest.skeleton_server", "--listen", listen],
    )


def kinference_spec(config: Path) -> ServerSpec:
    return ServerSpec(
        "kinference",
        lambda listen: [
            *(sys.executable, "-m", "kinference", "serve"),
            *("--listen", listen, "--config", str(config)),
        ],
        env={"KINFERENCE_METRICS_LISTEN": "127.0.0.1:0"},
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class ServerProcess:
    spec: ServerSpec
    address: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    def check_alive(self) -> None:
        if (code := self.process.poll()) is not None:
            raise ServerDied(f"{self.spec.label} exited with {code}:\n{self.log_tail()}")

    def log_tail(self, max_chars: int = 6000) -> str:
        text = self.log_path.read_text(errors="replace")
        return text[-max_chars:] if text else "(no output)"

    def status_kib(self, key: str) -> int:
        """A ``/proc/PID/status`` figure such as VmRSS or VmHWM, in KiB."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(f"{key}:"):
                return int(line.split()[1])
        raise KeyError(key)

    def cpu_seconds(self) -> float:
        """User + system CPU time consumed so far (all threads)."""
        fields = self._stat_fields()
        return (int(fields[11]) + int(fields[12])) / _CLK_TCK

    def minor_faults(self) -> int:
        """Minor page faults so far: pages the kernel mapped in on first touch."""
        return int(self._stat_fields()[7])

    def _stat_fields(self) -> list[str]:
        """``/proc/PID/stat`` from its fourth field (the state) on."""
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        return stat[stat.rindex(")") + 2 :].split()


async def wait_ready(server: ServerProcess, timeout_s: float = READY_TIMEOUT_S) -> float:
    """Poll grpc.health.v1 Check(service="") until SERVING; returns seconds waited."""
    start = time.perf_counter()
    deadline = start + timeout_s
    delay = 0.02
    async with grpc.aio.insecure_channel(server.address) as channel:
        stub = health_pb2_grpc.HealthStub(channel)
        while True:
            server.check_alive()
            with contextlib.suppress(grpc.aio.AioRpcError):
                reply = await stub.Check(health_pb2.HealthCheckRequest(service=""), timeout=1.0)
                if reply.status == health_pb2.HealthCheckResponse.SERVING:
                    return time.perf_counter() - start
            if time.perf_counter() > deadline:
                raise TimeoutError(f"{server.spec.label} not SERVING after {timeout_s:.0f}s")
            await asyncio.sleep(delay)
            delay = min(delay * 2, 0.25)


def stop(server: ServerProcess) -> None:
    """Terminate, then kill if it lingers. Idempotent."""
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


def spawn(spec: ServerSpec, log_dir: Path) -> ServerProcess:
    """Start a server on a free loopback port, its stdout and stderr going to a log file."""
    address = f"127.0.0.1:{free_port()}"
    fd, log_name = tempfile.mkstemp(prefix=f"{spec.label}-", suffix=".log", dir=log_dir)
    try:
        process = subprocess.Popen(
            spec.argv(address),
            cwd=REPO_ROOT,
            env={**os.environ, **spec.env},
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
        )
    finally:
        os.close(fd)
    return ServerProcess(spec, address, process, Path(log_name))


@contextlib.asynccontextmanager
async def running(spec: ServerSpec, log_dir: Path) -> AsyncIterator[ServerProcess]:
    """A started, SERVING server; stopped on exit, with its log printed if it died."""
    server = spawn(spec, log_dir)
    ready = False
    try:
        await wait_ready(server)
        ready = True
        yield server
    finally:
        died = server.process.poll() is not None
        stop(server)
        if died or not ready:
            state = "died" if died else "never became ready"
            print(
                f"\n--- {spec.label} {state}; its output ---\n{server.log_tail()}", file=sys.stderr
            )
