"""A precise Pick that replays only the candidates whose cached tokens could change the
choice (`routing.settle`) decides as one that replays every candidate: random thrashing
histories (`tests.kvcache.test_queue_replays`'s driver: events, evictions, queue changes,
capacity changes), Picks through the router, its picks, first tokens, final reports and
engine readings fed back alike; every Decision compared whole, the random tie-break
seeded identically, and the replays skipped counted."""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from unittest.mock import patch

from kinference.bodies import Body
from kinference.config import parse_policy
from kinference.kvcache.blocks import PromptBlocks, identities
from kinference.kvcache.pool import Request
from kinference.kvcache.precise import PreciseCaches, PreciseQuery
from kinference.kvevents.trust import WorkerTrust
from kinference.requests import parse_request
from kinference.routing import (
    PrefixIndex,
    ProviderHealth,
    Router,
    TenantGate,
    WorkerTable,
    worker_choice,
)
from kinference.routing import settle as settling
from kinference.routing.decision import Decision, LocalChoice, RouteQuery
from kinference.routing.features import EngineReading
from kinference.routing.learning import Served
from kinference.routing.plugins.base import PickContext
from kinference.routing.plugins.pipeline import Asked, Pipeline
from kinference.routing.policy import cooldowns_of
from tests.kvcache import test_queue_replays as replays

ENDPOINTS = [f"10.0.0.{i}:8000" for i in range(replays.SLOTS)]


def _policy(tokenizer: Path) -> str:
    endpoints = json.dumps(ENDPOINTS)
    return f"""
pools:
  - name: p
    endpoints: {endpoints}
    models: [m]
    prefix: {{mode: precise, events: "tcp://{{host}}:5557", tokenizer: {tokenizer},
             block_size: {replays.SIZE}}}
"""


def _everything(pipeline: Pipeline, ctx: PickContext, guard: object) -> None:
    """The reference: every candidate settled (every queue replayed), as before."""
    if ctx.unsettled is not None:
        ctx.unsettled.complete(ctx.cached_tokens)


