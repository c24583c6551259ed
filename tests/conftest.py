"""Shared fixtures: a real picker server on a free port, and a client on one channel."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from kinference.app import App
from kinference.client import PickerClient
from kinference.config import Policy, parse_policy
from kinference.requests.offload import Offload
from kinference.settings import Settings
from tests.shared_workers import LentWorker, WorkerPool

MODEL = "meta-llama/Llama-3.1-8B-Instruct"
OTHER_MODEL = "qwen-7b"

TEST_POLICY = f"""
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.5:8000", "10.0.0.6:8000"]
    models: ["{MODEL}"]
  - namespace: team-b
    name: big
    endpoints: ["10.0.1.5:8000"]
    models: ["{MODEL}", "{OTHER_MODEL}"]
"""


@dataclass
class RunningPicker:
    """A started App and a client connected to it."""

    app: App
    client: PickerClient

    @property
    def target(self) -> str:
        return f"127.0.0.1:{self.app.port}"

    def metric(self, name: str, labels: dict[str, str] | None = None) -> float:
        value = self.app.metrics.registry.get_sample_value(name, labels or {})
        return 0.0 if value is None else value


PickerFactory = Callable[..., Awaitable[RunningPicker]]


def make_settings(**overrides: Any) -> Settings:
    values: dict[str, Any] = {"listen": "127.0.0.1:0", "metrics_listen": ""}
    values.update(overrides)
    return Settings(**values)


@pytest.fixture(scope="session")
def parse_workers() -> Iterator[WorkerPool]:
    """Parse workers the session's pickers borrow (`tests/shared_workers.py`)."""
    pool = WorkerPool()
    yield pool
    pool.close()


@pytest.fixture
async def start_picker(parse_workers: WorkerPool) -> AsyncIterator[PickerFactory]:
    """Start pickers with settings overrides (and an optional policy); all stop at teardown.
    Each borrows a started parse worker from the session's, unless `own_parse_worker`."""
    running: list[RunningPicker] = []

    async def start(
        policy: Policy | None = None, *, own_parse_worker: bool = False, **overrides: Any
    ) -> RunningPicker:
        worker = None if own_parse_worker else LentWorker(parse_workers)
        app = App(
            make_settings(**overrides),
            policy or parse_policy(TEST_POLICY),
            CollectorRegistry(),
            offload=Offload(worker),
        )
        await app.start()
        picker = RunningPicker(app, PickerClient(f"127.0.0.1:{app.port}"))
        running.append(picker)
        return picker

    yield start
    for picker in running:
        await picker.client.close()
        await picker.app.server.stop(None)
        await picker.app.close()


@pytest.fixture
async def picker(start_picker: PickerFactory) -> RunningPicker:
    """A picker with default settings and the test policy."""
    return await start_picker()
