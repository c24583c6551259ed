"""Scorers: each one's direction, neutral unknowns, the balance override, random ties."""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Sequence
from typing import Any, SupportsInt

import numpy as np
import pytest

from kinference.routing import WorkerTable
from kinference.routing.scoring import (
    NEUTRAL,
    Balance,
    Scored,
    Signals,
    Weights,
    choose,
    load_of,
)
from kinference.routing.table import IndexArray

MODEL = "m"
OFF = Weights(prefix=0, queue=0, kv_cache=0, latency=0, lora=0)
QUEUE = Weights(prefix=0, queue=1, kv_cache=0, latency=0, lora=0)
KV = Weights(prefix=0, queue=0, kv_cache=1, latency=0, lora=0)
LATENCY = Weights(prefix=0, queue=0, kv_cache=0, latency=1, lora=0)
LORA = Weights(prefix=0, queue=0, kv_cache=0, latency=0, lora=1)
PREFIX = Weights(prefix=1, queue=0, kv_cache=0, latency=0, lora=0)
NOW = 200.0  # when every reading below is taken and read
STALE_AFTER = 1.0


def table_of(workers: int) -> tuple[WorkerTable, IndexArray]:
    table = WorkerTable(capacity=4)
    slots = table.slots(f"10.0.0.{i}:8000" for i in range(workers))
    return table, slots


def engine(
    table: WorkerTable,
    slot: SupportsInt,
    *,
    waiting: float | None = 0,
    kv: float | None = None,
    adapters: frozenset[str] = frozenset(),
    at: float = NOW,
) -> None:
    """An engine reading taken at `at` (default: now, so fresh)."""
    table.set_engine(
        int(slot),
        waiting=waiting,
        running=0,
        kv_usage=kv,
        adapters=adapters,
        scraped_at=at,
    )


def signals_of(table: WorkerTable, now: float = NOW) -> Signals:
    """What the router reads per Pick: fresh readings, NaN where unknown or stale."""
    return Signals(*table.engine_signals(now, STALE_AFTER))


def pick(
    table: WorkerTable,
    slots: IndexArray,
    weights: Weights,
    *,
    prefix: Sequence[float] | None = None,
    total: int = 0,
    balance: Balance | None = None,
    seed: int = 0,
    now: float = NOW,
) -> Scored:
    blocks = np.zeros(len(slots)) if prefix is None else np.asarray(prefix, dtype=np.float64)
    return choose(
        table,
        slots,
        model=MODEL,
        signals=signals_of(table, now),
        prefix_blocks=blocks,
        total_blocks=total,
        weights=weights,
        balance=balance or Balance(),
        rng=random.Random(seed),
    )


def winners(table: WorkerTable, slots: IndexArray, weights: Weights, **kw: object) -> set[int]:
    """Every index chosen over 40 seeds: one index when the scorer decides, several on ties."""
    return {pick(table, slots, weights, seed=seed, **kw).index for seed in range(40)}  # type: ignore[arg-type]


def test_default_weights_follow_gie() -> None:
    assert Weights() == Weights(prefix=3, queue=2, kv_cache=2, latency=1, lora=1)
    assert Balance() == Balance(abs_threshold=16, rel_threshold=1.5)


def test_load_is_inflight_plus_known_queue() -> None:
    table, slots = table_of(3)
    table.inflight[slots] = [1, 2, 0]
    engine(table, slots[0], waiting=4)
    assert load_of(table, slots, signals_of(table)).tolist() == [5, 2, 0]  # unknown: none
    # Only the given signals count: a queue that went stale is unknown, so none.
    assert load_of(table, slots, signals_of(table, NOW + 2)).tolist() == [1, 2, 0]
    # In the order of the slots given.
    order = slots[[2, 0]]
    assert load_of(table, order, signals_of(table)).tolist() == [0, 5]


def test_more_load_scores_lower() -> None:
    table, slots = table_of(3)
    table.inflight[slots] = [2, 1, 3]
    assert winners(table, slots, QUEUE) == {1}
    engine(table, slots[1], waiting=5)  # queue counts too
    assert winners(table, slots, QUEUE) == {0}
    assert winners(table, slots, QUEUE, now=NOW + 2) == {1}  # unless the reading is stale


def test_more_kv_use_scores_lower() -> None:
    table, slots = table_of(3)
    for slot, kv in zip(slots, [0.7, 0.2, 0.9], strict=True):
        engine(table, slot, kv=kv)
    assert winners(table, slots, KV) == {1}
    # Stale readings are unknown: nothing known at all, a tie.
    assert winners(table, slots, KV, now=NOW + 2) == {0, 1, 2}


