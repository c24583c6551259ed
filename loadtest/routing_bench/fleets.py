"""The engines a run puts its router in front of: the project's simulated engines, or
Dynamo's mock engines (`loadtest.mocker_engines`).

A fleet starts fresh engines for every (router, rate) run (cold caches) and says where
they serve (`Engines.urls`), where their metrics are (`metrics_urls`, and the port a
kinference pool scrapes them on), which counters they keep, and, for Dynamo's KV router,
the router's own URL (its mockers have no endpoints of their own).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from loadtest.mocker_engines import EVENTS_OFFSET, MockerSetup, kv_router, mockers
from loadtest.routing_bench.engines import SIM_COUNTERS, EngineSetup, engines_running
from loadtest.sim_engine.prefill import DEFAULT_BATCHED_TOKENS

# What Dynamo's mocker counts (it keeps no prefix-cache or token counters): requests only.
MOCKER_COUNTERS = {"requests": "vllm:e2e_request_latency_seconds_count"}


@dataclass(frozen=True)
class Precise:
    """What kinference's precise prefix mode needs of these engines."""

    events: str  # ZMQ address template per endpoint
    tokenizer: Path  # the model's tokenizer.json
    chat_template: Path  # a tokenizer_config.json holding it
    block_size: int


@dataclass(frozen=True)
class Engines:
    """Running engines, for one run."""

    urls: list[str]  # http://HOST:PORT of each engine ([] behind Dynamo's KV router)
    metrics_urls: list[str]  # each engine's Prometheus page, in the same order
    counters: Mapping[str, str]  # report key -> the engine's counter name
    metrics_port: int | None = None  # kinference scrapes here (None: on the endpoint)
    router_url: str = ""  # Dynamo's KV router, when the fleet runs behind it
    precise: Precise | None = None


class Fleet(Protocol):
    @property
    def kind(self) -> str:
        """ "sim" or "mocker"."""
        ...

    @property
    def count(self) -> int: ...

    def describe(self) -> str: ...

    def running(
        self, arrangement: str, log_dir: Path
    ) -> contextlib.AbstractAsyncContextManager[Engines]:
        """`arrangement`: "endpoints" (one URL per engine) or "dynamo-kv" (behind Dynamo's
        KV router; mocker fleets only)."""
        ...


@dataclass(frozen=True)
class SimFleet:
    setup: EngineSetup
    kind: str = "sim"

    @property
    def count(self) -> int:
        return self.setup.count

    def describe(self) -> str:
        setup = self.setup
        slow = ""
        if setup.slow_fraction:
            slow = (
                f", {setup.slow_fraction:.0%} of them {setup.slow_factor:g}x slower at everything"
            )
        prefill = (
            "side by side (the old simulator)"
            if setup.prefill_side_by_side
            else f"in turn (steps of {DEFAULT_BATCHED_TOKENS} tokens, as vLLM does)"
        )
        return (
            f"{setup.count} simulated engines (`loadtest/sim_engine`, in their own process), "
            f"each with a prefix cache of {setup.capacity_blocks} blocks of 64 characters and "
            f"{setup.max_num_seqs} batch slots, prompts prefilled {prefill}, "
            f"time scale {setup.time_scale:g}{slow}"
        )

    @contextlib.asynccontextmanager
    async def running(self, arrangement: str, log_dir: Path) -> AsyncIterator[Engines]:
        if arrangement != "endpoints":
            raise ValueError(f"the simulated engines have no {arrangement!r} arrangement")
        async with engines_running(self.setup, log_dir) as fleet:
            metrics = [f"{url}/metrics" for url in fleet.urls]
            yield Engines(fleet.urls, metrics, SIM_COUNTERS)


@dataclass(frozen=True)
class MockerFleet:
    setup: MockerSetup
    kind: str = "mocker"

    @property
    def count(self) -> int:
        return self.setup.count

    def describe(self) -> str:
        setup = self.setup
        tokens = setup.gpu_blocks * setup.block_size
        return (
            f"{setup.count} Dynamo mock engines (`dynamo.mocker` 1.6.1: vLLM-like scheduler "
            f"and KV block manager, CPU only), each with {setup.gpu_blocks} KV blocks of "
            f"{setup.block_size} tokens ({tokens // 1000}k tokens of cache) and "
            f"{setup.max_num_seqs} sequences, each on its own loopback address behind its own "
            "frontend (Dynamo's KV router: the same mockers behind one `--router-mode kv` "
            "frontend), metrics on their system port"
        )

    @contextlib.asynccontextmanager
    async def running(self, arrangement: str, log_dir: Path) -> AsyncIterator[Engines]:
        del log_dir  # the mockers keep their own log beside their discovery store
        if arrangement == "dynamo-kv":
            with kv_router(self.setup) as router:
                metrics = [engine.metrics_url for engine in router.engines]
                yield Engines([], metrics, MOCKER_COUNTERS, router_url=router.url)
            return
        if arrangement != "endpoints":
            raise ValueError(f"unknown arrangement {arrangement!r}")
        with mockers(self.setup) as engines:
            yield Engines(
                [f"http://{engine.endpoint}" for engine in engines],
                [engine.metrics_url for engine in engines],
                MOCKER_COUNTERS,
                metrics_port=engines[0].system_port,
                precise=Precise(
                    f"tcp://{{host}}:{{port+{EVENTS_OFFSET}}}",
                    self.setup.model / "tokenizer.json",
                    self.setup.model / "tokenizer_config.json",
                    self.setup.block_size,
                ),
            )


def reseeded(fleet: Fleet, seed: int) -> Fleet:
    """`fleet` as `--seed seed` would have built it: the simulated engines take the seed
    (their sampled texts); Dynamo's mockers have none."""
    if isinstance(fleet, SimFleet):
        return dataclasses.replace(fleet, setup=dataclasses.replace(fleet.setup, seed=seed))
    return fleet
