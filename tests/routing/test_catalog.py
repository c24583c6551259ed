"""Catalog: ready endpoints per model, in a named pool or across all of them."""

from __future__ import annotations

import pytest

from kinference.config import parse_policy
from kinference.routing import Candidate, Catalog, NoCandidates, PoolRef

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
CHAT = PoolRef("default", "chat")
BIG = PoolRef("team-b", "big")


@pytest.fixture
def catalog() -> Catalog:
    return Catalog(POLICY)


def test_pools(catalog: Catalog) -> None:
    assert catalog.pools == (CHAT, BIG, PoolRef("team-b", "scaled-to-zero"))
    assert str(BIG) == "team-b/big"


def test_across_all_pools(catalog: Catalog) -> None:
    assert catalog.candidates("llama", None) == [
        Candidate("10.0.0.5:8000", CHAT),
        Candidate("10.0.0.6:8000", CHAT),
        Candidate("10.0.1.5:8000", BIG),
    ]
    assert catalog.candidates("qwen", None) == [Candidate("10.0.1.5:8000", BIG)]


def test_in_a_named_pool(catalog: Catalog) -> None:
    assert catalog.candidates("llama", BIG) == [Candidate("10.0.1.5:8000", BIG)]
    assert catalog.candidates("mistral", CHAT) == [
        Candidate("10.0.0.5:8000", CHAT),
        Candidate("10.0.0.6:8000", CHAT),
    ]


@pytest.mark.parametrize(
    ("model", "pool", "reason"),
    [
        ("gpt-9", None, "no pool serves model 'gpt-9'"),
        ("phi", None, "the pools serving model 'phi' have no ready endpoint"),
        ("qwen", CHAT, "pool default/chat does not serve model 'qwen'"),
        ("llama", PoolRef("default", "nope"), "pool default/nope is not known"),
        ("llama", PoolRef("other", "chat"), "pool other/chat is not known"),
        ("phi", PoolRef("team-b", "scaled-to-zero"), "pool team-b/scaled-to-zero has no ready"),
        ("Llama", None, "no pool serves model 'Llama'"),  # names are exact
    ],
)
def test_no_candidates(catalog: Catalog, model: str, pool: PoolRef | None, reason: str) -> None:
    with pytest.raises(NoCandidates, match=reason):
        catalog.candidates(model, pool)


def test_empty_policy() -> None:
    catalog = Catalog(parse_policy(""))
    assert catalog.pools == ()
    with pytest.raises(NoCandidates):
        catalog.candidates("llama", None)
