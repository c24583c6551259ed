"""A worker's queue replayed once per state (`PoolCaches.replays`): every Pick's answer is
the one a fresh replay gives (`reference`, `survivors` as it was before the replay was
cached), whatever events, queue changes and prompts came between, and a change drops it."""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence
from typing import Any
from unittest.mock import patch

import numpy as np

from kinference.kvcache import replan
from kinference.kvcache.ageing import WorkerAges
from kinference.kvcache.blocks import BlockId, PromptBlocks, identities
from kinference.kvcache.pool import PoolCaches, Request
from kinference.kvcache.queue import EngineQueue
from kinference.kvcache.replan import MAX_REPLAYED_BLOCKS, Plan
from kinference.kvcache.replayed import Replayed, _Replay
from kinference.kvevents.events import AllBlocksCleared, BlockRemoved, BlockStored

SIZE = 4  # tokens a block
SLOTS = 3


def reference(
    queue: EngineQueue,
    ages: WorkerAges,
    *,
    held: Mapping[BlockId, object],
    room: int,
    blocks: Sequence[BlockId],
    depth: int,
) -> int:
    """`kvcache.queue.survivors` before its replay was split from its last step (main de26e26)."""
    if depth == 0 or queue.work() <= room:
        return depth
    order = ages.order()
    replay = _Replay(order, len(ages.touched), held, room)
    waiting = []
    for request in queue.requests.values():
        if request.running:
            ranks = order.ranks(request.blocks)
            replay.use(request.blocks, ranks, replay.newer_of(request.blocks), request.decode)
        else:
            waiting.append(request)
    for request in queue.requests.values():
        if request.running:
            unstored = sum(1 for _ in itertools.filterfalse(held.__contains__, request.blocks))
            replay.compute(unstored + request.unnamed + request.decode, request.blocks)
    budget = MAX_REPLAYED_BLOCKS
    for request in waiting:
        budget -= len(request.blocks)
        if budget < 0:
            replay.compute(len(request.blocks) + request.unnamed + request.decode, ())
            continue
        ranks, newer = order.ranks(request.blocks), replay.newer_of(request.blocks)
        missing = len(request.blocks) - int(replay.present(request.blocks, ranks, newer).sum())
        replay.use(request.blocks, ranks, newer, request.decode)
        replay.compute(missing + request.unnamed + request.decode, request.blocks)
    prefix = blocks[: depth + len(replay.newer)]
    found = replay.present(prefix, order.ranks(prefix), replay.newer_of(prefix))
    gone = np.flatnonzero(~found)
    return int(gone[0]) if len(gone) else depth


def _same_as_afresh(pool: PoolCaches, slot: int) -> None:
    """The worker's replay, as cached and planned, is a fresh replay's state: what it evicted
    of the old order, the places taken there, the room left and the requests' blocks."""
    cached, queue = pool.replays.get(slot), pool.queues[slot]
    if cached is None or cached[0] != queue.version:  # not asked since (a depth of 0)
        return
    ages, held = pool.ages[slot], pool.index.held(slot)
    fresh = replan.planned(queue, ages, held=held, room=cached[1])[0].replay
    found = cached[2].replay
    if fresh is None or found is None:
        assert fresh is found
        return
    assert (found.evicted, found.room, found.outputs) == (fresh.evicted, fresh.room, fresh.outputs)
    assert found.taken.tolist() == fresh.taken.tolist()
    assert found.newer.keys() == fresh.newer.keys()
    assert not fresh.exhausted or list(found.newer) == list(fresh.newer)
    order = ages.order()
    for named in pool.plans[slot].named.values():  # kept for the next replays: as named now
        assert named.keys.tolist() == order.keys(named.blocks).tolist()
        assert named.held.tolist() == fresh.held_of(named.blocks).tolist()