def test_lower_latency_scores_higher() -> None:
    table, slots = table_of(3)
    for slot, ttft in zip(slots, [300, 100, 200], strict=True):
        table.observe_ttft(int(slot), MODEL, ttft)
    assert winners(table, slots, LATENCY) == {1}
    # Inter-token latency counts too: 64 slow gaps outweigh a 200 ms TTFT lead.
    table.observe_itl(int(slots[0]), MODEL, (10,) + (0,) * 14)  # 2.5 ms gaps
    table.observe_itl(int(slots[1]), MODEL, (0,) * 12 + (10, 0, 0))  # 400 ms gaps
    table.observe_itl(int(slots[2]), MODEL, (10,) + (0,) * 14)  # 2.5 ms gaps
    assert winners(table, slots, LATENCY) == {2}


def test_unknown_itl_is_not_favoured() -> None:
    table, slots = table_of(2)
    table.observe_ttft(int(slots[0]), MODEL, 100)
    table.observe_ttft(int(slots[1]), MODEL, 100)
    table.observe_itl(int(slots[1]), MODEL, (0,) * 12 + (10, 0, 0))  # 400 ms gaps
    # Same TTFT; worker 0's decode speed is unknown and counts as the known typical one:
    # a tie, not 100 ms against 25.7 s.
    assert winners(table, slots, LATENCY) == {0, 1}


def test_unknown_itl_is_not_shunned() -> None:
    table, slots = table_of(3)
    for slot in slots:
        table.observe_ttft(int(slot), MODEL, 100)
    table.observe_itl(int(slots[1]), MODEL, (10,) + (0,) * 14)  # 2.5 ms gaps
    table.observe_itl(int(slots[2]), MODEL, (0,) * 12 + (10, 0, 0))  # 400 ms gaps
    # Worker 0's unknown ITL counts as the typical (mean) 201.25 ms: between the two.
    assert winners(table, slots, LATENCY) == {1}
    # The typical ITL is the candidates' own: alone with either known worker, a tie.
    assert winners(table, slots[[0, 2]], LATENCY) == {0, 1}
    assert winners(table, slots[[0, 1]], LATENCY) == {0, 1}


def test_latency_is_per_model() -> None:
    table, slots = table_of(2)
    table.observe_ttft(int(slots[0]), "other-model", 10)
    table.observe_ttft(int(slots[1]), "other-model", 1000)
    assert winners(table, slots, LATENCY) == {0, 1}  # nothing known for MODEL: a tie


def test_prefix_share_scores_higher() -> None:
    table, slots = table_of(3)
    assert winners(table, slots, PREFIX, prefix=[1, 3, 2], total=4) == {1}
    scored = pick(table, slots, PREFIX, prefix=[1, 3, 2], total=4)
    assert (scored.prefix_blocks, scored.affinity_overridden) == (3, False)
    # Without blocks there is no prefix signal.
    assert pick(table, slots, PREFIX, total=0).prefix_blocks == 0


def test_lora_adapter_present_scores_higher() -> None:
    table, slots = table_of(3)
    engine(table, slots[2], kv=0.5, adapters=frozenset({MODEL}))
    engine(table, slots[0], kv=0.5, adapters=frozenset({"x"}))
    assert winners(table, slots, LORA) == {2}
    assert winners(table, slots, OFF) == {0, 1, 2}
    # Two workers with it loaded tie; once it is unloaded it no longer draws requests.
    engine(table, slots[1], kv=0.5, adapters=frozenset({MODEL, "x"}))
    assert winners(table, slots, LORA) == {1, 2}
    engine(table, slots[2], kv=0.5, adapters=frozenset())
    engine(table, slots[1], kv=0.5, adapters=frozenset({"x"}))
    assert winners(table, slots, LORA) == {0, 1, 2}


def test_lora_weight_zero_ignores_adapters() -> None:
    table, slots = table_of(2)
    engine(table, slots[1], kv=0.5, adapters=frozenset({MODEL}))
    assert winners(table, slots, LORA) == {1}
    assert winners(table, slots, KV) == {0, 1}


def test_lora_without_any_adapter_reported_is_a_tie() -> None:
    table, slots = table_of(3)
    assert winners(table, slots, LORA) == {0, 1, 2}


