"""Replicas as real `kinference serve` subprocesses, their /metrics, RSS, and bounded waits.

Every replica listens on free loopback ports (gRPC and Prometheus), is started with the
settings a scenario asks for in `KINFERENCE_*` variables, and is ready once its health
check answers SERVING. Nothing here sleeps a fixed time to let a state settle.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from kinference.client import PickerClient
from loadtest.flows import CLIENT_OPTIONS, MODEL, Body
from loadtest.servers import ServerProcess, ServerSpec, free_port, spawn, stop, wait_ready

ENDPOINTS = ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000", "10.0.0.4:8000")
# Requests a scenario keeps in flight across a fault name a model of their own, served by
# one worker of its own, so their load is told apart from the steady traffic's.
HELD_WORKERS = {"held-1": "10.0.9.1:8000", "held-2": "10.0.9.2:8000"}
POLICY_YAML = f"""\
pools:
  - namespace: default
    name: chat
    endpoints: [{", ".join(f'"{e}"' for e in ENDPOINTS)}]
    models: ["{MODEL}"]
""" + "".join(
    f"""  - namespace: default
    name: {model}
    endpoints: ["{endpoint}"]
    models: ["{model}"]
"""
    for model, endpoint in HELD_WORKERS.items()
)
MiB = 1 << 20
_POLL_S = 0.05  # seconds between two looks at a condition polled against a deadline
_SCRAPE_TIMEOUT_S = 5.0  # a loaded 2-core machine can be slow to answer /metrics


def _children(pid: int) -> list[int]:
    try:
        return [
            int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        ]
    except OSError:
        return []


class ScenarioFailed(AssertionError):
    """A state a scenario waits for never came within its deadline."""


async def wait_for(condition: Callable[[], Awaitable[bool]], within_s: float, what: str) -> float:
    """Poll `condition` until it holds; returns the seconds it took, raises past the deadline."""
    start = time.monotonic()
    while not await condition():
        if time.monotonic() - start > within_s:
            raise ScenarioFailed(f"timed out after {within_s:g} s waiting for {what}")
        await asyncio.sleep(_POLL_S)
    return time.monotonic() - start


@dataclass(frozen=True)
class Scrape:
    """One reading of a replica's /metrics: sample name -> [(labels, value)]."""

    samples: Mapping[str, list[tuple[dict[str, str], float]]]

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples of `name` whose labels include `labels` (0 if none)."""
        return sum(
            value
            for sample_labels, value in self.samples.get(name, [])
            if all(sample_labels.get(k) == v for k, v in labels.items())
        )

    def by_label(self, name: str, label: str) -> dict[str, float]:
        return {labels[label]: value for labels, value in self.samples.get(name, [])}

    def inflight(self) -> dict[str, int]:
        """Requests in flight per worker as this replica scores them (zeros left out)."""
        counts = self.by_label("kinference_inflight_requests", "endpoint")
        return {endpoint: int(n) for endpoint, n in sorted(counts.items()) if n}


def parse_metrics(text: str) -> Scrape:
    samples: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((dict(sample.labels), sample.value))
    return Scrape(samples)


def _fetch(url: str) -> str:
    with urllib.request.urlopen(url, timeout=_SCRAPE_TIMEOUT_S) as response:
        return str(response.read().decode())


@dataclass
class Replica:
    """One `kinference serve` subprocess and a caller's client connected to it."""

    name: str
    server: ServerProcess
    metrics_port: int
    client: PickerClient

    @property
    def pid(self) -> int:
        return self.server.pid

    async def scrape(self) -> Scrape:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        return parse_metrics(await asyncio.to_thread(_fetch, url))

    def rss_mib(self) -> float:
        """VmRSS from /proc/PID/status, in MiB."""
        return self.server.status_kib("VmRSS") / 1024

    def children_rss_mib(self) -> float:
        """VmRSS of the replica's child processes (its parse worker), in MiB."""
        total = 0
        for child in _children(self.pid):
            with contextlib.suppress(OSError, ValueError):
                status = Path(f"/proc/{child}/status").read_text()
                line = next(line for line in status.splitlines() if line.startswith("VmRSS:"))
                total += int(line.split()[1])
        return total / 1024

    def kill(self) -> None:
        """SIGKILL: no drain, no goodbye to Redis; its heartbeat must expire."""
        os.kill(self.pid, signal.SIGKILL)
        self.server.process.wait()

    async def close(self) -> None:
        await self.client.close()
        stop(self.server)


@dataclass
class Fleet:
    """The replicas of one scenario, sharing a work directory and (optionally) Redis."""

    workdir: Path
    env: dict[str, str] = field(default_factory=dict)
    replicas: list[Replica] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.policy = self.workdir / "policy.yaml"
        self.policy.write_text(POLICY_YAML)

    async def start(self, name: str, **env: str) -> Replica:
        """Start a replica with the fleet's settings (plus `env`); returns once SERVING."""
        metrics_port = free_port()
        spec = ServerSpec(
            name,
            lambda listen: [
                *(sys.executable, "-m", "kinference", "serve"),
                *("--listen", listen, "--config", str(self.policy)),
            ],
            env={
                "KINFERENCE_METRICS_LISTEN": f"127.0.0.1:{metrics_port}",
                "KINFERENCE_LOG_LEVEL": "WARNING",
                # Nothing is under way when a scenario ends; a short drain ends it sooner.
                "KINFERENCE_SHUTDOWN_GRACE_S": "2",
                **self.env,
                **env,
            },
        )
        server = spawn(spec, self.workdir)
        try:
            await wait_ready(server)
        except BaseException:
            stop(server)
            raise
        replica = Replica(
            name, server, metrics_port, PickerClient(server.address, options=CLIENT_OPTIONS)
        )
        self.replicas.append(replica)
        return replica

    async def start_all(self, *names: str) -> list[Replica]:
        """Start replicas side by side (each waits for its own readiness)."""
        return list(await asyncio.gather(*(self.start(name) for name in names)))

    async def close(self) -> None:
        """Stop every replica: all told to drain at once, then each awaited."""
        for replica in self.replicas:
            if replica.server.process.poll() is None:
                replica.server.process.terminate()
        for replica in self.replicas:
            await replica.close()
        self.replicas.clear()


def held_body(model: str) -> Body:
    """A small chat body for one of HELD_WORKERS' models."""
    raw = json.dumps({"model": model, "messages": [{"role": "user", "content": "held"}]})
    return Body(chunks=(raw.encode(),), length=len(raw))


def kinference_env(**settings: float | str) -> dict[str, str]:
    """`KINFERENCE_*` variables from setting names: kinference_env(body_ttl_s=2)."""
    return {f"KINFERENCE_{name.upper()}": str(value) for name, value in settings.items()}