class _Driver:
    """Random events, queue changes and Picks on one pool, each Pick checked against a fresh
    replay."""

    def __init__(self, seed: int, document_blocks: int = 6) -> None:
        self.rng = random.Random(seed)
        self.pool = PoolCaches("p", SIZE, clock=lambda: 0.0)
        self.hashes = itertools.count(1)
        self.live: dict[int, list[int]] = {s: [] for s in range(SLOTS)}  # engine hashes
        self.keys = itertools.count(1)
        self.tickets = itertools.count(1)
        self.queued: dict[int, list[int]] = {s: [] for s in range(SLOTS)}
        self.lazy: list[tuple[int, tuple[BlockId, ...]]] = []
        # a few documents, each prompt one of them and a question: shared prefixes
        self.documents = [
            [self.rng.randrange(50) for _ in range(SIZE * document_blocks)] for _ in range(3)
        ]
        self.document_blocks = document_blocks
        self.checked = self.cut = 0
        self.sent_tokens: dict[int, list[list[int]]] = {s: [] for s in range(SLOTS)}
        self.weights = (6, 3, 5, 2, 2, 1, 1, 1, 8, 0, 0, 0)

    def tokens(self) -> list[int]:
        document = self.rng.choice(self.documents)
        document = document[: SIZE * self.rng.randrange(self.document_blocks + 1)]
        return document + [self.rng.randrange(1000) for _ in range(self.rng.randrange(40))]

    def step(self) -> None:
        rng, pool = self.rng, self.pool
        slot = rng.randrange(SLOTS)
        op = rng.choices(range(len(self.weights)), self.weights)[0]
        if op == 0:  # stores a prompt's leading blocks under new engine hashes
            self.store(slot, self.tokens())
        elif op == 9:  # a decode step's new blocks (tokens never seen)
            self.store(slot, [rng.randrange(10**6, 10**7) for _ in range(SIZE * rng.randint(1, 3))])
        elif op == 10 and self.sent_tokens[slot]:  # a prefill: a routed prompt's blocks
            self.store(slot, rng.choice(self.sent_tokens[slot]))
        elif op == 11 and self.live[slot]:  # the oldest evicted
            gone, self.live[slot] = self.live[slot][:2], self.live[slot][2:]
            pool.apply(slot, [BlockRemoved(tuple(gone))])
        elif op == 1 and self.live[slot]:  # evicts some
            gone = rng.sample(self.live[slot], rng.randint(1, len(self.live[slot])))
            self.live[slot] = [h for h in self.live[slot] if h not in gone]
            pool.apply(slot, [BlockRemoved(tuple(gone))])
        elif op == 2:  # routed there
            self.send(slot)
        elif op == 3 and self.queued[slot]:
            pool.started(slot, rng.choice(self.queued[slot]))
        elif op == 4 and self.queued[slot]:
            key = self.queued[slot].pop(rng.randrange(len(self.queued[slot])))
            pool.finished(slot, key)
        elif op == 5 and self.lazy:  # a lazy prompt's rest named
            pool.complete(*self.lazy.pop(0), 0.0)
        elif op == 6:
            pool.apply(slot, [AllBlocksCleared()])
            self.live[slot] = []
        elif op == 7:
            pool.capacity = rng.choice((None, 8, 20, 40, pool.capacity))
        else:
            self.pick()

    def store(self, slot: int, tokens: list[int]) -> None:
        whole = len(tokens) // SIZE * SIZE
        hashes = tuple(itertools.islice(self.hashes, whole // SIZE))
        self.pool.apply(slot, [BlockStored(hashes, None, tuple(tokens[:whole]), SIZE)])
        self.live[slot].extend(hashes)

    def send(self, slot: int) -> None:
        tokens = self.tokens()
        self.sent_tokens[slot].append(tokens)
        blocks = tuple(identities(tokens, SIZE))
        key, ticket = next(self.keys), next(self.tickets)
        if blocks and self.rng.random() < 0.3:
            prompt = PromptBlocks(len(tokens), SIZE, blocks[:1], exact=False, ticket=ticket)
            self.lazy.append((ticket, blocks))
        else:
            prompt = PromptBlocks(len(tokens), SIZE, blocks)
        cached = self.pool.index.longest(prompt.blocks, [slot])[slot]
        self.pool.sent(slot, prompt, cached, Request(key, self.rng.randrange(40), 0.0))
        self.pool.claim(ticket, slot, 0.0)
        self.queued[slot].append(key)

    def pick(self) -> None:
        pool = self.pool
        blocks = identities(self.tokens(), SIZE)
        for slot in range(SLOTS):
            depth = pool.extend(slot, blocks, pool.index.longest(blocks, [slot])[slot], 0.0)
            found = pool.surviving(slot, blocks, depth)
            ages, queue = pool.ages.get(slot), pool.queues.get(slot)
            if ages is None or queue is None or pool.capacity is None:
                assert found == depth
                continue
            room = pool.capacity - pool.index.blocks(slot)
            held = pool.index.held(slot)
            args = {"held": held, "room": room, "blocks": blocks, "depth": depth}
            assert found == reference(queue, ages, **args)
            _same_as_afresh(pool, slot)
            self.checked += 1
            self.cut += found < depth


def test_cached_replays_answer_as_a_fresh_replay() -> None:
    checked = cut = 0
    for seed in range(20):  # ~4,600 Picks checked, ~1,080 of them cut by the replay
        driver = _Driver(seed)
        for _ in range(300):
            driver.step()
        checked, cut = checked + driver.checked, cut + driver.cut
    assert checked > 1000 and cut > 50  # the replay evicted part of many matches


def _planned_runs(document_blocks: int) -> dict[str, int]:
    """40 seeded runs with decode steps (fresh blocks), prefills of routed prompts and
    evictions between Picks, fewer queue changes; every Pick checked against a fresh replay
    (`_Driver.pick`). Counts how the replays went: `reused` whole steps replayed again on
    the new order and room (`_again`), `requeued` those after the queue changed (a send, a
    start, an end: `_restep`), `resplit` those after a touch split blocks' keys, `looked`
    requests' keys and held blocks from an earlier replay."""
    counts = dict.fromkeys(("checked", "cut", "reused", "requeued", "resplit", "looked"), 0)
    again, of, restep = replan._again, replan.Plan._of, replan._restep
    last: list[str] = []

    def counted_again(queue: EngineQueue, plan: Plan, replay: _Replay) -> Replayed | None:
        found = again(queue, plan, replay)
        if found is not None:
            counts["reused"] += 1
            for how in last:
                counts[how] += 1
        last.clear()
        return found

    def counted_restep(queue: EngineQueue, plan: Plan) -> None:
        last.append("requeued")
        restep(queue, plan)

    def counted_of(plan: Plan, key: int, *args: Any) -> replan.Named:
        counts["looked"] += key in plan.named
        return of(plan, key, *args)

    planned = replan.planned

    def counted_planned(queue: EngineQueue, ages: WorkerAges, **kwargs: Any) -> Any:
        plan = kwargs.get("plan")
        last.clear()
        if plan is not None and plan.splits != ages.splits and plan.newer is not None:
            last.append("resplit")
        return planned(queue, ages, **kwargs)

    with (
        patch.object(replan, "_again", counted_again),
        patch.object(replan, "_restep", counted_restep),
        patch.object(Plan, "_of", counted_of),
        patch("kinference.kvcache.pool.planned", counted_planned),
    ):
        for seed in range(40):
            driver = _Driver(seed, document_blocks)
            driver.weights = (1, 1, 2, 1, 1, 1, 0, 0, 8, 6, 3, 3)
            for _ in range(300):
                driver.step()
            counts["checked"] += driver.checked
            counts["cut"] += driver.cut
    return counts


def test_replays_after_event_batches_answer_as_a_fresh_replay() -> None:
    """Replays from the plan (`kvcache.replan`: keys and held blocks of requests no batch
    named, whole steps after batches and queue changes) answer as a fresh replay."""
    counts = _planned_runs(6)
    assert counts["checked"] > 1000 and counts["cut"] > 50
    assert counts["reused"] > 300  # whole steps replayed again on the new order and room
    assert counts["requeued"] > 300  # ... after a send, start or end, without a full replay
    assert counts["looked"] > 1000  # a request's keys and held blocks from an earlier replay


def test_replays_after_split_touches_answer_as_a_fresh_replay() -> None:
    """Documents of 24 blocks: touches repeat an earlier touch's head and split it
    (`WorkerAges._split` re-keys its tail); the plan keeps its steps, names keys again."""
    counts = _planned_runs(24)
    assert counts["checked"] > 1000 and counts["cut"] > 50
    assert counts["resplit"] > 20 and counts["requeued"] > 300


def _busy_worker() -> tuple[PoolCaches, tuple[BlockId, ...]]:
    """Worker 0 holds a prompt, full (capacity its 10 blocks), with a request queued that
    will compute 10 blocks: our prompt's tail goes first."""
    pool = PoolCaches("p", SIZE, clock=lambda: 0.0)
    tokens = list(range(40))
    pool.apply(0, [BlockStored(tuple(range(1, 11)), None, tuple(tokens), SIZE)])
    pool.capacity = 10
    other = PromptBlocks(40, SIZE, tuple(identities(list(range(100, 140)), SIZE)))
    pool.sent(0, other, 0, Request(1, 0, 0.0))
    return pool, tuple(identities(tokens, SIZE))


def test_a_replay_is_reused_until_the_workers_state_changes() -> None:
    pool, blocks = _busy_worker()
    assert pool.surviving(0, blocks, 10) == 0  # all 10 evicted before it runs
    replayed = pool.replays[0]
    assert pool.surviving(0, blocks[:5], 5) == 0
    assert pool.replays[0] is replayed  # another prompt, the same replay
    pool.started(0, 1)  # now running: it keeps its blocks, evicts ours still
    assert pool.surviving(0, blocks, 10) == reference(
        pool.queues[0], pool.ages[0], held=pool.index.held(0), room=0, blocks=blocks, depth=10
    )
    assert pool.replays[0] is not replayed
    pool.finished(0, 1)  # nothing ahead
    assert pool.surviving(0, blocks, 10) == 10


def test_events_and_the_capacity_drop_the_replay() -> None:
    pool, blocks = _busy_worker()
    assert pool.surviving(0, blocks, 10) == 0
    pool.apply(0, [BlockRemoved((6, 7, 8, 9, 10))])  # room for half of what it computes
    assert 0 not in pool.replays
    assert pool.surviving(0, blocks, 5) == 0
    pool.capacity = 100  # room for all of it: nothing evicted (no event says so)
    assert pool.surviving(0, blocks, 5) == 5
    pool.apply(0, [AllBlocksCleared()])
    assert 0 not in pool.replays