def test_unknown_kv_scores_as_the_known_average() -> None:
    table, slots = table_of(3)
    engine(table, slots[0], kv=0.2)  # scores 0.8
    engine(table, slots[2], kv=0.6)  # scores 0.4
    # slot 1 is unknown: the known average, 0.6, between the two
    assert winners(table, slots, KV) == {0}
    # Pin it with a queue lead worth w for slots 1 and 2 (slot 0 has one more in flight):
    # slot 1 scores 0.6 + w against slot 0's 0.8, so it wins only for w above 0.2.
    table.inflight[slots] = [1, 0, 0]
    below = Weights(prefix=0, queue=0.19, kv_cache=1, latency=0, lora=0)
    above = Weights(prefix=0, queue=0.21, kv_cache=1, latency=0, lora=0)
    assert winners(table, slots, below) == {0}
    assert winners(table, slots, above) == {1}


def test_unknown_kv_is_neither_favoured_nor_shunned() -> None:
    table, slots = table_of(3)
    engine(table, slots[2], kv=0.9)  # scores 0.1; slots 0 and 1 unknown score the same
    assert winners(table, slots, KV) == {0, 1, 2}
    engine(table, slots[2], kv=0.1)  # scores 0.9; so do the unknown ones
    assert winners(table, slots, KV) == {0, 1, 2}
    # Nothing known: neutral, a tie.
    engine(table, slots[2], waiting=None, kv=None)
    assert winners(table, slots, KV) == {0, 1, 2}
    assert NEUTRAL == 0.5


def test_unknown_kv_averages_only_the_candidates() -> None:
    """The typical value is the candidates' own: a worker outside the set does not count."""
    table, slots = table_of(3)
    engine(table, slots[0], kv=0.5)  # scores 0.5
    engine(table, slots[2], kv=0.0)  # scores 1.0, not a candidate below
    candidates = slots[[0, 1]]
    assert winners(table, candidates, KV) == {0, 1}  # unknown slot 1 scores 0.5 too


def test_unknown_latency_is_neutral() -> None:
    table, slots = table_of(3)
    table.observe_ttft(int(slots[0]), MODEL, 100)  # the best known: scores 1
    table.observe_ttft(int(slots[2]), MODEL, 500)  # scores 100/500 = 0.2
    # slot 1 is unknown: 0.5
    assert winners(table, slots, LATENCY) == {0}
    # Take the fast worker out of the running with load (queue scores 0, 0.6, 0.6): the
    # unknown worker (0.5 + 0.6) beats the slow known one (0.2 + 0.6).
    table.inflight[slots] = [1, 0, 0]
    mixed = Weights(prefix=0, queue=0.6, kv_cache=0, latency=1, lora=0)
    assert winners(table, slots, mixed) == {1}
    # Nothing known at all: a tie.
    fresh, fresh_slots = table_of(3)
    assert winners(fresh, fresh_slots, LATENCY) == {0, 1, 2}


def test_every_weight_zero_is_random() -> None:
    table, slots = table_of(4)
    table.inflight[slots] = [0, 5, 9, 1]
    assert winners(table, slots, OFF, prefix=[0, 0, 4, 0], total=4) == {0, 1, 2, 3}


def test_random_tie_break_spreads_evenly() -> None:
    table, slots = table_of(3)
    rng = random.Random(7)
    counts: Counter[int] = Counter()
    for _ in range(3000):
        scored = choose(
            table,
            slots,
            model=MODEL,
            signals=signals_of(table),
            prefix_blocks=np.zeros(3),
            total_blocks=0,
            weights=Weights(),
            balance=Balance(),
            rng=rng,
        )
        counts[scored.index] += 1
    assert set(counts) == {0, 1, 2}
    assert all(900 < n < 1100 for n in counts.values())


def test_a_clear_winner_needs_no_randomness() -> None:
    table, slots = table_of(3)
    table.inflight[slots] = [1, 0, 1]

    class NoRandom(random.Random):
        def choice(self, seq: Any) -> Any:
            raise AssertionError("no tie to break")

    scored = choose(
        table,
        slots,
        model=MODEL,
        signals=signals_of(table),
        prefix_blocks=np.zeros(3),
        total_blocks=0,
        weights=Weights(),
        balance=Balance(),
        rng=NoRandom(),
    )
    assert scored.index == 1


# --- balance override --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("loads", "overridden"),
    [
        ((16, 0), False),  # exactly the absolute threshold: not past it
        ((17, 0), True),
        ((10, 0), False),
        ((40, 20), True),  # 20 over, 2x
        ((52, 35), False),  # 17 over, but less than 1.5x
        ((54, 35), True),  # 19 over and more than 1.5x
        ((30, 30), False),
    ],
)
def test_balance_override_thresholds(loads: tuple[int, int], overridden: bool) -> None:
    """Worker 0 holds the whole prefix; worker 1 none. Affinity holds until the load gap is
    past both thresholds; then load wins and worker 1 is chosen."""
    table, slots = table_of(2)
    table.inflight[slots] = loads
    scored = pick(table, slots, Weights(), prefix=[4, 0], total=4)
    assert scored.affinity_overridden is overridden
    if loads[0] > loads[1]:
        assert scored.index == (1 if overridden else 0)
    assert scored.prefix_blocks == (0 if overridden else 4)


