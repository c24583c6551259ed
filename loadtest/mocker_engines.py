"""Dynamo's mock engines (vLLM-like scheduler and KV block manager, CPU only) as benchmark
engines, in the two arrangements Dynamo allows (`../shared/tools/dynamo/README.md`):

- `mockers(setup)`: one mocker and one round-robin frontend per engine, each in its own
  namespace, so every engine has its own HTTP endpoint for a router of ours to pick among;
- `kv_router(setup)`: the mockers on one endpoint behind one frontend in `--router-mode kv`,
  Dynamo's own KV-aware router (a peer).

Every engine sits on its own loopback address (127.0.13.N, as pods have their own IPs) with
its HTTP endpoint on a free port, its vLLM-format KV events on the next port
(`EVENTS_OFFSET`; `--zmq-kv-events-ports`, endpoint arrangement only) and its metrics on the
system port, the same port on every engine's address (`MockerSetup` -> `Mocker.metrics_url`;
a kinference pool reads them with `metrics_port`). Fresh processes, cold caches, a fresh
discovery store each time; every process stopped on exit.

Needs Dynamo's venv and its tiny model:
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
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

READY_TIMEOUT_S = 120.0
STOP_TIMEOUT_S = 10.0
EVENTS_OFFSET = 1  # the policy's `events: "tcp://{host}:{port+1}"`
# What a mocker logs once it bound its events port (%d), or failed to: another process took it.
EVENTS_BOUND = b"ZmqKvEventSink bound to tcp://0.0.0.0:%d "
EVENTS_UNBOUND = b"bind to tcp://0.0.0.0:%d failed"
START_ATTEMPTS = 3
HOST_PREFIX = "127.0.13."  # engine N on 127.0.13.(N + 1)


@dataclass(frozen=True)
class MockerSetup:
    venv: Path
    model: Path
    model_name: str
    count: int = 4
    block_size: int = 16  # tokens per KV block
    gpu_blocks: int = 1024  # per engine: small enough that the workload thrashes it
    max_num_seqs: int = 8

    def mocker_argv(self) -> list[str]:
        return [
            str(self.venv / "bin" / "python"), "-m", "dynamo.mocker",
            "--model-path", str(self.model), "--model-name", self.model_name,
            "--block-size", str(self.block_size),
            "--num-gpu-blocks-override", str(self.gpu_blocks),
            "--max-num-seqs", str(self.max_num_seqs), "--discovery-backend", "file",
        ]  # fmt: skip

    def frontend_argv(self, host: str, port: int, mode: str) -> list[str]:
        return [
            str(self.venv / "bin" / "python"), "-m", "dynamo.frontend",
            "--http-host", host, "--http-port", str(port), "--router-mode", mode,
            "--discovery-backend", "file",
        ]  # fmt: skip


@dataclass(frozen=True)
class Mocker:
    http_port: int  # its own frontend's (endpoint arrangement; 0 behind the KV router)
    events_port: int  # http_port + EVENTS_OFFSET (0 behind the KV router)
    host: str = "127.0.0.1"
    system_port: int = 0  # its metrics

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.http_port}"

    @property
    def metrics_url(self) -> str:
        return f"http://{self.host}:{self.system_port}/metrics"


@dataclass(frozen=True)
class KvRouter:
    """Dynamo's frontend in KV mode at `url`, over `engines` (metrics only: no endpoints)."""

    url: str
    engines: list[Mocker]


def engine_host(index: int) -> str:
    return f"{HOST_PREFIX}{index + 1}"


def _bindable(host: str, port: int) -> bool:
    with contextlib.suppress(OSError), socket.socket() as probe:
        probe.bind((host, port))
        return True
    return False


def system_port(hosts: list[str]) -> int:
    """A port free on every host, below 32768: Dynamo reads DYN_SYSTEM_PORT as an i16."""
    rng = random.Random()
    while True:
        port = rng.randrange(20_000, 32_000)
        if all(_bindable(host, port) for host in hosts):
            return port


def http_port(host: str) -> int:
    """A free port on `host` whose next port is free on every address (the events socket
    binds the wildcard)."""
    while True:
        with socket.socket() as probe:
            probe.bind((host, 0))
            port = int(probe.getsockname()[1])
        if port < 65_535 and _bindable("0.0.0.0", port + EVENTS_OFFSET):
            return port


class _Processes:
    """The processes of one arrangement, their output in one log, one discovery store."""

    def __init__(self, store: str) -> None:
        # DYN_IGNORE_OPENAI_FE_UNSUPPORTED_FIELDS: sglang-router and vllm-router add SGLang's
        # own fields (`separate_reasoning`, `no_stop_trim`, ...), which the frontend would
        # refuse with 400; the mocker has no use for them either way.
        self.env = dict(
            os.environ,
            DYN_FILE_KV=store,
            DYN_SELF_HOST_METADATA="0",
            DYN_IGNORE_OPENAI_FE_UNSUPPORTED_FIELDS="1",
        )
        for key in ("DYN_SYSTEM_PORT", "DYN_SYSTEM_HOST", "DYN_HTTP_PORT", "DYN_NAMESPACE"):
            self.env.pop(key, None)  # only what each process is given
        self.log = Path(store + ".log")
        self.processes: list[subprocess.Popen[bytes]] = []

    def spawn(self, argv: list[str], **env: str) -> None:
        with self.log.open("ab") as out:
            self.processes.append(
                subprocess.Popen(
                    argv,
                    env={**self.env, **env},
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,  # its children die with it
                )
            )

    def check_alive(self) -> None:
        if any(p.poll() is not None for p in self.processes):
            tail = self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""
            raise RuntimeError(f"a mocker or frontend exited: {tail}")

    def stop(self) -> None:
        for process in self.processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.log.unlink(missing_ok=True)


