"""Catalog: worker-table slots per (pool, model), computed once per policy."""

from __future__ import annotations

import pytest

from kinference.config import parse_policy
from kinference.routing import Catalog, WorkerTable

POLICY = parse_policy(
    """
pools:
  - namespace: default
    name: chat
    endpoints: ["10.0.0.5:8000", "10.0.0.6:8000"]
    models: ["llama", "mistral"]
  - namespace: team-b
    name: big
    endpoints: ["10.0.1.5:8000"]
    models: ["llama", "qwen"]
  - namespace: team-b
    name: scaled-to-zero
    endpoints: []
    models: ["phi"]
"""
)
CHAT = "default/chat"
BIG = "team-b/big"
ZERO = "team-b/scaled-to-zero"


@pytest.fixture
def table() -> WorkerTable:
    return WorkerTable()


@pytest.fixture
def catalog(table: WorkerTable) -> Catalog:
    return Catalog(POLICY.pools, table)


def endpoints(table: WorkerTable, catalog: Catalog, ref: str, model: str) -> list[str] | None:
    slots = catalog.slots(ref, model)
    return None if slots is None else [table.endpoints[slot] for slot in slots]


def test_pools(catalog: Catalog) -> None:
    assert [pool.ref for pool in catalog.pools] == [CHAT, BIG, ZERO]
    assert catalog.has_pool(BIG)
    assert not catalog.has_pool("default/nope")
    assert not catalog.has_pool("other/chat")
    assert not catalog.has_pool("chat")


def test_every_endpoint_gets_a_slot(table: WorkerTable, catalog: Catalog) -> None:
    assert table.endpoints == ["10.0.0.5:8000", "10.0.0.6:8000", "10.0.1.5:8000"]
    assert catalog.endpoints() == set(table.endpoints)


def test_slots_per_pool_and_model(table: WorkerTable, catalog: Catalog) -> None:
    chat = ["10.0.0.5:8000", "10.0.0.6:8000"]
    assert endpoints(table, catalog, CHAT, "llama") == chat
    assert endpoints(table, catalog, CHAT, "mistral") == chat
    assert endpoints(table, catalog, BIG, "llama") == ["10.0.1.5:8000"]
    assert endpoints(table, catalog, BIG, "qwen") == ["10.0.1.5:8000"]
    assert endpoints(table, catalog, ZERO, "phi") == []  # known, but no workers


@pytest.mark.parametrize(
    ("ref", "model"),
    [
        (CHAT, "qwen"),  # the pool does not serve it
        (BIG, "mistral"),
        (CHAT, "Llama"),  # names are exact
        ("default/nope", "llama"),
        ("other/chat", "llama"),
    ],
)
def test_not_served(catalog: Catalog, ref: str, model: str) -> None:
    assert catalog.slots(ref, model) is None


def test_an_endpoint_in_two_pools_has_one_slot() -> None:
    policy = parse_policy(
        """
pools:
  - {name: a, endpoints: ["10.0.0.5:8000", "10.0.0.6:8000"], models: [m]}
  - {name: b, endpoints: ["10.0.0.6:8000"], models: [m]}
"""
    )
    table = WorkerTable()
    catalog = Catalog(policy.pools, table)
    slots_b = catalog.slots("default/b", "m")
    slots_a = catalog.slots("default/a", "m")
    assert slots_a is not None and slots_b is not None
    assert slots_b.tolist() == [slots_a[1]]
    assert len(table) == 2


def test_rebuilt_on_the_same_table_keeps_slots(table: WorkerTable, catalog: Catalog) -> None:
    """A reload builds a new catalog over the same table: known endpoints keep their slots
    (and with them their load and metrics); new ones are added."""
    before = catalog.slots(BIG, "llama")
    reloaded = parse_policy(
        """
pools:
  - {namespace: team-b, name: big, endpoints: ["10.0.9.9:8000", "10.0.1.5:8000"], models: [llama]}
"""
    )
    after = Catalog(reloaded.pools, table).slots(BIG, "llama")
    assert before is not None and after is not None
    assert after.tolist() == [3, int(before[0])]
    assert len(table) == 4


def test_empty_policy(table: WorkerTable) -> None:
    catalog = Catalog(parse_policy("").pools, table)
    assert catalog.pools == ()
    assert catalog.slots(CHAT, "llama") is None
    assert catalog.endpoints() == set()
    assert len(table) == 0
