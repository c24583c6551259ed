"""Each overlay is built, and each schema loaded, once per test session."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.deploy.manifests import KUSTOMIZE, Manifest, Schemas, build


@pytest.fixture(scope="session")
def overlay() -> Callable[[str], list[Manifest]]:
    """`overlay(name)`: the objects `kubectl kustomize overlays/NAME` builds."""
    cache: dict[str, list[Manifest]] = {}

    def get(name: str) -> list[Manifest]:
        if name not in cache:
            cache[name] = build(KUSTOMIZE / "overlays" / name)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def schemas() -> Schemas:
    """The schema validator, shared so that each schema is loaded once."""
    return Schemas()