def test_balance_counts_the_engine_queue() -> None:
    table, slots = table_of(2)
    table.inflight[slots] = [2, 0]
    engine(table, slots[0], waiting=20)
    scored = pick(table, slots, Weights(), prefix=[4, 0], total=4)
    assert scored.affinity_overridden
    assert scored.index == 1
    # A stale queue is unknown and counts as none: 2 against 0 is within the balance.
    scored = pick(table, slots, Weights(), prefix=[4, 0], total=4, now=NOW + 2)
    assert not scored.affinity_overridden
    assert scored.index == 0


def test_balance_thresholds_are_configurable() -> None:
    table, slots = table_of(2)
    table.inflight[slots] = [5, 0]
    tight = Balance(abs_threshold=2, rel_threshold=1.0)
    assert pick(table, slots, Weights(), prefix=[4, 0], total=4, balance=tight).index == 1
    assert pick(table, slots, Weights(), prefix=[4, 0], total=4).index == 0


def test_one_candidate_is_never_imbalanced() -> None:
    table, slots = table_of(1)
    table.inflight[slots] = [100]
    scored = pick(table, slots, Weights(), prefix=[2], total=2)
    assert (scored.index, scored.affinity_overridden, scored.prefix_blocks) == (0, False, 2)


def test_affinity_beats_a_small_load_gap() -> None:
    """Default weights: a full prefix match (3) outweighs the whole queue range (2)."""
    table, slots = table_of(3)
    table.inflight[slots] = [3, 0, 0]
    assert winners(table, slots, Weights(), prefix=[4, 0, 0], total=4) == {0}
    # A partial match does not.
    assert winners(table, slots, Weights(), prefix=[2, 0, 0], total=4) == {1, 2}


# --- affinity fading with load (Balance.fade) ------------------------------------------------

FADE = Balance(abs_threshold=4, rel_threshold=1.0, fade=True)
AFFINITY = Weights(prefix=3, queue=0, kv_cache=0, latency=0, lora=0)


@pytest.mark.parametrize(
    ("loads", "winner", "faded"),
    [
        ((0, 0), 0, False),  # equal load: the whole match counts
        ((1, 0), 0, True),  # 3 x 3/4 = 2.25 against 3 x 2/4 x 1 = 1.5
        ((2, 0), 1, True),  # 3 x 2/4 = 1.5 against 1.5: a tie, broken below by load
        ((4, 0), 1, True),  # at the threshold: nothing left
        ((9, 9), 0, False),
    ],
)
def test_affinity_fades_with_each_candidates_own_excess_load(
    loads: tuple[int, int], winner: int, faded: bool
) -> None:
    """Worker 0 holds 4 of 4 blocks, worker 1 holds 2: worker 0 keeps 1 - excess/4 of its
    affinity; the winner of a tie is the less loaded (queue weight 0.01)."""
    table, slots = table_of(2)
    table.inflight[slots] = loads
    weights = Weights(prefix=3, queue=0.01, kv_cache=0, latency=0, lora=0)
    scored = pick(table, slots, weights, prefix=[4, 2], total=4, balance=FADE)
    assert scored.index == winner
    assert scored.affinity_overridden is faded


def test_fading_spares_candidates_within_the_relative_threshold() -> None:
    table, slots = table_of(2)
    table.inflight[slots] = [14, 10]  # 4 over, but only 1.4x the idlest
    loose = Balance(abs_threshold=4, rel_threshold=1.5, fade=True)
    scored = pick(table, slots, AFFINITY, prefix=[4, 0], total=4, balance=loose)
    assert (scored.index, scored.affinity_overridden) == (0, False)
    table.inflight[slots] = [16, 10]  # 1.6x: past both, and 6 over: nothing left
    scored = pick(table, slots, AFFINITY, prefix=[4, 0], total=4, balance=loose)
    assert scored.affinity_overridden
    assert winners(table, slots, AFFINITY, prefix=[4, 0], total=4, balance=loose) == {0, 1}


def test_fade_with_a_zero_threshold_keeps_affinity_only_on_the_idlest() -> None:
    table, slots = table_of(3)
    table.inflight[slots] = [1, 0, 0]
    zero = Balance(abs_threshold=0, rel_threshold=1.0, fade=True)
    assert winners(table, slots, AFFINITY, prefix=[4, 2, 0], total=4, balance=zero) == {1}
