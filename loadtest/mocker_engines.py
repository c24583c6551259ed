"""Dynamo's mock engines (vLLM-like scheduler and KV block manager, CPU only) as benchmark
engines: one mocker and one round-robin frontend per engine, each in its own namespace, the
mocker publishing vLLM-format KV events on `events_port(i)`.

Needs Dynamo's venv and its tiny model (`../shared/tools/dynamo/README.md`):
    ../shared/tools/dynamo/install.sh /tmp/dynamo-venv
    /tmp/dynamo-venv/bin/python ../shared/tools/dynamo/mkmodel.py /tmp/dynamo-model
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx

from loadtest.servers import free_port


@dataclass(frozen=True)
class MockerSetup:
    venv: Path
    model: Path
    model_name: str
    count: int = 4
    block_size: int = 16
    gpu_blocks: int = 1024  # per engine: small enough that the workload thrashes it
    max_num_seqs: int = 8


@dataclass(frozen=True)
class Mocker:
    http_port: int
    events_port: int  # http_port + EVENTS_OFFSET

    @property
    def endpoint(self) -> str:
        return f"127.0.0.1:{self.http_port}"


EVENTS_OFFSET = 1  # the policy's `events: "tcp://{host}:{port+1}"`


def _low_port() -> int:
    """A free port below 32768: Dynamo reads DYN_SYSTEM_PORT as a signed 16-bit number."""
    rng = random.Random()
    while True:
        port = rng.randrange(20_000, 32_000)
        with contextlib.suppress(OSError), socket.socket() as probe:
            probe.bind(("127.0.0.1", port))
            return port


def _free_pair() -> int:
    """An HTTP port whose next port is free too (for the events socket)."""
    while True:
        port = free_port()
        with contextlib.suppress(OSError):
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port + EVENTS_OFFSET))
            return port


_LOG: list[Path] = []


def _log_tail() -> str:
    return _LOG[-1].read_text(errors="replace")[-2000:] if _LOG and _LOG[-1].exists() else ""


@contextlib.contextmanager
def mockers(setup: MockerSetup) -> Iterator[list[Mocker]]:
    """Fresh engines (cold caches), stopped on exit; each ready when its frontend lists the
    model."""
    processes: list[subprocess.Popen[bytes]] = []
    with tempfile.TemporaryDirectory(prefix="mockers-") as store:
        env = dict(os.environ, DYN_FILE_KV=store, DYN_SELF_HOST_METADATA="0")
        _LOG.append(Path(store + ".log"))
        python = str(setup.venv / "bin" / "python")
        engines = []
        try:
            for index in range(setup.count):
                port = _free_pair()
                engine = Mocker(port, port + EVENTS_OFFSET)
                namespace = f"mock{index}x{os.getpid()}"
                mocker_env = dict(env, DYN_SYSTEM_PORT=str(_low_port()))
                processes.append(_spawn(
                    [python, "-m", "dynamo.mocker", "--model-path", str(setup.model),
                     "--model-name", setup.model_name, "--block-size", str(setup.block_size),
                     "--num-gpu-blocks-override", str(setup.gpu_blocks),
                     "--max-num-seqs", str(setup.max_num_seqs), "--discovery-backend", "file",
                     "--endpoint", f"dyn://{namespace}.backend.generate",
                     "--zmq-kv-events-ports", str(engine.events_port)],
                    mocker_env,
                ))  # fmt: skip
                processes.append(_spawn(
                    [python, "-m", "dynamo.frontend", "--http-port", str(port), "--namespace",
                     namespace, "--router-mode", "round-robin", "--discovery-backend", "file"],
                    env,
                ))  # fmt: skip
                engines.append(engine)
            for engine in engines:
                _wait_ready(engine, setup.model_name, processes)
            yield engines
        finally:
            for process in processes:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGTERM)
            for process in processes:
                try:
                    process.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()


def _spawn(command: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    log = Path(env["DYN_FILE_KV"]).with_name(Path(env["DYN_FILE_KV"]).name + ".log")
    with log.open("ab") as out:
        return subprocess.Popen(
            command, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )


def _wait_ready(engine: Mocker, model: str, processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 120
    url = f"http://{engine.endpoint}/v1/models"
    while time.monotonic() < deadline:
        if any(p.poll() is not None for p in processes):
            raise RuntimeError(f"a mocker or frontend exited during start-up: {_log_tail()}")
        with contextlib.suppress(httpx.HTTPError):
            listed = httpx.get(url, timeout=2, trust_env=False).json().get("data", [])
            if any(m.get("id") == model for m in listed):
                return
        time.sleep(0.5)
    raise TimeoutError(f"{engine.endpoint} not ready")
