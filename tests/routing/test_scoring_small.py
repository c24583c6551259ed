"""The Python-float scorers give the same scores as the numpy ones, on random candidates."""

from __future__ import annotations

import random

import numpy as np
import pytest

from kinference.routing.features import Features, Signals
from kinference.routing.scoring import Balance, Weights, vector_scores
from kinference.routing.scoring_small import small_scores
from kinference.routing.table import WorkerTable

NOW = 1000.0


def random_table(rng: random.Random, workers: int) -> WorkerTable:
    table = WorkerTable(capacity=4)
    for i in range(workers):
        slot = table.slot(f"10.0.0.{i}:8000")
        table.inflight[slot] = rng.choice([0, 0, 1, 2, 5, 40])
        if rng.random() < 0.7:
            table.set_engine(
                slot,
                waiting=rng.choice([None, 0, 3, 12]),
                running=rng.choice([None, 4]),
                kv_usage=rng.choice([None, 0.0, 0.35, 0.97, 1.2]),
                adapters=frozenset(rng.sample(["m", "lora-a"], rng.randrange(3))),
                scraped_at=NOW - rng.choice([0.1, 0.5, 5.0]),
            )
        if rng.random() < 0.6:
            table.observe_ttft(slot, "m", rng.uniform(5, 900))
        if rng.random() < 0.5:
            table.observe_itl(slot, "m", tuple(rng.randrange(5) for _ in range(15)))
    return table


@pytest.mark.parametrize("seed", range(200))
def test_small_scores_equal_vector_scores(seed: int) -> None:
    rng = random.Random(seed)
    workers = rng.randrange(2, 17)
    table = random_table(rng, workers)
    slots = np.array(rng.sample(range(workers), rng.randrange(2, workers + 1)), dtype=np.intp)
    total = rng.choice([0, 1, 64, 256])
    prefix = np.array([rng.randrange(total + 1) for _ in slots], dtype=np.float64)
    weights = Weights(*(rng.choice([0.0, 0.5, 1.0, 2.0, 3.0]) for _ in range(5)))
    balance = Balance(
        rng.choice([0.0, 4.0, 16.0]), rng.choice([1.0, 1.5, 3.0]), fade=rng.random() < 0.5
    )
    features = Features(table, slots, "m", Signals(*table.engine_signals(NOW, 1.0)), prefix, total)
    small, small_overridden = small_scores(features, weights, balance)
    vector, vector_overridden = vector_scores(features, weights, balance)
    assert small_overridden == vector_overridden
    np.testing.assert_allclose(small, vector, rtol=1e-12, atol=1e-12)