Ready = Callable[[Any], bool]  # of a JSON page


def _poll(processes: _Processes, url: str, ready: Ready, what: str) -> None:
    """GET `url` until `ready(json)` holds; a process exiting or the deadline fails it."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        processes.check_alive()
        with contextlib.suppress(httpx.HTTPError, ValueError):
            if ready(httpx.get(url, timeout=2, trust_env=False).json()):
                return
        time.sleep(0.2)  # polling for readiness, bounded by the deadline
    raise TimeoutError(f"{what} not ready after {READY_TIMEOUT_S:.0f} s")


def _events_bound(processes: _Processes, ports: list[int]) -> bool:
    """Whether every mocker bound its events port, from what they log (waited for)."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        processes.check_alive()
        text = processes.log.read_bytes() if processes.log.exists() else b""
        if any(EVENTS_UNBOUND % port in text for port in ports):
            return False
        if all(EVENTS_BOUND % port in text for port in ports):
            return True
        time.sleep(0.2)  # polling their log, bounded by the deadline
    raise TimeoutError(f"the mockers did not say they bound {ports} in {READY_TIMEOUT_S:.0f} s")


def _lists(model: str) -> Ready:
    return lambda page: any(m.get("id") == model for m in page.get("data", []))


def _serves_all(count: int) -> Ready:
    def ready(page: dict[str, list[dict[str, str]]]) -> bool:
        workers = [i for i in page.get("instances", []) if i.get("endpoint") == "generate"]
        return len(workers) >= count

    return ready


@contextlib.contextmanager
def mockers(setup: MockerSetup) -> Iterator[list[Mocker]]:
    """Fresh engines, each behind its own frontend; ready when every frontend lists the
    model and every mocker bound its `events_port`, where it publishes vLLM-format KV
    events. A port can be taken meanwhile (free when chosen, bound seconds later, once the
    mocker started; an even port, as those a connection takes, since the HTTP port bound
    to port 0 is odd): that mocker then runs without publishing anything, so they all
    start again on other ports."""
    for attempt in range(1, START_ATTEMPTS + 1):
        with tempfile.TemporaryDirectory(prefix="mockers-") as store:
            processes = _Processes(store)
            try:
                engines = _start_mockers(setup, processes)
                if not _events_bound(processes, [e.events_port for e in engines]):
                    if attempt < START_ATTEMPTS:
                        continue
                    raise RuntimeError(f"KV events ports taken {attempt} times in a row")
                yield engines
                return
            finally:
                processes.stop()


def _start_mockers(setup: MockerSetup, processes: _Processes) -> list[Mocker]:
    hosts = [engine_host(index) for index in range(setup.count)]
    metrics = system_port(hosts)
    engines = []
    for index, host in enumerate(hosts):
        port = http_port(host)
        engine = Mocker(port, port + EVENTS_OFFSET, host, metrics)
        namespace = f"mock{index}x{os.getpid()}"
        processes.spawn(
            [*setup.mocker_argv(), "--endpoint", f"dyn://{namespace}.backend.generate",
             "--zmq-kv-events-ports", str(engine.events_port)],
            DYN_SYSTEM_HOST=host, DYN_SYSTEM_PORT=str(metrics),
        )  # fmt: skip
        processes.spawn([*setup.frontend_argv(host, port, "round-robin"), "--namespace", namespace])
        engines.append(engine)
    for engine in engines:
        url = f"http://{engine.endpoint}/v1/models"
        _poll(processes, url, _lists(setup.model_name), engine.endpoint)
    return engines


@contextlib.contextmanager
def kv_router(setup: MockerSetup) -> Iterator[KvRouter]:
    """Fresh engines behind Dynamo's KV router (its defaults: KV events from the workers,
    its cost of prefill blocks net of cached plus decode load); ready when it sees every
    worker and lists the model."""
    hosts = [engine_host(index) for index in range(setup.count)]
    metrics = system_port(hosts)
    with tempfile.TemporaryDirectory(prefix="kv-router-") as store:
        processes = _Processes(store)
        try:
            for host in hosts:
                processes.spawn(
                    setup.mocker_argv(), DYN_SYSTEM_HOST=host, DYN_SYSTEM_PORT=str(metrics)
                )
            port = http_port("127.0.0.1")
            processes.spawn(setup.frontend_argv("127.0.0.1", port, "kv"))
            url = f"http://127.0.0.1:{port}"
            _poll(processes, f"{url}/health", _serves_all(setup.count), "the KV router")
            _poll(processes, f"{url}/v1/models", _lists(setup.model_name), "the KV router")
            yield KvRouter(url, [Mocker(0, 0, host, metrics) for host in hosts])
        finally:
            processes.stop()
