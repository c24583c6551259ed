"""Fixtures: a Kubernetes API double per test, stopped at teardown."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.discovery.kube_double import KubeDouble


@pytest.fixture
async def kube() -> AsyncIterator[KubeDouble]:
    double = KubeDouble()
    await double.start()
    yield double
    await double.stop()
