"""A block's age on a slot (distinct blocks recorded on it since: its LRU stack distance,
`prefix_store.MAX_WALK`): `PyPrefixStore` counts it over its last touches (`WINDOW`) and
walks only before them; it answers as the walk (main's code, below) and as the native
store, at bounds past `MAX_WALK`, windows cut often and prompts recorded again and again."""

from __future__ import annotations

import itertools
import random
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest

from kinference.routing import prefix_store
from kinference.routing.prefix_store import MAX_WALK, PyPrefixStore

try:
    from kinference.native._prefix import PrefixStore
except ImportError:  # not built: the Python store is still held to the walk
    NATIVE: tuple[Callable[[], Any], ...] = ()
else:
    NATIVE = (PrefixStore,)


def walked(store: PyPrefixStore, slot: int, hashes: Sequence[int]) -> tuple[int, int | None]:
    """`held` as it was: the LRU walked from its most recent end, at most `MAX_WALK`."""
    lru = store._lru.get(slot)
    if not hashes or lru is None or hashes[0] not in lru:
        return 0, None
    blocks = store._longest(slot, hashes)
    deepest = hashes[blocks - 1]
    for rank, block in enumerate(itertools.islice(reversed(lru), MAX_WALK)):
        if block == deepest:
            return blocks, rank
    return blocks, min(store._touches.get(slot, 0) - lru[deepest], len(lru) - 1)


def prompts(rng: random.Random) -> list[tuple[int, ...]]:
    """Documents of up to ~1,500 blocks sharing stems, a few with a block twice."""
    stems = [[rng.getrandbits(64) for _ in range(rng.randint(1, 1200))] for _ in range(6)]
    made = []
    for stem in stems:
        for _ in range(4):
            tail = [rng.getrandbits(64) for _ in range(rng.randint(0, 300))]
            prompt = [*stem[: rng.randint(1, len(stem))], *tail]
            if rng.random() < 0.2:
                prompt.insert(rng.randrange(len(prompt)), rng.choice(prompt))
            made.append(tuple(prompt))
    return made


SHIPPED = prefix_store.WINDOW


@pytest.mark.parametrize("window", [64, 1024, SHIPPED])
@pytest.mark.parametrize("seed", range(3))
def test_the_counted_age_is_the_walked_one(
    monkeypatch: pytest.MonkeyPatch, window: int, seed: int
) -> None:
    monkeypatch.setattr(prefix_store, "WINDOW", window)
    rng = random.Random(seed)
    python, natives = PyPrefixStore(), [make() for make in NATIVE]
    stores: list[Any] = [python, *natives]
    documents = prompts(rng)
    seen: Counter[str] = Counter()
    for _ in range(700):
        slot, prompt, roll = rng.randrange(2), rng.choice(documents), rng.random()
        if roll < 0.5:
            bound = rng.choice([5_000, 30_000])
            for store in stores:
                store.record(slot, prompt, bound)
        elif roll < 0.96:
            answer = walked(python, slot, prompt)
            known = answer[0] if rng.random() < 0.5 else 0
            assert [store.held(slot, prompt, known) for store in stores] == [answer] * len(stores)
            if answer[1] is not None:
                touch, (base, _) = python._lru[slot][prompt[answer[0] - 1]], python._last[slot]
                path = "counted" if touch >= base else "walked"
                seen[f"{path}, {'past' if answer[1] >= MAX_WALK else 'within'} MAX_WALK"] += 1
        elif roll < 0.98:
            bound = rng.choice([1_500, 6_000])
            for store in stores:
                store.trim(slot, bound)
        else:
            for store in stores:
                store.forget(slot)
    assert seen["counted, within MAX_WALK"]  # each way of answering was taken
    if window == SHIPPED:
        assert seen["counted, past MAX_WALK"]
    else:
        assert seen["walked, within MAX_WALK"] and seen["walked, past MAX_WALK"]
