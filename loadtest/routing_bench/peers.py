"""Peer routers as subprocesses: sglang-router and vllm-router, cache_aware, on loopback.

Each is launched with the engines' URLs and polled until it answers 2xx on its health route
and a first chat completion goes through (it registers a worker only once the worker's
`/health` answers, so "listening" is not "ready"). They run with every proxy pointed at a
closed loopback port and no tokenizer named, so nothing is ever fetched from the network.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from loadtest.servers import free_port

READY_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 3.0  # a router holds nothing worth a long drain
# Loopback only: a proxy that refuses everything, and loopback exempt from it.
OFFLINE_ENV = {
    "HTTP_PROXY": "http://127.0.0.1:9",
    "HTTPS_PROXY": "http://127.0.0.1:9",
    "http_proxy": "http://127.0.0.1:9",
    "https_proxy": "http://127.0.0.1:9",
    # All of loopback: Dynamo's mockers sit on 127.0.13.N (their own addresses, as pods).
    "NO_PROXY": "127.0.0.1,localhost,127.0.0.0/8",
    "no_proxy": "127.0.0.1,localhost,127.0.0.0/8",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


@dataclass(frozen=True)
class Peer:
    """A router under test: its console script and the arguments after the worker URLs."""

    name: str
    script: str  # console script installed by its wheel
    prefix: tuple[str, ...]  # arguments before the common ones (a subcommand)
    extra: tuple[str, ...]  # policy and tuning; the defaults of each project otherwise

    def binary(self) -> str | None:
        """Path of the console script in this interpreter's environment, else on PATH."""
        beside = Path(sys.executable).with_name(self.script)
        return str(beside) if beside.exists() else shutil.which(self.script)

    def argv(self, urls: list[str], port: int) -> list[str]:
        binary = self.binary()
        if binary is None:
            raise FileNotFoundError(f"{self.script} is not installed (pip install '.[bench]')")
        common = (
            *("--worker-urls", *urls, "--host", "127.0.0.1", "--port", str(port)),
            # Its own metrics listener (default 29000) on a free port: runs never collide.
            *("--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port())),
        )
        return [binary, *self.prefix, *common, *self.extra]


SGLANG = Peer(
    "sglang-router cache_aware",
    "sglang-router",
    ("launch",),
    # Check the workers every second at start (default 30 s) so startup is quick.
    ("--policy", "cache_aware", "--worker-startup-check-interval", "1", "--log-level", "warn"),
)
VLLM = Peer(
    "vllm-router cache_aware",
    "vllm-router",
    (),
    ("--policy", "cache_aware", "--worker-startup-check-interval", "1", "--log-level", "warning"),
)
PEERS = {"sglang": SGLANG, "vllm": VLLM}


def installed(peer: Peer) -> bool:
    return peer.binary() is not None


@dataclass
class PeerProcess:
    peer: Peer
    url: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, max_chars: int = 4000) -> str:
        text = self.log_path.read_text(errors="replace")
        return text[-max_chars:] if text else "(no output)"

    def check_alive(self) -> None:
        if (code := self.process.poll()) is not None:
            raise RuntimeError(f"{self.peer.name} exited with {code}:\n{self.log_tail()}")


def spawn_peer(peer: Peer, urls: list[str], log_dir: Path) -> PeerProcess:
    port = free_port()
    fd, log_name = tempfile.mkstemp(prefix=f"{peer.script}-", suffix=".log", dir=log_dir)
    try:
        process = subprocess.Popen(
            peer.argv(urls, port),
            env={**os.environ, **OFFLINE_ENV},
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=subprocess.STDOUT,
        )
    finally:
        os.close(fd)
    return PeerProcess(peer, f"http://127.0.0.1:{port}", process, Path(log_name))


async def wait_peer_ready(
    server: PeerProcess, probe: bytes, timeout_s: float = READY_TIMEOUT_S
) -> float:
    """Poll until a chat completion (`probe`, a small request body) comes back 200."""
    started = time.perf_counter()
    delay = 0.05
    async with httpx.AsyncClient(trust_env=False, timeout=5.0) as http:
        while True:
            server.check_alive()
            with contextlib.suppress(httpx.HTTPError):
                reply = await http.post(
                    f"{server.url}/v1/chat/completions",
                    content=probe,
                    headers={"content-type": "application/json"},
                )
                if reply.status_code == 200:
                    return time.perf_counter() - started
            if time.perf_counter() - started > timeout_s:
                raise TimeoutError(f"{server.peer.name} not ready after {timeout_s:.0f} s")
            await asyncio.sleep(delay)  # polling for readiness, bounded by the deadline
            delay = min(delay * 2, 0.5)


def stop_peer(server: PeerProcess) -> None:
    if server.process.poll() is None:
        server.process.terminate()
        try:
            server.process.wait(STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            server.process.kill()
            server.process.wait()


@contextlib.asynccontextmanager
async def peer_running(
    peer: Peer, urls: list[str], probe: bytes, log_dir: Path
) -> AsyncIterator[PeerProcess]:
    """A started peer that routes; stopped on exit, its log printed if it failed."""
    server = spawn_peer(peer, urls, log_dir)
    ok = False
    try:
        await wait_peer_ready(server, probe)
        yield server
        ok = True
    finally:
        stop_peer(server)
        if not ok:
            print(f"\n--- {peer.name} output ---\n{server.log_tail()}", file=sys.stderr)