class _Routed(replays._Driver):
    """The driver's Picks go through two routers over the same caches: `lazy` (settles
    what could change the choice) and `exact` (settles everything)."""

    def __init__(self, seed: int, tokenizer: Path, lora: bool = False) -> None:
        super().__init__(seed)
        self.lora = lora
        self.now = [0.0]
        policy = parse_policy(_policy(tokenizer))
        self.routers = [self._router(policy, seed) for _ in range(2)]
        self.ref = policy.pools[0].ref
        self.inflight: list[tuple[LocalChoice, LocalChoice]] = []
        self.picks = self.skipped = self.differ = 0

    def _router(self, policy: object, seed: int) -> Router:
        caches = PreciseCaches(clock=lambda: 0.0)
        router = Router(
            policy,  # type: ignore[arg-type]
            table=WorkerTable(clock=lambda: self.now[0]),
            prefix=PrefixIndex(50_000),
            health=ProviderHealth(cooldowns_of(policy)),  # type: ignore[arg-type]
            tenants=TenantGate(),
            rng=random.Random(seed),
            clock=lambda: self.now[0],
            precise=caches,
        )
        return router

    def attach(self) -> None:
        """Both routers read this driver's pool, under the ref their catalog gives it."""
        ref = self.ref
        for slot in range(replays.SLOTS):
            trust = self.pool.trust[slot] = WorkerTrust(1e9, 1e9)
            trust.on_batch(0, 0.0)
            self.pool.endpoints[slot] = ENDPOINTS[slot]
        for router in self.routers:
            assert router.precise is not None
            router.precise.pools[ref] = self.pool
            assert [router.table.slot(e) for e in ENDPOINTS] == list(range(replays.SLOTS))

    def step(self) -> None:
        self.now[0] += 0.01
        rng = self.rng
        if self.inflight and rng.random() < 0.15:
            self._feedback(self.inflight.pop(rng.randrange(len(self.inflight))))
        if rng.random() < 0.1:
            self._reading()
        super().step()

    def pick(self) -> None:
        tokens = self.tokens()
        blocks = tuple(identities(tokens, replays.SIZE))
        prompt = PromptBlocks(max(len(tokens), 1), replays.SIZE, blocks)
        query = self._query(tokens, prompt)
        lazy, exact = self.routers
        counted = _Counted()
        with counted.installed():
            decided = lazy.route(query)
        with patch.object(worker_choice, "settle", _everything):
            expected = exact.route(query)
        self.picks += 1
        self.skipped += counted.skipped
        assert decided == expected, (decided, expected)
        self._sent(decided, expected, prompt)

    def _query(self, tokens: list[int], prompt: PromptBlocks) -> RouteQuery:
        text = " ".join(map(str, tokens)) or "x"
        raw = json.dumps({"model": "m", "prompt": text}).encode()
        request = parse_request(Body([raw], reserved=len(raw)))
        return RouteQuery(request, precise=PreciseQuery({self.ref: prompt}))

    def _sent(self, decided: Decision, expected: Decision, prompt: PromptBlocks) -> None:
        """Both routers learn of the pick; the engine queues it (most of the time)."""
        a, b = decided.local, expected.local
        if a is None or b is None:
            return
        for router, choice in zip(self.routers, (a, b), strict=True):
            router.picked(choice)
        self.inflight.append((a, b))
        if self.rng.random() < 0.8:
            key = next(self.keys)
            cached = int(a.predicted_cached_tokens or 0) // replays.SIZE
            request = Request(key, self.rng.randrange(40), 0.0)
            self.pool.sent(a.slot, prompt, cached, request)
            self.queued[a.slot].append(key)

    def _feedback(self, pair: tuple[LocalChoice, LocalChoice]) -> None:
        ttft = self.rng.uniform(5.0, 400.0)
        cached = self.rng.randrange(0, 64)
        final = self.rng.random() < 0.5
        for router, choice in zip(self.routers, pair, strict=True):
            router.first_token(choice, ttft)
            if final:
                served = Served(int(choice.prompt_tokens), cached, (), ttft, 50.0)
                router.final(choice, served)
        if not final:
            self.inflight.append(pair)

    def _reading(self) -> None:
        endpoint = self.rng.choice(ENDPOINTS)
        waiting = float(self.rng.randrange(0, 6))
        running = float(self.rng.randrange(0, 9))
        kv = self.rng.choice((None, 0.1, 0.5, 0.95, 0.99, 0.99))
        # the request's model as an adapter loaded there: the LoRA scorer answers
        adapters = frozenset({"m"}) if self.lora and self.rng.random() < 0.3 else frozenset()
        for router in self.routers:
            reading = EngineReading(waiting, running, kv, adapters, scraped_at=self.now[0])
            router.engine_reading(endpoint, True, reading)


class _Counted:
    """Counts the candidates `settle` leaves unsettled (replays skipped)."""

    def __init__(self) -> None:
        self.skipped = 0

    @contextmanager
    def installed(self) -> Iterator[None]:
        real = settling.settle

        def counting(pipeline: Pipeline, ctx: PickContext, guard: object) -> Asked | None:
            asked = real(pipeline, ctx, guard)  # type: ignore[arg-type]
            if ctx.unsettled is not None:
                self.skipped += len(ctx.unsettled.positions)
            return asked

        with patch.object(worker_choice, "settle", counting):
            yield


def _run(tokenizer: Path, seeds: range, steps: int, lora: bool = False) -> tuple[int, int]:
    picks = skipped = 0
    for seed in seeds:
        driver = _Routed(seed, tokenizer, lora)
        driver.attach()
        for _ in range(steps):
            driver.step()
        picks, skipped = picks + driver.picks, skipped + driver.skipped
    return picks, skipped


def test_settling_only_what_could_change_the_choice_decides_as_settling_all(
    tmp_path: Path,
) -> None:
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    picks, skipped = _run(tokenizer, range(30), 400)
    assert picks > 2000 and skipped > 500, (picks, skipped)


def test_with_another_scorer_answering_every_candidate_is_settled(tmp_path: Path) -> None:
    tokenizer = tmp_path / "tokenizer.json"
    tokenizer.write_text("{}")
    picks, _ = _run(tokenizer, range(10), 400, lora=True)
    assert picks > 500, picks
